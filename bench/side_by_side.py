"""Side by side with vLLM 0.19.0's own Triton kernels: same tensors, same timing.

Used by ``bench/gpu_kernels.py --vllm-src DIR``.  ``DIR`` is a folder holding vLLM's
``vllm/`` package sources (an installed vLLM's site-packages folder, or an unpacked
wheel); nothing of vLLM is kept in this repository.  Only the leaf modules with the
kernels are executed: ``vllm`` and its sub-packages become bare namespaces pointing into
``DIR`` (their ``__init__`` files, which would pull in the whole engine, are not run),
and the few engine modules those kernel files import (``vllm.triton_utils``,
``vllm.platforms``, ``vllm.logger``, ``vllm.envs``, ``vllm._custom_ops``,
``vllm.v1.attention.backends.utils``) are replaced by small stand-ins made here at run
time, holding just the names the kernel files read.

Kernels compared, called as vLLM's layers call them (state reached through random state
indices, as continuous batching leaves them):

* paged decode: ``triton_unified_attention.unified_attention`` (the TRITON_ATTN backend;
  3D split-softmax path below ``128 // kv_heads`` sequences, 16 segments, as the backend
  sets it up), bf16 and fp8 (e4m3, per-tensor scales) caches;
* Mamba2: ``mamba_ssm.selective_state_update`` (A, dt, dt_bias, D broadcast over the head
  dim with stride 0, as MambaMixer2 passes them);
* conv1d: ``causal_conv1d.causal_conv1d_update`` (state ``[slots, dim, K-1]`` with the
  channel stride 1, i.e. our ``[slots, K-1, dim]`` memory; vLLM writes its output into x);
* gated delta: ``fused_recurrent.fused_recurrent_gated_delta_rule_fwd`` (varlen, one token
  per sequence) and ``fused_recurrent_gated_delta_rule_packed_decode`` (what Qwen3.5 decode
  runs by default) against our ``gated_delta_step`` / ``gated_delta_step_packed``.

Each case reports both kernels' median graph-replay time, % of copy bandwidth (fewest
bytes moved over the measured copy bandwidth) and max error against the float64
reference on the first sequences of the same inputs.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import sys
import types
from pathlib import Path

import torch

_LEAVES = {
    "unified": "vllm.v1.attention.ops.triton_unified_attention",
    "mamba": "vllm.model_executor.layers.mamba.ops.mamba_ssm",
    "conv": "vllm.model_executor.layers.mamba.ops.causal_conv1d",
    "fla": "vllm.model_executor.layers.fla.ops.fused_recurrent",
}


class _Platform:
    """What the kernel files ask of ``vllm.platforms.current_platform`` on an NVIDIA GPU."""

    device_type = "cuda"

    def fp8_dtype(self):
        return torch.float8_e4m3fn

    def is_cuda_alike(self):
        return True

    def is_cuda(self):
        return True

    def is_rocm(self):
        return False

    def is_xpu(self):
        return False

    def is_device_capability_family(self, *a, **k):
        return False

    def get_device_capability(self, device_id=0):
        major, minor = torch.cuda.get_device_capability(device_id)
        return types.SimpleNamespace(major=major, minor=minor, to_int=lambda: major * 10 + minor)

    def has_device_capability(self, cap, device_id=0):
        major, minor = torch.cuda.get_device_capability(device_id)
        want = cap if isinstance(cap, int) else cap[0] * 10 + cap[1]
        return major * 10 + minor >= want

    def __getattr__(self, name):  # anything else: a harmless "no"
        return lambda *a, **k: False


def load_vllm(src: str | Path) -> dict[str, types.ModuleType]:
    """Import vLLM's kernel modules from ``src`` (a folder that holds ``vllm/``)."""
    import triton
    import triton.language as tl

    root = Path(src).resolve()
    if (root / "vllm").is_dir():
        root = root / "vllm"
    if not (root / "model_executor").is_dir():
        raise FileNotFoundError(f"{src}: no vllm/model_executor under it")

    def package(name: str) -> types.ModuleType:
        if name in sys.modules:
            return sys.modules[name]
        mod = types.ModuleType(name)
        rel = name.split(".")[1:]
        mod.__path__ = [str(root.joinpath(*rel))]
        sys.modules[name] = mod
        return mod

    def stub(name: str, **attrs) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
        return mod

    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]
    for pkg in ("vllm", "vllm.model_executor", "vllm.model_executor.layers", "vllm.model_executor.layers.fla",
                "vllm.model_executor.layers.fla.ops", "vllm.model_executor.layers.mamba",
                "vllm.model_executor.layers.mamba.ops", "vllm.v1", "vllm.v1.attention",
                "vllm.v1.attention.ops", "vllm.v1.attention.backends"):
        package(pkg)
    import triton.language.extra.libdevice as tldevice

    stub("vllm.triton_utils", triton=triton, tl=tl, tldevice=tldevice, HAS_TRITON=True,
         LOG2E=1.4426950408889634, LOGE2=0.6931471805599453)
    stub("vllm.platforms", current_platform=_Platform())
    stub("vllm.logger", init_logger=logging.getLogger)
    stub("vllm.envs", VLLM_BATCH_INVARIANT=False)
    stub("vllm._custom_ops")
    stub("vllm.v1.attention.backends.utils", PAD_SLOT_ID=-1)
    mods = {}
    for key, name in _LEAVES.items():
        path = root.joinpath(*name.split(".")[1:]).with_suffix(".py")
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        mods[key] = mod
    return mods


