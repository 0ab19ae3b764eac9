#!/usr/bin/env python3
"""Check and time enginecfg's Triton kernels on a CUDA GPU, on real model shapes.

Run from the repository root:  ``python3 bench/gpu_kernels.py --out DIR``

1. measures the card's copy bandwidth (a large device-to-device copy, bytes read+written);
2. checks every kernel against its float64 reference on NemotronH (nemotron-3-nano-30b),
   Qwen3.5-27B and Gemma4 (26b-a4b) shapes, plus the hybrid page check on the page sizes
   those configs resolve to, plus state precision over 300 steps;
3. times every kernel with CUDA events over CUDA-graph replays (launch gaps removed; input
   sets rotated so the working set is well past L2), and eagerly (launch cost included),
   against a PyTorch baseline (SDPA on the gathered cache; the state updates in plain
   torch ops) timed the same way in the same run.

With ``--vllm-src DIR`` (a folder holding vLLM 0.19.0's ``vllm/`` sources: an installed
vLLM's site-packages, or an unpacked wheel) it instead runs the side-by-side mode of
``bench/side_by_side.py``: vLLM's own Triton kernels and ours on the same tensors, timed
the same way, one table (case, vLLM us, ours us, ratio, % of copy, max error of both);
``--sweep`` there adds launch-parameter variants of our kernels.

Achieved bandwidth counts the fewest bytes the step must move (each input read once,
each output and state written once).  Prints compact tables; writes ``gpu_kernels.json``
under ``--out``.  Needs torch and triton only: when ``enginecfg`` is not installed the
kernels are loaded straight from the checkout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _load_kernels():
    """``enginecfg.kernels`` from an install, or from this checkout without installing."""
    try:
        import enginecfg.kernels as k  # noqa: F401

        return k
    except ImportError:
        pass
    for name in [m for m in sys.modules if m == "enginecfg" or m.startswith("enginecfg.")]:
        del sys.modules[name]
    root = types.ModuleType("enginecfg")
    root.__path__ = []  # a bare namespace: the real __init__ pulls in the whole library
    sys.modules["enginecfg"] = root
    pipe = types.ModuleType("enginecfg.pipeline")
    pipe.__path__ = [str(REPO / "pipeline")]
    sys.modules["enginecfg.pipeline"] = pipe
    spec = importlib.util.spec_from_file_location(
        "enginecfg.kernels", REPO / "kernels" / "__init__.py",
        submodule_search_locations=[str(REPO / "kernels")])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["enginecfg.kernels"] = mod
    spec.loader.exec_module(mod)
    return mod


K = _load_kernels()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from enginecfg.kernels import checks  # noqa: E402
from enginecfg.kernels.gated_delta import gated_delta_step  # noqa: E402
from enginecfg.kernels.mamba_ssm import causal_conv1d_update, selective_state_update  # noqa: E402
from enginecfg.kernels.page_check import page_check  # noqa: E402
from enginecfg.kernels.paged_attention import (  # noqa: E402
    decode_launch_config,
    paged_decode_attention,
    paged_prefill_attention,
)

DEV = torch.device("cuda")
L2_ROTATE_BYTES = 512 << 20  # rotate input sets until a graph replay touches this much


# ----------------------------------------------------------------------------- shapes
def _config(name: str) -> dict:
    p = REPO / "tests" / "data" / "vllm-0.19.0" / "configs" / name / "config.json"
    if p.exists():
        cfg = json.loads(p.read_text())
        return cfg.get("text_config", cfg)
    return {}


NEMO = {"num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "mamba_num_heads": 64,
        "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4} | _config(
    "nemotron-3-nano-30b-a3b-bf16")
QWEN = {"num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256, "linear_num_key_heads": 16,
        "linear_num_value_heads": 48, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4} | _config("qwen3.5-27b")
GEMMA = {"num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "global_head_dim": 512,
         "num_global_key_value_heads": 2} | _config("gemma-4-26b-a4b")

NEMO_CONV_DIM = NEMO["mamba_num_heads"] * NEMO["mamba_head_dim"] + 2 * NEMO["n_groups"] * NEMO["ssm_state_size"]
QWEN_CONV_DIM = (2 * QWEN["linear_num_key_heads"] * QWEN["linear_key_head_dim"]
                 + QWEN["linear_num_value_heads"] * QWEN["linear_value_head_dim"])


def _hybrid_page(conv_dim, km1, ssm_elems, kvh, head, conv_bytes=2, ssm_bytes=4, kv_bytes=2, align=16):
    """Page size the hybrid alignment resolves to: the attention block grows (in steps of
    ``align`` tokens) until a block is at least the Mamba state; the Mamba page is padded."""
    conv = km1 * conv_dim * conv_bytes
    ssm = ssm_elems * ssm_bytes
    per_tok = 2 * kvh * head * kv_bytes
    block = align * math.ceil((conv + ssm) / per_tok / align)
    return dict(page=block * per_tok, attn=block * per_tok, mamba=[conv, ssm], block=block)


NEMO_PAGE = _hybrid_page(NEMO_CONV_DIM, NEMO["conv_kernel"] - 1,
                         NEMO["mamba_num_heads"] * NEMO["mamba_head_dim"] * NEMO["ssm_state_size"],
                         NEMO["num_key_value_heads"], NEMO["head_dim"])
QWEN_PAGE = _hybrid_page(QWEN_CONV_DIM, QWEN["linear_conv_kernel_dim"] - 1,
                         QWEN["linear_num_value_heads"] * QWEN["linear_value_head_dim"]
                         * QWEN["linear_key_head_dim"],
                         QWEN["num_key_value_heads"], QWEN["head_dim"])


# ----------------------------------------------------------------------------- timing
def _ev():
    return torch.cuda.Event(enable_timing=True)


def copy_bandwidth(nbytes: int = 4 << 30) -> float:
    """Bytes/s of a device-to-device copy, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 2, dtype=torch.int16, device=DEV).random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(10):
        a, b = _ev(), _ev()
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(times)