# ----------------------------------------------------------------------------- cases
def _idx(batch: int, slots: int, dev) -> torch.Tensor:
    return torch.randperm(slots, device=dev)[:batch].to(torch.int32)


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    """Relative max error: max |got - want| / max |want|."""
    e = float((got.double() - want.double()).abs().max()) / max(float(want.double().abs().max()), 1e-30)
    return math.inf if math.isnan(e) else e


def run(vllm: dict, K, time_pair, sets_for, copy_bw: float, dev, shapes: dict,
        only: str | None = None, variants: dict | None = None) -> list[dict]:
    """All side-by-side cases; prints each row as it is measured.

    ``time_pair(calls_a, calls_b)`` times vLLM's calls and ours on the same inputs,
    interleaved (median seconds per call of each)."""
    from enginecfg.kernels import _reference as ref
    from enginecfg.kernels.gated_delta import gated_delta_step, gated_delta_step_packed
    from enginecfg.kernels.mamba_ssm import causal_conv1d_update, selective_state_update
    from enginecfg.kernels.paged_attention import paged_decode_attention

    rows: list[dict] = []

    def emit(case, nbytes, t_v, t_o, err_v, err_o, extra=None):
        r = dict(case=case, bytes=nbytes, vllm_s=t_v, ours_s=t_o, ratio=t_o / t_v,
                 vllm_pct=100 * nbytes / t_v / copy_bw, ours_pct=100 * nbytes / t_o / copy_bw,
                 vllm_err=err_v, ours_err=err_o, **(extra or {}))
        rows.append(r)
        print(line(r), flush=True)

    def sweep(case, nbytes, sets, v_call, make_call, variants):
        """Time our kernel with each launch variant, interleaved with vLLM's as in the
        table (rows marked SWEEP, not in the table)."""
        for var in variants or ():
            try:
                t_v, t = time_pair([lambda s=s: v_call(s) for s in sets],
                                   [lambda s=s: make_call(s, var) for s in sets])
            except Exception as exc:  # noqa: BLE001
                print(f"SWEEP {case} {var}: {type(exc).__name__}: {exc}", flush=True)
                continue
            r = dict(case=f"SWEEP {case} {var}", bytes=nbytes, ours_s=t, ours_pct=100 * nbytes / t / copy_bw,
                     vllm_s=t_v, sweep_ratio=t / t_v, launch=var)
            rows.append(r)
            print(f"SWEEP {case:<36} {str(var):<44} {t * 1e6:8.1f} us {r['ours_pct']:6.1f} % "
                  f"(vLLM {t_v * 1e6:.1f}, ratio {t / t_v:.3f})", flush=True)

    def safe(fn, *a, **kw):
        try:
            fn(*a, **kw)
        except Exception as exc:  # noqa: BLE001 - one broken case must not end the run
            import traceback

            print(f"ERROR side-by-side {a[:1]}: {type(exc).__name__}: {exc}", flush=True)
            traceback.print_exc(limit=4)
            rows.append(dict(case=str(a[:1]), error=f"{type(exc).__name__}: {exc}"))
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    # ---------------- paged decode
    def decode(case, batch, ctx, bs, kvh, hq, head, kv_dtype=torch.bfloat16):
        fp8 = kv_dtype == torch.float8_e4m3fn
        esize = 1 if fp8 else 2
        kv_bytes = 2 * batch * ctx * kvh * head * esize
        nbytes = kv_bytes + 2 * batch * hq * head * 2
        nblk = math.ceil(ctx / bs)
        sets = []
        for _ in range(sets_for(kv_bytes)):
            nb = batch * nblk
            k = torch.randn((nb, bs, kvh, head), device=dev)
            v = torch.randn_like(k)
            ks = torch.tensor([1.0], device=dev)
            vs = torch.tensor([1.0], device=dev)
            if fp8:
                ks = k.abs().amax().reshape(1) / 448.0
                vs = v.abs().amax().reshape(1) / 448.0
                k, v = (k / ks).to(kv_dtype), (v / vs).to(kv_dtype)
            else:
                k, v = k.to(kv_dtype), v.to(kv_dtype)
            table = torch.randperm(nb, device=dev, dtype=torch.int32).view(batch, nblk)
            lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
            q = torch.randn((batch, hq, head), device=dev, dtype=torch.bfloat16)
            sets.append(dict(q=q, k=k, v=v, table=table, lens=lens, ks=ks, vs=vs,
                             o1=torch.empty_like(q), o2=torch.empty_like(q)))
        scale = head ** -0.5
        thr = 128 // kvh
        segs = 16
        d_pad = 1 << (head - 1).bit_length()
        so = torch.empty((thr, hq, segs, d_pad), dtype=torch.float32, device=dev)
        sm = torch.empty((thr, hq, segs), dtype=torch.float32, device=dev)
        se = torch.empty((thr, hq, segs), dtype=torch.float32, device=dev)
        cu = torch.arange(batch + 1, dtype=torch.int32, device=dev)

        def v_call(s):
            vllm["unified"].unified_attention(
                q=s["q"], k=s["k"], v=s["v"], out=s["o1"], cu_seqlens_q=cu, max_seqlen_q=1,
                seqused_k=s["lens"], max_seqlen_k=ctx, softmax_scale=scale, causal=True,
                window_size=(-1, -1), block_table=s["table"], softcap=0, q_descale=None,
                k_descale=s["ks"].expand(batch, kvh), v_descale=s["vs"].expand(batch, kvh),
                seq_threshold_3D=thr, num_par_softmax_segments=segs, softmax_segm_output=so,
                softmax_segm_max=sm, softmax_segm_expsum=se)

        def o_call(s):
            paged_decode_attention(s["q"], s["k"], s["v"], s["table"], s["lens"], scale, max_seq_len=ctx,
                                   out=s["o2"], k_scale=s["ks"] if fp8 else None,
                                   v_scale=s["vs"] if fp8 else None)

        t_v, t_o = time_pair([lambda s=s: v_call(s) for s in sets], [lambda s=s: o_call(s) for s in sets])
        s = sets[0]
        v_call(s)
        o_call(s)
        n = min(batch, 2)
        if fp8:
            want = ref.reference_paged_decode_attention_fp8(s["q"][:n], s["k"], s["v"], s["table"][:n],
                                                            s["lens"][:n], scale, s["ks"], s["vs"])
        else:
            want = ref.reference_paged_decode_attention(s["q"][:n], s["k"], s["v"], s["table"][:n],
                                                        s["lens"][:n], scale)
        emit(case, nbytes, t_v, t_o, _err(s["o1"][:n], want), _err(s["o2"][:n], want))

    # ---------------- Mamba2
    def mamba(case, batch, nheads, hd, ds, ng, sd, io=torch.bfloat16, variants=None):
        ssz = torch.empty((), dtype=sd).element_size()
        st_bytes = batch * nheads * hd * ds * ssz
        nbytes = 2 * st_bytes + batch * nheads * hd * 2 * 3 + 2 * batch * ng * ds * 2
        A = -torch.rand(nheads, device=dev) * 8 - 1
        D = torch.randn(nheads, device=dev)
        dtb = torch.rand(nheads, device=dev) * 0.1 - 4
        sets = []
        for _ in range(sets_for(2 * st_bytes)):
            slots = batch + max(1, batch // 4)
            sets.append(dict(
                state=torch.randn((slots, nheads, hd, ds), device=dev).to(sd),
                idx=_idx(batch, slots, dev),
                x=torch.randn((batch, nheads, hd), device=dev, dtype=io),
                dt=torch.randn((batch, nheads), device=dev, dtype=io),
                B=torch.randn((batch, ng, ds), device=dev, dtype=io),
                C=torch.randn((batch, ng, ds), device=dev, dtype=io),
                z=torch.randn((batch, nheads, hd), device=dev, dtype=io),
                o1=torch.empty((batch, nheads, hd), device=dev, dtype=io),
                o2=torch.empty((batch, nheads, hd), device=dev, dtype=io)))
        A3 = A[:, None, None].expand(nheads, hd, ds)
        D2 = D[:, None].expand(nheads, hd)
        dtb2 = dtb[:, None].expand(nheads, hd)

        def v_call(s):
            vllm["mamba"].selective_state_update(
                s["state"], s["x"], s["dt"][:, :, None].expand(batch, nheads, hd), A3, s["B"], s["C"],
                D=D2, z=s["z"], dt_bias=dtb2, dt_softplus=True, state_batch_indices=s["idx"], out=s["o1"])

        def o_call(s, var=None):
            var = var or {}
            selective_state_update(s["state"], s["x"], s["dt"], A, s["B"], s["C"], D, s["z"], dtb, True,
                                   state_indices=s["idx"], out=s["o2"], block_p=var.get("block_p"),
                                   num_warps=var.get("num_warps"))

        t_v, t_o = time_pair([lambda s=s: v_call(s) for s in sets], [lambda s=s: o_call(s) for s in sets])
        sweep(case, nbytes, sets, v_call, o_call, variants)
        s = sets[0]
        n = min(batch, 4)
        errs = []
        for call, key in ((v_call, "o1"), (o_call, "o2")):
            before = s["state"].clone()
            call(s)
            want_state = before.double()
            want = ref.reference_selective_state_update(
                want_state, s["x"][:n], s["dt"][:n], A, s["B"][:n], s["C"][:n], D, s["z"][:n], dtb, True,
                s["idx"][:n])
            rows_ = s["idx"][:n].long()
            errs.append(max(_err(s[key][:n], want),
                            _err(s["state"][rows_], want_state[rows_])))
            s["state"].copy_(before)
        emit(case, nbytes, t_v, t_o, *errs)

    # ---------------- conv1d
    def conv(case, batch, dim, width, sd, io=torch.bfloat16, variants=None):
        ssz = torch.empty((), dtype=sd).element_size()
        st_bytes = batch * (width - 1) * dim * ssz
        nbytes = 2 * st_bytes + 2 * batch * dim * 2 + dim * (width + 1) * 2
        w = (torch.randn((dim, width), device=dev) * 0.3).to(io)
        bias = (torch.randn((dim,), device=dev) * 0.1).to(io)
        sets = []
        for _ in range(sets_for(2 * st_bytes)):
            slots = batch + max(1, batch // 4)
            sets.append(dict(store=torch.randn((slots, width - 1, dim), device=dev).to(sd),
                             idx=_idx(batch, slots, dev),
                             x1=torch.randn((batch, dim), device=dev, dtype=io),
                             o2=torch.empty((batch, dim), device=dev, dtype=io)))
        for s in sets:
            s["x2"] = s["x1"].clone()

        def v_call(s):
            return vllm["conv"].causal_conv1d_update(s["x1"], s["store"].transpose(1, 2), w, bias, "silu",
                                                     conv_state_indices=s["idx"])

        def o_call(s, var=None):
            var = var or {}
            return causal_conv1d_update(s["store"], s["x2"], w, bias, "silu", state_indices=s["idx"],
                                        out=s["o2"], block_d=var.get("block_d"), num_warps=var.get("num_warps"))

        t_v, t_o = time_pair([lambda s=s: v_call(s) for s in sets], [lambda s=s: o_call(s) for s in sets])
        sweep(case, nbytes, sets, v_call, o_call, variants)
        s = sets[0]
        n = min(batch, 4)
        errs = []
        for call in (v_call, o_call):
            x = torch.randn((batch, dim), device=dev, dtype=io)
            s["x1"].copy_(x)
            s["x2"].copy_(x)
            before = s["store"].clone()
            want_state = before.double()
            got = call(s)
            want = ref.reference_causal_conv1d_update(want_state, x[:n], w, bias, "silu", s["idx"][:n])
            rows_ = s["idx"][:n].long()
            errs.append(max(_err(got[:n], want), _err(s["store"][rows_], want_state[rows_])))
            s["store"].copy_(before)
        emit(case, nbytes, t_v, t_o, *errs)

    # ---------------- gated delta
    def gdn(case, batch, nk, nv, dk, dv, sd, packed, io=torch.bfloat16, variants=None):
        ssz = torch.empty((), dtype=sd).element_size()
        st_bytes = batch * nv * dv * dk * ssz
        nbytes = 2 * st_bytes + batch * (2 * nk * dk + 2 * nv * dv + 2 * nv) * 2
        A_log = torch.log(1 + 15 * torch.rand(nv, device=dev))
        dt_bias = torch.randn(nv, device=dev) * 0.5
        sets = []
        for _ in range(sets_for(2 * st_bytes)):
            slots = batch + max(1, batch // 4)
            s = dict(state=(torch.randn((slots, nv, dv, dk), device=dev) * 0.1).to(sd),
                     idx=_idx(batch, slots, dev),
                     o2=torch.empty((batch, nv, dv), device=dev, dtype=io))
            if packed:
                s.update(mixed=torch.randn((batch, 2 * nk * dk + nv * dv), device=dev, dtype=io),
                         a=torch.randn((batch, nv), device=dev, dtype=io),
                         b=torch.randn((batch, nv), device=dev, dtype=io),
                         o1=torch.empty((batch, 1, nv, dv), device=dev, dtype=io))
            else:
                s.update(q=torch.randn((batch, nk, dk), device=dev, dtype=io),
                         k=torch.randn((batch, nk, dk), device=dev, dtype=io),
                         v=torch.randn((batch, nv, dv), device=dev, dtype=io),
                         g=-torch.rand((batch, nv), device=dev),
                         beta=torch.rand((batch, nv), device=dev))
            sets.append(s)
        cu = torch.arange(batch + 1, dtype=torch.int32, device=dev)
        scale = dk ** -0.5

        if packed:
            def v_call(s):
                vllm["fla"].fused_recurrent_gated_delta_rule_packed_decode(
                    s["mixed"], s["a"], s["b"], A_log, dt_bias, scale, s["state"], s["o1"], s["idx"],
                    use_qk_l2norm_in_kernel=True)
                return s["o1"][:, 0]

            def o_call(s, var=None):
                return gated_delta_step_packed(s["state"], s["mixed"], s["a"], s["b"], A_log, dt_bias,
                                               state_indices=s["idx"], out=s["o2"], launch=var)
        else:
            def v_call(s):
                o, _ = vllm["fla"].fused_recurrent_gated_delta_rule_fwd(
                    s["q"][None], s["k"][None], s["v"][None], s["g"][None], s["beta"][None], scale,
                    s["state"], inplace_final_state=True, cu_seqlens=cu, ssm_state_indices=s["idx"],
                    use_qk_l2norm_in_kernel=True)
                return o[0]

            def o_call(s, var=None):
                return gated_delta_step(s["state"], s["q"], s["k"], s["v"], s["g"], s["beta"],
                                        state_indices=s["idx"], out=s["o2"], launch=var)

        t_v, t_o = time_pair([lambda s=s: v_call(s) for s in sets], [lambda s=s: o_call(s) for s in sets])
        sweep(case, nbytes, sets, v_call, o_call, variants)
        s = sets[0]
        n = min(batch, 4)
        errs = []
        for call in (v_call, o_call):
            before = s["state"].clone()
            want_state = before.double()
            got = call(s)
            if packed:
                want = ref.reference_gated_delta_step_packed(
                    want_state, s["mixed"][:n], s["a"][:n], s["b"][:n], A_log, dt_bias, scale, True,
                    s["idx"][:n])
            else:
                want = ref.reference_gated_delta_step(want_state, s["q"][:n], s["k"][:n], s["v"][:n],
                                                      s["g"][:n], s["beta"][:n], scale, True, s["idx"][:n])
            rows_ = s["idx"][:n].long()
            errs.append(max(_err(got[:n], want), _err(s["state"][rows_], want_state[rows_])))
            s["state"].copy_(before)
        emit(case, nbytes, t_v, t_o, *errs)

    NEMO, QWEN, GEMMA = shapes["nemo"], shapes["qwen"], shapes["gemma"]
    want = (lambda tag: only is None or tag in only.split(","))
    if want("decode"):
        nq, nkv, nh = NEMO["num_attention_heads"], NEMO["num_key_value_heads"], NEMO["head_dim"]
        qh, qkv, qd = QWEN["num_attention_heads"], QWEN["num_key_value_heads"], QWEN["head_dim"]
        gq, gkv2, gd2 = GEMMA["num_attention_heads"], GEMMA["num_global_key_value_heads"], GEMMA["global_head_dim"]
        safe(decode, "decode nemotron h128 128x4k bs16", 128, 4096, 16, nkv, nq, nh)
        safe(decode, "decode nemotron h128 128x4k bs16 fp8", 128, 4096, 16, nkv, nq, nh, torch.float8_e4m3fn)
        safe(decode, "decode qwen3.5 h256 64x4k bs16", 64, 4096, 16, qkv, qh, qd)
        safe(decode, "decode gemma4 h512 64x4k bs16", 64, 4096, 16, gkv2, gq, gd2)
        safe(decode, "decode nemotron h128 1x128k", 1, 131072, 16, nkv, nq, nh)
        safe(decode, "decode qwen3.5 h256 1x64k", 1, 65536, 16, qkv, qh, qd)
        safe(decode, "decode qwen3.5 h256 1x64k fp8", 1, 65536, 16, qkv, qh, qd, torch.float8_e4m3fn)
    if want("mamba"):
        mh, mp, mn, mg = NEMO["mamba_num_heads"], NEMO["mamba_head_dim"], NEMO["ssm_state_size"], NEMO["n_groups"]
        for sd in (torch.float32, torch.bfloat16):
            for b in (256, 64, 8, 1):
                safe(mamba, f"mamba2 nemotron b{b} {str(sd)[6:]}", b, mh, mp, mn, mg, sd,
                     variants=(variants or {}).get("mamba", {}).get(b))
    if want("conv"):
        for sd in (torch.float32, torch.bfloat16):
            for label, dim, width in (("nemotron", shapes["nemo_conv_dim"], NEMO["conv_kernel"]),
                                      ("qwen3.5", shapes["qwen_conv_dim"], QWEN["linear_conv_kernel_dim"])):
                for b in (256, 8):
                    safe(conv, f"conv1d {label} b{b} {str(sd)[6:]}", b, dim, width, sd,
                         variants=(variants or {}).get("conv", {}).get(b))
    if want("gdn"):
        nk, nv, dk, dv = (QWEN["linear_num_key_heads"], QWEN["linear_num_value_heads"],
                          QWEN["linear_key_head_dim"], QWEN["linear_value_head_dim"])
        for packed in (False, True):
            for sd in (torch.float32, torch.bfloat16):
                for b in (256, 64, 8, 1):
                    fam = (variants or {}).get("gdn_packed" if packed else "gdn", {})
                    safe(gdn, f"gdn{' packed' if packed else ''} qwen3.5 b{b} {str(sd)[6:]}", b, nk, nv, dk, dv,
                         sd, packed, variants=fam.get((b, str(sd)[6:]), fam.get(b)))
    return rows


HEADER = (f"{'case':<40} {'MB':>7} {'vLLM us':>8} {'ours us':>8} {'ratio':>6} {'vLLM %':>6} {'ours %':>6} "
          f"{'vLLM err':>9} {'ours err':>9}")


def line(r: dict) -> str:
    if "error" in r:
        return f"{r['case']:<40} ERROR {r['error']}"
    return (f"{r['case'][:40]:<40} {r['bytes'] / 1e6:7.1f} {r['vllm_s'] * 1e6:8.1f} {r['ours_s'] * 1e6:8.1f} "
            f"{r['ratio']:6.3f} {r['vllm_pct']:6.1f} {r['ours_pct']:6.1f} {r['vllm_err']:9.2e} {r['ours_err']:9.2e}")


#: launch variants for ``--sweep`` (our kernels only; vLLM's run as shipped)
SWEEP_ALL = {
    "gdn": {b: [{"block_v": bv, "num_warps": w} for bv, w in ((32, 1), (32, 2), (32, 4), (16, 1), (64, 2),
                                                             (64, 4), (128, 8), (8, 1))]
            for b in (256, 64, 1)},
    "gdn_packed": {b: [{"block_v": bv, "num_warps": w} for bv, w in ((32, 1), (32, 2), (16, 1), (64, 4))]
                   for b in (256, 64)},
    "mamba": {b: [{"block_p": bp, "num_warps": w} for bp, w in ((4, 1), (4, 4), (8, 1), (8, 2), (16, 2),
                                                                (16, 4), (32, 4), (64, 8))]
              for b in (256, 8, 1)},
    "conv": {b: [{"block_d": bd, "num_warps": w} for bd, w in ((256, 1), (256, 2), (512, 2), (512, 4),
                                                               (1024, 4), (1024, 8), (2048, 8))]
             for b in (256,)},
}

#: launch variants for ``--sweep``, by family and batch (or (batch, state dtype)): the
#: gated-delta step with a float32 state at 256 sequences without the register cap (with
#: and without cache hints: the defaults before round 5), with a lower (144) and a higher
#: (255) cap; at 8 sequences with the cap (1.5 waves: the default leaves it off); constant
#: strides (on or off against the default) and 8-row tiles where a launch has few programs
#: (1 sequence).  Rounds 4 and 5 (bench/NOTES.md) also timed programs looping over tiles,
#: several heads a program, the state tile as one TMA copy, a one-axis grid and o stored
#: before the state: none faster, and removed.
_F32_256 = [{}, {"maxnreg": 0, "hints": True}, {"maxnreg": 0}, {"maxnreg": 144}, {"maxnreg": 255}]
_F32_8 = [{}, {"maxnreg": 168, "hints": False}]
_ONE = [{}, {"const": True}, {"const": False}, {"block_v": 8}]
SWEEP = {
    "gdn": {(256, "float32"): _F32_256, (8, "float32"): _F32_8, (1, "bfloat16"): _ONE, (1, "float32"): _ONE},
    "gdn_packed": {(256, "float32"): _F32_256, (8, "float32"): _F32_8, (1, "bfloat16"): _ONE,
                   (1, "float32"): _ONE},
}