def _graph(calls, target_s: float = 0.03):
    """A CUDA graph of ``reps`` rounds over the calls (about ``target_s`` of work), and the
    number of calls it makes."""
    for c in calls:
        c()
    torch.cuda.synchronize()
    a, b = _ev(), _ev()
    a.record()
    for c in calls:
        c()
    b.record()
    torch.cuda.synchronize()
    one_round = max(a.elapsed_time(b) / 1e3, 1e-6)
    reps = max(1, min(int(target_s / one_round), max(1, 3000 // len(calls))))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            for c in calls:
                c()
    g.replay()
    torch.cuda.synchronize()
    return g, reps * len(calls)


def time_calls(calls, target_s: float = 0.03, eager: bool = True) -> dict:
    """Median seconds per call: CUDA-graph replays of the calls (rotating over the input
    sets they close over) and, if asked, the same calls launched eagerly."""
    g, n = _graph(calls, target_s)
    ts = []
    for _ in range(5):
        a, b = _ev(), _ev()
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    res = {"graph_s": statistics.median(ts) / n}
    del g
    if eager:
        ts = []
        for _ in range(3):
            a, b = _ev(), _ev()
            a.record()
            for _ in range(n // len(calls)):
                for c in calls:
                    c()
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        res["eager_s"] = statistics.median(ts) / n
    return res


def time_pair(calls_a, calls_b, rounds: int = 15, target_s: float = 0.03) -> tuple[float, float]:
    """Median seconds per call of two kernels on the same inputs (vLLM's and ours): each
    captured in its own CUDA graph, the two graphs replayed alternately, ``rounds`` times
    each, in A B B A order, so that a drift of clocks or temperature during the case falls
    on both alike; the median of each kernel's replays."""
    ga, na = _graph(calls_a, target_s)
    gb, nb = _graph(calls_b, target_s)
    ta, tb = [], []
    for i in range(rounds):
        order = ((ga, na, ta), (gb, nb, tb)) if i % 2 == 0 else ((gb, nb, tb), (ga, na, ta))
        for g, n, acc in order:
            a, b = _ev(), _ev()
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            acc.append(a.elapsed_time(b) / 1e3 / n)
    del ga, gb
    return statistics.median(ta), statistics.median(tb)


def _sets(bytes_per_set: int) -> int:
    return max(1, min(48, math.ceil(L2_ROTATE_BYTES / max(1, bytes_per_set))))


# ----------------------------------------------------------------------------- attention
def _paged(batch, ctx, block_size, kvh, head, dtype):
    nblk = math.ceil(ctx / block_size)
    num_blocks = batch * nblk
    k = torch.randn((num_blocks, block_size, kvh, head), device=DEV, dtype=dtype)
    v = torch.randn_like(k)
    table = torch.randperm(num_blocks, device=DEV, dtype=torch.int32).view(batch, nblk)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=DEV)
    return k, v, table, lens


def _sdpa_decode(q, k_cache, v_cache, table, ctx):
    """PyTorch baseline: gather the paged cache, then SDPA (all sequences ``ctx`` long)."""
    b, hq, d = q.shape
    kvh = k_cache.shape[2]
    k = k_cache[table].reshape(b, -1, kvh, d)[:, :ctx].transpose(1, 2)
    v = v_cache[table].reshape(b, -1, kvh, d)[:, :ctx].transpose(1, 2)
    return F.scaled_dot_product_attention(q[:, :, None, :], k, v, enable_gqa=True)[:, :, 0]


def bench_decode(name, batch, ctx, block_size, kvh, hq, head, dtype=torch.bfloat16,
                 launch=None, num_splits=None, baseline=True, eager=True):
    esize = torch.empty((), dtype=dtype).element_size()
    kv_bytes = 2 * batch * ctx * kvh * head * esize
    io_bytes = 2 * batch * hq * head * esize
    nsets = _sets(kv_bytes)
    sets = []
    for _ in range(nsets):
        k, v, table, lens = _paged(batch, ctx, block_size, kvh, head, dtype)
        q = torch.randn((batch, hq, head), device=DEV, dtype=dtype)
        sets.append((q, k, v, table, lens, torch.empty_like(q)))
    scale = head ** -0.5
    calls = [lambda s=s: paged_decode_attention(s[0], s[1], s[2], s[3], s[4], scale, max_seq_len=ctx,
                                                num_splits=num_splits, out=s[5], launch=launch)
             for s in sets]
    t = time_calls(calls, eager=eager)
    # correctness of exactly this launch on a slice of the timed inputs (2 sequences)
    q, k, v, table, lens, out = sets[0]
    got = out[:2].double()
    want = checks.ref.reference_paged_decode_attention(q[:2], k, v, table[:2], lens[:2], scale)
    err = float((got - want).abs().max())
    tol = checks.tolerance_for(dtype, want)
    row = dict(kind="decode", name=name, batch=batch, ctx=ctx, block_size=block_size, kvh=kvh, hq=hq,
               head=head, dtype=str(dtype).removeprefix("torch."), bytes=kv_bytes + io_bytes,
               sets=nsets, err=err, tol=tol, ok=err <= tol,
               cfg=decode_launch_config(batch, kvh, ctx, head, dtype, DEV, num_splits, launch), **t)
    if baseline:
        del sets, calls
        torch.cuda.empty_cache()
        k, v, table, lens = _paged(batch, ctx, block_size, kvh, head, dtype)
        q = torch.randn((batch, hq, head), device=DEV, dtype=dtype)
        try:
            row["torch_s"] = time_calls([lambda: _sdpa_decode(q, k, v, table, ctx)], eager=False)["graph_s"]
        except torch.OutOfMemoryError:
            row["torch_s"] = None
        del k, v
    torch.cuda.empty_cache()
    return row


def bench_prefill(name, batch, prefix, chunk, block_size, kvh, hq, head, dtype=torch.bfloat16, launch=None):
    ctx = prefix + chunk
    esize = torch.empty((), dtype=dtype).element_size()
    kv_bytes = 2 * batch * ctx * kvh * head * esize
    io_bytes = 2 * batch * chunk * hq * head * esize
    k, v, table, lens = _paged(batch, ctx, block_size, kvh, head, dtype)
    q = torch.randn((batch * chunk, hq, head), device=DEV, dtype=dtype)
    qsl = torch.arange(0, batch + 1, device=DEV, dtype=torch.int32) * chunk
    out = torch.empty_like(q)
    scale = head ** -0.5
    t = time_calls([lambda: paged_prefill_attention(q, k, v, table, lens, qsl, scale, max_query_len=chunk,
                                                    out=out, launch=launch)], eager=False)
    want = checks.ref.reference_paged_prefill_attention(q[:chunk], k, v, table[:1], lens[:1], qsl[:2], scale)
    err = float((out[:chunk].double() - want).abs().max())
    tol = checks.tolerance_for(dtype, want)
    flops = 4 * batch * hq * head * (chunk * prefix + chunk * chunk / 2)
    row = dict(kind="prefill", name=name, batch=batch, ctx=ctx, chunk=chunk, block_size=block_size,
               kvh=kvh, hq=hq, head=head, dtype=str(dtype).removeprefix("torch."),
               bytes=kv_bytes + io_bytes, flops=flops, err=err, tol=tol, ok=err <= tol, **t)
    del k, v
    torch.cuda.empty_cache()
    return row


# ----------------------------------------------------------------------------- recurrent states
def _torch_ssm(state, x, dt, A, B, C, D, z, dt_bias):
    """PyTorch baseline of one Mamba2 step (float32 math, state rounded to its dtype)."""
    rep = x.shape[1] // B.shape[1]
    d = F.softplus(dt.float() + dt_bias)
    dA = torch.exp(d * A)
    Bh = B.float().repeat_interleave(rep, 1)
    Ch = C.float().repeat_interleave(rep, 1)
    s = state.float() * dA[..., None, None] + (d[..., None] * x.float())[..., None] * Bh[:, :, None, :]
    state.copy_(s)
    y = torch.einsum("bhpn,bhn->bhp", s, Ch) + D[None, :, None] * x.float()
    zf = z.float()
    return (y * zf * torch.sigmoid(zf)).to(x.dtype)


def bench_ssm(name, batch, nheads, head_dim, dstate, ngroups, state_dtype, io=torch.bfloat16,
              block_p=None, num_warps=4, baseline=True):
    ssz = torch.empty((), dtype=state_dtype).element_size()
    isz = torch.empty((), dtype=io).element_size()
    st_bytes = batch * nheads * head_dim * dstate * ssz
    io_bytes = batch * nheads * head_dim * isz * 3 + 2 * batch * ngroups * dstate * isz
    nsets = _sets(2 * st_bytes)
    A = -torch.rand(nheads, device=DEV) * 8 - 1
    D = torch.randn(nheads, device=DEV)
    dtb = torch.rand(nheads, device=DEV) * 0.1 - 4
    sets = []
    for _ in range(nsets):
        sets.append(dict(
            state=torch.randn((batch, nheads, head_dim, dstate), device=DEV).to(state_dtype),
            x=torch.randn((batch, nheads, head_dim), device=DEV, dtype=io),
            dt=torch.randn((batch, nheads), device=DEV, dtype=io),
            B=torch.randn((batch, ngroups, dstate), device=DEV, dtype=io),
            C=torch.randn((batch, ngroups, dstate), device=DEV, dtype=io),
            z=torch.randn((batch, nheads, head_dim), device=DEV, dtype=io)))
    outs = [torch.empty_like(s["x"]) for s in sets]
    calls = [lambda s=s, o=o: selective_state_update(s["state"], s["x"], s["dt"], A, s["B"], s["C"], D,
                                                     s["z"], dtb, True, out=o, block_p=block_p,
                                                     num_warps=num_warps)
             for s, o in zip(sets, outs)]
    t = time_calls(calls)
    row = dict(kind="mamba2", name=name, batch=batch, nheads=nheads, head_dim=head_dim, dstate=dstate,
               ngroups=ngroups, dtype=str(state_dtype).removeprefix("torch."),
               bytes=2 * st_bytes + io_bytes, sets=nsets, block_p=block_p, num_warps=num_warps, **t)
    if baseline:
        s = sets[0]
        row["torch_s"] = time_calls([lambda: _torch_ssm(s["state"], s["x"], s["dt"], A, s["B"], s["C"], D,
                                                        s["z"], dtb)], eager=False)["graph_s"]
    del sets
    torch.cuda.empty_cache()
    return row


def _torch_conv(state, x, w, bias):
    window = torch.cat([state.float(), x.float()[:, None, :]], 1)
    o = torch.einsum("bkc,ck->bc", window, w.float()) + bias.float()
    state.copy_(window[:, 1:])
    return (o * torch.sigmoid(o)).to(x.dtype)


def bench_conv(name, batch, dim, width, state_dtype, io=torch.bfloat16, baseline=True, block_d=256,
               num_warps=4):
    ssz = torch.empty((), dtype=state_dtype).element_size()
    isz = torch.empty((), dtype=io).element_size()
    st_bytes = batch * (width - 1) * dim * ssz
    nbytes = 2 * st_bytes + 2 * batch * dim * isz + dim * (width + 1) * isz
    nsets = _sets(2 * st_bytes)
    w = torch.randn((dim, width), device=DEV, dtype=io)
    bias = torch.randn((dim,), device=DEV, dtype=io)
    sets = [(torch.randn((batch, width - 1, dim), device=DEV).to(state_dtype),
             torch.randn((batch, dim), device=DEV, dtype=io)) for _ in range(nsets)]
    outs = [torch.empty_like(x) for _, x in sets]
    calls = [lambda s=s, o=o: causal_conv1d_update(s[0], s[1], w, bias, "silu", out=o, block_d=block_d,
                                                   num_warps=num_warps)
             for s, o in zip(sets, outs)]
    t = time_calls(calls)
    row = dict(kind="conv1d", name=name, batch=batch, dim=dim, width=width,
               dtype=str(state_dtype).removeprefix("torch."), bytes=nbytes, sets=nsets, **t)
    if baseline:
        s = sets[0]
        row["torch_s"] = time_calls([lambda: _torch_conv(s[0], s[1], w, bias)], eager=False)["graph_s"]
    del sets
    torch.cuda.empty_cache()
    return row


def _torch_gdn(state, q, k, v, g, beta):
    rep = v.shape[1] // q.shape[1]
    qf = F.normalize(q.float(), dim=-1, eps=1e-6).repeat_interleave(rep, 1) * q.shape[-1] ** -0.5
    kf = F.normalize(k.float(), dim=-1, eps=1e-6).repeat_interleave(rep, 1)
    S = state.float() * torch.exp(g.float())[..., None, None]
    u = v.float() - torch.einsum("bhvk,bhk->bhv", S, kf)
    S = S + beta.float()[..., None, None] * u[..., None] * kf[:, :, None, :]
    state.copy_(S)
    return torch.einsum("bhvk,bhk->bhv", S, qf).to(v.dtype)


def bench_gdn(name, batch, nk, nv, dk, dv, state_dtype, io=torch.bfloat16, block_v=None, num_warps=8,
              baseline=True):
    ssz = torch.empty((), dtype=state_dtype).element_size()
    isz = torch.empty((), dtype=io).element_size()
    st_bytes = batch * nv * dv * dk * ssz
    io_bytes = batch * (2 * nk * dk + 2 * nv * dv + 2 * nv) * isz
    nsets = _sets(2 * st_bytes)
    sets = []
    for _ in range(nsets):
        sets.append(dict(
            state=(torch.randn((batch, nv, dv, dk), device=DEV) * 0.1).to(state_dtype),
            q=torch.randn((batch, nk, dk), device=DEV, dtype=io),
            k=torch.randn((batch, nk, dk), device=DEV, dtype=io),
            v=torch.randn((batch, nv, dv), device=DEV, dtype=io),
            g=(-torch.rand((batch, nv), device=DEV)).to(io),
            beta=torch.rand((batch, nv), device=DEV).to(io)))
    outs = [torch.empty_like(s["v"]) for s in sets]
    calls = [lambda s=s, o=o: gated_delta_step(s["state"], s["q"], s["k"], s["v"], s["g"], s["beta"],
                                               out=o, block_v=block_v, num_warps=num_warps)
             for s, o in zip(sets, outs)]
    t = time_calls(calls)
    row = dict(kind="gdn", name=name, batch=batch, nk=nk, nv=nv, dk=dk, dv=dv,
               dtype=str(state_dtype).removeprefix("torch."), bytes=2 * st_bytes + io_bytes, sets=nsets,
               block_v=block_v, num_warps=num_warps, **t)
    if baseline:
        s = sets[0]
        row["torch_s"] = time_calls([lambda: _torch_gdn(s["state"], s["q"], s["k"], s["v"], s["g"],
                                                        s["beta"])], eager=False)["graph_s"]
    del sets
    torch.cuda.empty_cache()
    return row


# ----------------------------------------------------------------------------- checks
def run_checks() -> list[dict]:
    out = []

    def add(thunk, label):
        res = _safe(thunk)
        if isinstance(res, dict):
            out.append(dict(label=label, name="error", passed=False, max_error=math.inf, tolerance=0.0,
                            seconds=0.0, error=res["error"]))
            return
        out.append(dict(label=label, name=res.name, passed=res.passed, max_error=res.max_error,
                        tolerance=res.tolerance, seconds=res.seconds))

    nq, nkv, nh = NEMO["num_attention_heads"], NEMO["num_key_value_heads"], NEMO["head_dim"]
    lens = [1, 100, 2049, 5000]
    for dt in ("bfloat16", "float16", "float32"):
        add(lambda: checks.check_paged_attention(nh, nkv, nq, 16, dt, lens, DEV, 1), f"nemotron decode bs16 {dt}")
    add(lambda: checks.check_paged_attention(nh, nkv, nq, NEMO_PAGE["block"], "bfloat16", lens, DEV, 2),
        f"nemotron decode bs{NEMO_PAGE['block']}")
    add(lambda: checks.check_paged_attention(nh, nkv, nq, 16, "bfloat16", [40000], DEV, 3), "nemotron decode 40k split")
    qh, qkv, qd = QWEN["num_attention_heads"], QWEN["num_key_value_heads"], QWEN["head_dim"]
    add(lambda: checks.check_paged_attention(qd, qkv, qh, QWEN_PAGE["block"], "bfloat16", lens, DEV, 4),
        f"qwen3.5 decode bs{QWEN_PAGE['block']}")
    add(lambda: checks.check_paged_attention(GEMMA["head_dim"], GEMMA["num_key_value_heads"],
                                     GEMMA["num_attention_heads"], 16, "bfloat16", lens, DEV, 5),
        "gemma4 decode head256")
    add(lambda: checks.check_paged_attention(GEMMA["global_head_dim"], GEMMA["num_global_key_value_heads"],
                                     GEMMA["num_attention_heads"], 16, "bfloat16", lens, DEV, 6),
        "gemma4 decode head512")
    add(lambda: checks.check_paged_attention(GEMMA["global_head_dim"], GEMMA["num_global_key_value_heads"],
                                     GEMMA["num_attention_heads"], 1056, "float16", [3000, 7], DEV, 7),
        "gemma4 decode head512 bs1056 fp16")
    add(lambda: checks.check_paged_attention(80, 2, 16, 784, "bfloat16", [900, 33], DEV, 8), "head80 bs784")
    add(lambda: checks.check_paged_prefill(nh, nkv, nq, NEMO_PAGE["block"], "bfloat16", [3000, 512, 9],
                                   [512, 512, 9], DEV, 9), f"nemotron prefill bs{NEMO_PAGE['block']}")
    add(lambda: checks.check_paged_prefill(qd, qkv, qh, QWEN_PAGE["block"], "bfloat16", [2000, 100],
                                   [300, 100], DEV, 10), f"qwen3.5 prefill bs{QWEN_PAGE['block']}")
    add(lambda: checks.check_paged_prefill(GEMMA["global_head_dim"], GEMMA["num_global_key_value_heads"],
                                   GEMMA["num_attention_heads"], 16, "bfloat16", [1500], [256], DEV, 11),
        "gemma4 prefill head512")
    mh, mp, mn, mg = NEMO["mamba_num_heads"], NEMO["mamba_head_dim"], NEMO["ssm_state_size"], NEMO["n_groups"]
    for sd in ("float32", "float16", "bfloat16"):
        add(lambda: checks.check_selective_state_update(8, mh, mp, mn, mg, sd, "bfloat16", DEV, 12),
            f"nemotron mamba2 state {sd}")
        add(lambda: checks.check_causal_conv1d_update(8, NEMO_CONV_DIM, NEMO["conv_kernel"], sd, "bfloat16", DEV, 13),
            f"nemotron conv1d {sd}")
        add(lambda: checks.check_causal_conv1d_update(8, QWEN_CONV_DIM, QWEN["linear_conv_kernel_dim"], sd,
                                              "bfloat16", DEV, 14, transposed_state=True),
            f"qwen3.5 conv1d (T) {sd}")
        add(lambda: checks.check_gated_delta(8, QWEN["linear_num_key_heads"], QWEN["linear_num_value_heads"],
                                     QWEN["linear_key_head_dim"], QWEN["linear_value_head_dim"], sd,
                                     "bfloat16", DEV, 15), f"qwen3.5 gdn state {sd}")
    for fp8 in ("fp8_e4m3", "fp8_e5m2"):
        add(lambda: checks.check_paged_attention_fp8(nh, nkv, nq, 16, fp8, lens, DEV, 17),
            f"nemotron decode {fp8} KV")
        add(lambda: checks.check_paged_attention_fp8(qd, qkv, qh, QWEN_PAGE["block"], fp8, [40000, 33], DEV, 18),
            f"qwen3.5 decode {fp8} KV bs{QWEN_PAGE['block']} 40k split")
    for kv in ("bfloat16", "fp8_e4m3"):
        add(lambda: checks.check_mla_attention(512, 64, 16, 16, kv, lens, DEV, 19),
            f"deepseek MLA 512+64 h16 {kv}")
        add(lambda: checks.check_mla_attention(512, 64, 128, 64, kv, [1, 3000, 20000], DEV, 20),
            f"deepseek MLA 512+64 h128 bs64 {kv}")
    for sd in ("float32", "bfloat16"):
        add(lambda: checks.check_gated_delta_packed(8, QWEN["linear_num_key_heads"], QWEN["linear_num_value_heads"],
                                            QWEN["linear_key_head_dim"], QWEN["linear_value_head_dim"], sd,
                                            "bfloat16", DEV, 21), f"qwen3.5 gdn packed state {sd}")
    for label, pg, dts in (("nemotron", NEMO_PAGE, ["bfloat16", "float32"]),
                           ("qwen3.5", QWEN_PAGE, ["bfloat16", "float32"])):
        add(lambda: checks.check_page_layout(pg["page"], pg["attn"], pg["mamba"], DEV, 16, mamba_state_dtypes=dts),
            f"{label} page {pg['page']} B (block {pg['block']})")
        for what, kw in (("kernel stride -16 B", dict(kernel_page_size_bytes=pg["page"] - 16)),
                         ("page 16 B short", dict(page_short=16))):
            size = pg["page"] - kw.pop("page_short", 0)
            bad = _safe(page_check, size, pg["attn"], pg["mamba"], mamba_state_dtypes=dts, device=DEV, **kw)
            if isinstance(bad, dict):
                out.append(dict(label=f"{label} {what}", name="error", passed=False, max_error=math.inf,
                                tolerance=0.0, seconds=0.0, error=bad["error"]))
                continue
            # passes when the check notices the deliberate fault
            out.append(dict(label=f"{label} {what} (fault must be caught)", name="page_check",
                            passed=not bad.passed, max_error=float(len(bad.violations)), tolerance=0.0,
                            seconds=bad.seconds))
    return out


def run_precision(steps: int) -> list[dict]:
    rows = []
    for kern, shape in (("mamba2", dict(batch=4, nheads=NEMO["mamba_num_heads"], head_dim=NEMO["mamba_head_dim"],
                                         dstate=NEMO["ssm_state_size"], ngroups=NEMO["n_groups"])),
                        ("gated_delta", dict(batch=4, nk=QWEN["linear_num_key_heads"],
                                             nv=QWEN["linear_num_value_heads"], dk=QWEN["linear_key_head_dim"],
                                             dv=QWEN["linear_value_head_dim"]))):
        for sd in ("float32", "float16", "bfloat16"):
            r = checks.state_precision(kern, sd, steps, DEV, 0, shape=shape)
            e = r.state_errors
            rows.append(dict(kernel=kern, state_dtype=sd, steps=steps, after_1=e[0],
                             after_10=e[min(9, len(e) - 1)], after_100=e[min(99, len(e) - 1)], final=e[-1],
                             max=r.max_state_error, growth=r.growth, out_final=r.output_errors[-1]))
    return rows


# ----------------------------------------------------------------------------- main
TARGETS = {"decode128": "85-89%", "decode256": "71-74%", "decode512": "55-68%", "decode_long": "17-53%",
           "mamba_float32": "70%", "mamba_16": "35%", "gdn256_float32": "94%", "gdn256_bfloat16": "68%",
           "gdn8": "10%", "gdn1": "2%"}


def timing_suite(sweep: bool) -> list[dict]:
    rows = []
    nq, nkv, nh = NEMO["num_attention_heads"], NEMO["num_key_value_heads"], NEMO["head_dim"]
    qh, qkv, qd = QWEN["num_attention_heads"], QWEN["num_key_value_heads"], QWEN["head_dim"]
    gq, gkv, gd = GEMMA["num_attention_heads"], GEMMA["num_key_value_heads"], GEMMA["head_dim"]
    gkv2, gd2 = GEMMA["num_global_key_value_heads"], GEMMA["global_head_dim"]
    nb = NEMO_PAGE["block"]
    qb = QWEN_PAGE["block"]

    def keep(r, target=""):
        if r is None:
            return
        rows.append(r)
        if "error" in r:
            return
        r["target"] = target
        print(_row_line(r), flush=True)

    def dec(tag, *a, **kw):
        keep(_safe(bench_decode, *a, **kw), TARGETS.get(tag, ""))

    dec("decode128", "nemotron h128 bs16", 128, 4096, 16, nkv, nq, nh)
    dec("decode128", f"nemotron h128 bs{nb}", 128, 4096, nb, nkv, nq, nh, baseline=False)
    dec("decode128", "nemotron h128 bs16 fp16", 128, 4096, 16, nkv, nq, nh, torch.float16, baseline=False)
    dec("", "nemotron h128 bs16 fp32", 64, 4096, 16, nkv, nq, nh, torch.float32, baseline=False)
    dec("decode256", "qwen3.5 h256 bs16", 64, 4096, 16, qkv, qh, qd)
    dec("decode256", f"qwen3.5 h256 bs{qb}", 64, 4096, qb, qkv, qh, qd, baseline=False)
    dec("decode256", "gemma4 h256 bs16", 32, 4096, 16, gkv, gq, gd)
    dec("decode512", "gemma4 h512 bs16", 64, 4096, 16, gkv2, gq, gd2)
    dec("decode_long", "nemotron h128 b1 128k", 1, 131072, 16, nkv, nq, nh)
    dec("decode_long", "nemotron h128 b4 32k", 4, 32768, 16, nkv, nq, nh)
    dec("decode_long", "qwen3.5 h256 b1 64k", 1, 65536, 16, qkv, qh, qd)
    dec("decode_long", "gemma4 h512 b1 64k", 1, 65536, 16, gkv2, gq, gd2)
    dec("decode_long", "gemma4 h512 b2 16k", 2, 16384, 16, gkv2, gq, gd2)
    if sweep:
        for launch in ({"tile": 32, "num_warps": 4}, {"tile": 16, "num_warps": 4, "num_stages": 3},
                       {"tile": 16, "num_warps": 2}, {"tile": 32, "num_warps": 8}):
            dec("", f"SWEEP gemma h512 {launch}", 64, 4096, 16, gkv2, gq, gd2, launch=launch,
                baseline=False, eager=False)
        for launch in ({"tile": 64, "num_warps": 4}, {"tile": 16, "num_warps": 4}, {"tile": 64, "num_warps": 8}):
            dec("", f"SWEEP nemotron fp32 {launch}", 64, 4096, 16, nkv, nq, nh, torch.float32, launch=launch,
                baseline=False, eager=False)
        for ns in (32, 64, 256):
            dec("", f"SWEEP gemma h512 b1 64k splits={ns}", 1, 65536, 16, gkv2, gq, gd2, num_splits=ns,
                baseline=False, eager=False)

    keep(_safe(bench_prefill, "nemotron prefill 8x(3584+512)", 8, 3584, 512, nb, nkv, nq, nh))
    keep(_safe(bench_prefill, "qwen3.5 prefill 4x(1536+512)", 4, 1536, 512, qb, qkv, qh, qd))
    keep(_safe(bench_prefill, "gemma4 h512 prefill 4x(1792+256)", 4, 1792, 256, 16, gkv2, gq, gd2))
    if sweep:
        for launch in ({"rows": 64, "tile": 32, "num_warps": 4}, {"rows": 128, "tile": 64, "num_warps": 8},
                       {"rows": 128, "tile": 32, "num_warps": 8, "num_stages": 3}):
            keep(_safe(bench_prefill, f"SWEEP nemotron prefill {launch}", 8, 3584, 512, nb, nkv, nq, nh,
                       launch=launch))
        for launch in ({"rows": 64, "tile": 16, "num_warps": 8}, {"rows": 64, "tile": 32, "num_warps": 8},
                       {"rows": 32, "tile": 32, "num_warps": 4}, {"rows": 128, "tile": 16, "num_warps": 8}):
            keep(_safe(bench_prefill, f"SWEEP gemma h512 prefill {launch}", 4, 1792, 256, 16, gkv2, gq, gd2,
                       launch=launch))
        for launch in ({"rows": 128, "tile": 32, "num_warps": 8}, {"rows": 64, "tile": 64, "num_warps": 8}):
            keep(_safe(bench_prefill, f"SWEEP qwen3.5 prefill {launch}", 4, 1536, 512, qb, qkv, qh, qd,
                       launch=launch))

    mh, mp, mn, mg = NEMO["mamba_num_heads"], NEMO["mamba_head_dim"], NEMO["ssm_state_size"], NEMO["n_groups"]
    for sd in (torch.float32, torch.float16, torch.bfloat16):
        for b in (256, 8, 1):
            tgt = (TARGETS["mamba_float32"] if sd == torch.float32 else TARGETS["mamba_16"]) \
                if b == 256 else ""
            keep(_safe(bench_ssm, f"nemotron mamba2 b{b}", b, mh, mp, mn, mg, sd, baseline=b == 256), tgt)
    if sweep:
        for bp, nw in ((64, 8), (32, 4)):
            for sd in (torch.float32, torch.bfloat16):
                keep(_safe(bench_ssm, f"SWEEP mamba2 b256 block_p={bp} w{nw}", 256, mh, mp, mn, mg, sd,
                           block_p=bp, num_warps=nw, baseline=False))
    for sd in (torch.float32, torch.bfloat16):
        for label, dim, width in (("nemotron", NEMO_CONV_DIM, NEMO["conv_kernel"]),
                                  ("qwen3.5", QWEN_CONV_DIM, QWEN["linear_conv_kernel_dim"])):
            keep(_safe(bench_conv, f"{label} conv1d b256", 256, dim, width, sd))
            if sweep:
                for bd, nw in ((512, 4), (1024, 4), (1024, 8), (128, 4)):
                    keep(_safe(bench_conv, f"SWEEP {label} conv1d block_d={bd} w{nw}", 256, dim, width, sd,
                               block_d=bd, num_warps=nw, baseline=False))
    nk, nv, dk, dv = (QWEN["linear_num_key_heads"], QWEN["linear_num_value_heads"],
                      QWEN["linear_key_head_dim"], QWEN["linear_value_head_dim"])
    for sd in (torch.float32, torch.bfloat16, torch.float16):
        for b in (256, 8, 1):
            key = {256: f"gdn256_{str(sd).removeprefix('torch.')}", 8: "gdn8", 1: "gdn1"}[b]
            keep(_safe(bench_gdn, f"qwen3.5 gdn b{b}", b, nk, nv, dk, dv, sd, baseline=b in (256, 1)),
                 TARGETS.get(key, ""))
    if sweep:
        for bv, nw in ((16, 8), (64, 16), (128, 8), (32, 4), (64, 8)):
            for sd in (torch.float32, torch.bfloat16):
                keep(_safe(bench_gdn, f"SWEEP gdn b256 block_v={bv} w{nw}", 256, nk, nv, dk, dv, sd,
                           block_v=bv, num_warps=nw, baseline=False))
    return rows


def _fmt_us(s):
    return "-" if s is None else f"{s * 1e6:9.1f}"


COPY_BW = [0.0]
HEADER = (f"{'case':<46} {'dtype':<8} {'MB':>8} {'graph us':>9} {'%copy':>6} {'eager us':>9} "
          f"{'%copy':>6} {'torch us':>9} {'x torch':>7} {'target':>7} chk")


def _row_line(r: dict) -> str:
    bw = COPY_BW[0]
    g = r["graph_s"]
    pct = 100 * r["bytes"] / g / bw
    r["pct_copy_graph"] = pct
    e = r.get("eager_s")
    epct = "-" if e is None else f"{100 * r['bytes'] / e / bw:5.1f}"
    tt = r.get("torch_s")
    sp = "-" if not tt else f"{tt / g:6.1f}"
    chk = "" if "ok" not in r else ("ok" if r["ok"] else "FAIL")
    extra = f" {r['flops'] / g / 1e12:.0f} TFLOP/s" if "flops" in r else ""
    return (f"{r['name'][:46]:<46} {r['dtype']:<8} {r['bytes'] / 1e6:8.1f} {_fmt_us(g)} {pct:6.1f} "
            f"{_fmt_us(e)} {epct:>6} {_fmt_us(tt)} {sp:>7} {r.get('target', ''):>7} {chk}{extra}")


def _safe(fn, *a, **kw):
    """Run one case; a failure is printed and recorded instead of ending the run."""
    try:
        return fn(*a, **kw)
    except Exception as exc:  # noqa: BLE001 - a bench keeps going past one broken case
        import traceback

        msg = f"{type(exc).__name__}: {exc}"
        print(f"ERROR in {getattr(fn, '__name__', fn)} {a[:1]}: {msg}", flush=True)
        traceback.print_exc(limit=3)
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a dead context shows up in the next case too
            pass
        return {"error": msg, "args": repr(a)[:200]}


def side_by_side(args, info, result) -> int:
    """``--vllm-src``: vLLM's kernels and ours, same tensors, same timing, one table."""
    sys.path.insert(0, str(REPO / "bench"))
    import side_by_side as sbs

    t0 = time.time()
    vllm = sbs.load_vllm(args.vllm_src)
    print(f"vLLM kernels loaded from {args.vllm_src} ({time.time() - t0:.1f} s)", flush=True)
    shapes = dict(nemo=NEMO, qwen=QWEN, gemma=GEMMA, nemo_conv_dim=NEMO_CONV_DIM, qwen_conv_dim=QWEN_CONV_DIM)
    print(sbs.HEADER, flush=True)
    rows = sbs.run(vllm, K, time_pair, _sets, COPY_BW[0], DEV, shapes, only=args.only,
                   variants=sbs.SWEEP if args.sweep else None)
    result["side_by_side"] = rows
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "side_by_side.json").write_text(json.dumps(result, indent=1, default=str))
    main_rows = [r for r in rows if "ratio" in r]
    print(f"\n== side by side with vLLM 0.19.0 ({info['gpu']}; copy {COPY_BW[0] / 1e12:.3f} TB/s; "
          f"graph replays, the two kernels' graphs alternating, median of 15 each; random state indices) ==")
    print(sbs.HEADER)
    for r in main_rows:
        print(sbs.line(r))
    fams = {}
    for r in main_rows:
        fams.setdefault(r["case"].split()[0], []).append(r["ratio"])
    for fam, rs in fams.items():
        gm = math.exp(sum(math.log(x) for x in rs) / len(rs))
        print(f"{fam:<10} geomean ratio {gm:.3f}  max {max(rs):.3f}  ({len(rs)} cases)")
    over = [r["case"] for r in main_rows if r["ratio"] > 1.0]
    errs = [r["case"] for r in rows if "error" in r]
    print(f"ratios over 1.0: {over or 'none'}; errors: {errs or 'none'}; {time.time() - t0:.0f} s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for gpu_kernels.json")
    ap.add_argument("--sweep", action="store_true", help="also time launch-parameter variants")
    ap.add_argument("--skip-checks", action="store_true")
    ap.add_argument("--steps", type=int, default=300, help="state-precision steps")
    ap.add_argument("--vllm-src", default=None,
                    help="folder holding vLLM 0.19.0's vllm/ sources: time its kernels beside ours")
    ap.add_argument("--only", default=None, help="side-by-side families: decode,mamba,conv,gdn")
    ap.add_argument("--checks-only", action="store_true", help="checks and precision, no timings")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    t_start = time.time()
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        smi = torch.cuda.get_device_name()
    import triton

    info = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), gpu=smi, torch=torch.__version__,
                triton=triton.__version__, python=sys.version.split()[0],
                sms=torch.cuda.get_device_properties(DEV).multi_processor_count,
                nemotron_page=NEMO_PAGE, qwen_page=QWEN_PAGE)
    print(json.dumps(info), flush=True)
    bw = copy_bandwidth()
    info["copy_bandwidth_Bps"] = bw
    COPY_BW[0] = bw
    print(f"copy bandwidth (read+write): {bw / 1e12:.3f} TB/s", flush=True)

    result = dict(info=info)
    if args.vllm_src:
        return side_by_side(args, info, result)
    if not args.skip_checks:
        t0 = time.time()
        result["checks"] = run_checks()
        print(f"\n== checks ({time.time() - t0:.0f} s) ==")
        for c in result["checks"]:
            print(f"{'ok  ' if c['passed'] else 'FAIL'} {c['label']:<48} err {c['max_error']:.3g} "
                  f"tol {c['tolerance']:.3g}")
        t0 = time.time()
        result["precision"] = run_precision(args.steps)
        print(f"\n== state precision, relative state error vs float64 ({time.time() - t0:.0f} s) ==")
        for p in result["precision"]:
            print(f"{p['kernel']:<12} {p['state_dtype']:<9} step1 {p['after_1']:.2e} step10 {p['after_10']:.2e} "
                  f"step100 {p['after_100']:.2e} step{p['steps']} {p['final']:.2e} max {p['max']:.2e} "
                  f"growth x{p['growth']:.2f}")
        sys.stdout.flush()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_kernels.json").write_text(json.dumps(result, indent=1, default=str))
    if args.checks_only:
        failed = [c["label"] for c in result.get("checks", []) if not c["passed"]]
        print(f"\ntotal {time.time() - t_start:.0f} s; failed: {failed or 'none'}")
        return 1 if failed else 0
    t0 = time.time()
    print("\n== timings; % = achieved bytes/s over the copy bandwidth; graph = CUDA-graph replay, "
          "eager = launched from Python ==")
    print(HEADER, flush=True)
    rows = timing_suite(args.sweep)
    result["timings"] = rows
    print(f"(timings took {time.time() - t0:.0f} s)")
    (out / "gpu_kernels.json").write_text(json.dumps(result, indent=1, default=str))
    failed = [c["label"] for c in result.get("checks", []) if not c["passed"]]
    failed += [r["name"] for r in rows if r.get("ok") is False]
    failed += [f"error: {r['error']}" for r in rows if "error" in r]
    print(f"\ntotal {time.time() - t_start:.0f} s; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
