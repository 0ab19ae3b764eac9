"""Kernel-vs-reference checks on random inputs of given shapes, for tests and GPU validation.

Each ``check_*`` builds seeded random inputs of the given shapes and dtypes on ``device``,
runs the Triton kernel on them (output poisoned with NaN first, so an unwritten element
fails), runs the float64 reference on the same values, and returns a :class:`CheckResult`.

Tolerances: an error is ``max |kernel - reference|`` per compared tensor, and its
tolerance is ``TOLERANCE[dtype] * max(1, max |reference|)`` for the dtype that tensor is
stored in -- the rounding of a 16-bit store, plus float32 accumulation, with headroom.
``passed`` needs every compared tensor within its tolerance (NaN never passes).

``perturb`` (optional) receives the kernel's keyword arguments and returns the ones to
use; the reference keeps the true inputs.  It exists to prove a check notices a wrong
input -- a block size the cache was not built with, a scrambled block table.

:func:`state_precision` runs a recurrent kernel many steps with its state in a 16- or
32-bit dtype next to a float64 reference carrying a float64 state, and reports how the
state's error grows.

:data:`CHECKS` maps each :class:`~enginecfg.kernels.kinds.KernelCheck` (the torch-free names a
caller plans with) to its function here; :func:`run_check` runs one by its name.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Sequence

import attrs
import torch
import torch.nn.functional as F

from enginecfg.kernels import _reference as ref
from enginecfg.kernels._util import FP8_DTYPES, as_dtype, dtype_name, require
from enginecfg.kernels.kinds import KernelCheck

__all__ = [
    "CheckResult",
    "StatePrecisionResult",
    "TOLERANCE",
    "tolerance_for",
    "check_paged_attention",
    "check_paged_prefill",
    "check_selective_state_update",
    "check_causal_conv1d_update",
    "check_gated_delta",
    "check_gated_delta_packed",
    "check_paged_attention_fp8",
    "check_mla_attention",
    "check_page_layout",
    "state_precision",
    "CHECKS",
    "run_check",
]

#: relative tolerance per storage dtype (scaled by max(1, max|reference|)).
TOLERANCE: dict[torch.dtype, float] = {
    torch.float32: 1e-4,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}

Perturb = Callable[[dict[str, Any]], dict[str, Any]] | None


@attrs.frozen
class CheckResult:
    """One kernel check.  ``max_error``/``tolerance`` are those of the compared tensor
    closest to (or furthest past) its tolerance; ``errors`` lists every compared tensor as
    ``name -> (max_abs_error, tolerance)``.  ``seconds`` is the kernel call's wall time,
    compilation included on a first call."""

    name: str
    passed: bool
    max_error: float
    tolerance: float
    seconds: float
    shapes: dict[str, Any]
    errors: dict[str, tuple[float, float]]

    def summary(self) -> str:
        state = "ok" if self.passed else "FAILED"
        return f"{self.name} {state}: max_error {self.max_error:.3g} (tolerance {self.tolerance:.3g})"


def tolerance_for(dtype: torch.dtype, reference: torch.Tensor) -> float:
    """The tolerance for a tensor stored in ``dtype`` whose reference value is ``reference``."""
    scale = float(reference.abs().max()) if reference.numel() else 0.0
    return TOLERANCE[dtype] * max(1.0, scale)


def _error(got: torch.Tensor, want: torch.Tensor) -> float:
    if got.numel() == 0:
        return 0.0
    err = float((got.double() - want.double()).abs().max())
    return math.inf if math.isnan(err) else err


def _result(name: str, pairs: dict[str, tuple[torch.Tensor, torch.Tensor, torch.dtype]],
            seconds: float, shapes: dict[str, Any]) -> CheckResult:
    errors = {}
    for key, (got, want, dt) in pairs.items():
        errors[key] = (_error(got, want), tolerance_for(dt, want))
    worst = max(errors.values(), key=lambda e: e[0] / e[1] if e[1] else math.inf)
    passed = all(e <= t for e, t in errors.values())
    return CheckResult(name=name, passed=passed, max_error=worst[0], tolerance=worst[1],
                       seconds=seconds, shapes=shapes, errors=errors)


def _timed(device: torch.device, fn: Callable[[], Any]) -> tuple[Any, float]:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - t0


def _gen(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed))


def _randn(shape, gen, device, dtype=torch.float32, scale=1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, device=device) * scale).to(dtype)


def _paged_cache(seq_lens: Sequence[int], block_size: int, num_kv_heads: int, head_size: int,
                 kv_dtype: torch.dtype, gen, device, spare: int = 2):
    """K/V caches with each sequence's blocks scattered over a shuffled pool (+ spare
    blocks of noise that a wrong block lookup would read)."""
    need = [max(1, -(-int(n) // block_size)) for n in seq_lens]
    num_blocks = sum(need) + spare
    shape = (num_blocks, block_size, num_kv_heads, head_size)
    k = _randn(shape, gen, device, kv_dtype)
    v = _randn(shape, gen, device, kv_dtype)
    perm = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32)
    table = torch.zeros((len(seq_lens), max(need)), dtype=torch.int32, device=device)
    at = 0
    for b, n in enumerate(need):
        table[b, :n] = perm[at:at + n]
        at += n
    lens = torch.tensor([int(n) for n in seq_lens], dtype=torch.int32, device=device)
    return k, v, table, lens


def check_paged_attention(head_size: int, num_kv_heads: int, num_q_heads: int, block_size: int,
                          kv_dtype: str | torch.dtype, seq_lens: Sequence[int],
                          device: str | torch.device = "cuda", seed: int = 0, *,
                          scale: float | None = None, num_splits: int | None = None,
                          perturb: Perturb = None) -> CheckResult:
    """Paged decode attention: one query token per sequence over ``seq_lens`` cached tokens."""
    from enginecfg.kernels.paged_attention import paged_decode_attention

    dev = torch.device(device)
    dt = as_dtype(kv_dtype, "kv_dtype")
    require(len(seq_lens) >= 1, "seq_lens", list(seq_lens), "at least one sequence")
    gen = _gen(dev, seed)
    k, v, table, lens = _paged_cache(seq_lens, block_size, num_kv_heads, head_size, dt, gen, dev)
    q = _randn((len(seq_lens), num_q_heads, head_size), gen, dev, dt)
    scale = head_size ** -0.5 if scale is None else scale
    args = dict(q=q, k_cache=k, v_cache=v, block_table=table, seq_lens=lens, scale=scale)
    kargs = perturb(dict(args)) if perturb else args
    out = torch.full_like(q, float("nan"))
    _, secs = _timed(dev, lambda: paged_decode_attention(**kargs, num_splits=num_splits, out=out))
    want = ref.reference_paged_decode_attention(**args)
    shapes = dict(head_size=head_size, num_kv_heads=num_kv_heads, num_q_heads=num_q_heads,
                  block_size=block_size, kv_dtype=dtype_name(dt), seq_lens=list(map(int, seq_lens)),
                  num_blocks=k.shape[0])
    return _result("paged_decode_attention", {"out": (out, want, dt)}, secs, shapes)


def check_paged_prefill(head_size: int, num_kv_heads: int, num_q_heads: int, block_size: int,
                        kv_dtype: str | torch.dtype, seq_lens: Sequence[int],
                        query_lens: Sequence[int], device: str | torch.device = "cuda",
                        seed: int = 0, *, scale: float | None = None,
                        perturb: Perturb = None) -> CheckResult:
    """Chunked prefill: the last ``query_lens[b]`` of each ``seq_lens[b]`` tokens are new
    queries attending causally to the cached prefix and to each other."""
    from enginecfg.kernels.paged_attention import paged_prefill_attention

    dev = torch.device(device)
    dt = as_dtype(kv_dtype, "kv_dtype")
    require(len(query_lens) == len(seq_lens), "query_lens", list(query_lens),
            f"{len(seq_lens)} entries, one per sequence")
    require(all(0 <= ql <= sl for ql, sl in zip(query_lens, seq_lens)), "query_lens",
            list(query_lens), "0 <= query_len <= seq_len")
    gen = _gen(dev, seed)
    k, v, table, lens = _paged_cache(seq_lens, block_size, num_kv_heads, head_size, dt, gen, dev)
    starts = [0]
    for ql in query_lens:
        starts.append(starts[-1] + int(ql))
    qsl = torch.tensor(starts, dtype=torch.int32, device=dev)
    q = _randn((starts[-1], num_q_heads, head_size), gen, dev, dt)
    scale = head_size ** -0.5 if scale is None else scale
    args = dict(q=q, k_cache=k, v_cache=v, block_table=table, seq_lens=lens,
                query_start_loc=qsl, scale=scale)
    kargs = perturb(dict(args)) if perturb else args
    out = torch.full_like(q, float("nan"))
    _, secs = _timed(dev, lambda: paged_prefill_attention(**kargs, out=out))
    want = ref.reference_paged_prefill_attention(**args)
    shapes = dict(head_size=head_size, num_kv_heads=num_kv_heads, num_q_heads=num_q_heads,
                  block_size=block_size, kv_dtype=dtype_name(dt), seq_lens=list(map(int, seq_lens)),
                  query_lens=list(map(int, query_lens)))
    return _result("paged_prefill_attention", {"out": (out, want, dt)}, secs, shapes)


def _mamba_inputs(batch, nheads, head_dim, dstate, ngroups, io, gen, dev):
    """Inputs in the ranges Mamba2 sees: dt_bias puts softplus(dt) in ~[1e-3, 1e-1],
    A = -exp(A_log) with A_log ~ log U(1, 16)."""
    x = _randn((batch, nheads, head_dim), gen, dev, io)
    dt = _randn((batch, nheads), gen, dev, io, 0.5)
    B = _randn((batch, ngroups, dstate), gen, dev, io)
    C = _randn((batch, ngroups, dstate), gen, dev, io)
    z = _randn((batch, nheads, head_dim), gen, dev, io)
    return dict(x=x, dt=dt, B=B, C=C, z=z)


def _mamba_params(nheads, gen, dev):
    u = torch.rand(nheads, generator=gen, device=dev)
    target = torch.exp(math.log(1e-3) + u * (math.log(1e-1) - math.log(1e-3)))
    dt_bias = target + torch.log(-torch.expm1(-target))  # inverse softplus
    A = -torch.exp(torch.log(1 + 15 * torch.rand(nheads, generator=gen, device=dev)))
    D = torch.randn(nheads, generator=gen, device=dev)
    return dict(A=A.float(), D=D.float(), dt_bias=dt_bias.float())


def check_selective_state_update(batch: int, nheads: int, head_dim: int, dstate: int, ngroups: int,
                                 state_dtype: str | torch.dtype, io_dtype: str | torch.dtype = "bfloat16",
                                 device: str | torch.device = "cuda", seed: int = 0, *,
                                 use_z: bool = True, use_state_indices: bool = True,
                                 perturb: Perturb = None) -> CheckResult:
    """Mamba2 state update: y against the reference (in ``io_dtype``) and the new state
    against the float64 state (in ``state_dtype``).  With ``use_state_indices`` the batch
    maps to shuffled cache slots, plus one spare slot the kernel must leave alone."""
    from enginecfg.kernels.mamba_ssm import selective_state_update

    dev = torch.device(device)
    sd, io = as_dtype(state_dtype, "state_dtype"), as_dtype(io_dtype, "io_dtype")
    gen = _gen(dev, seed)
    slots = batch + 1
    state = _randn((slots, nheads, head_dim, dstate), gen, dev, sd)
    inp = _mamba_inputs(batch, nheads, head_dim, dstate, ngroups, io, gen, dev)
    par = _mamba_params(nheads, gen, dev)
    idx = None
    if use_state_indices:
        idx = torch.randperm(slots, generator=gen, device=dev)[:batch].to(torch.int32)
    if not use_z:
        inp["z"] = None
    ref_state = state.double().clone()
    args = dict(x=inp["x"], dt=inp["dt"], A=par["A"], B=inp["B"], C=inp["C"], D=par["D"],
                z=inp["z"], dt_bias=par["dt_bias"], dt_softplus=True, state_indices=idx)
    kargs = perturb(dict(args, state=state)) if perturb else dict(args, state=state)
    y = torch.full_like(inp["x"], float("nan"))
    _, secs = _timed(dev, lambda: selective_state_update(**kargs, out=y))
    want = ref.reference_selective_state_update(ref_state, **args)
    shapes = dict(batch=batch, nheads=nheads, head_dim=head_dim, dstate=dstate, ngroups=ngroups,
                  state_dtype=dtype_name(sd), io_dtype=dtype_name(io))
    return _result("selective_state_update",
                   {"y": (y, want, io), "state": (state, ref_state, sd)}, secs, shapes)


def check_causal_conv1d_update(batch: int, conv_dim: int, kernel_width: int,
                               state_dtype: str | torch.dtype, io_dtype: str | torch.dtype = "bfloat16",
                               device: str | torch.device = "cuda", seed: int = 0, *,
                               transposed_state: bool = False, perturb: Perturb = None) -> CheckResult:
    """Conv1d state update; ``transposed_state`` keeps the cache as ``[slots, conv_dim, K-1]``
    in memory and passes the kernel its ``.transpose(1, 2)`` view."""
    from enginecfg.kernels.mamba_ssm import causal_conv1d_update

    dev = torch.device(device)
    sd, io = as_dtype(state_dtype, "state_dtype"), as_dtype(io_dtype, "io_dtype")
    gen = _gen(dev, seed)
    slots = batch + 1
    km1 = kernel_width - 1
    if transposed_state:
        store = _randn((slots, conv_dim, km1), gen, dev, sd)
        state = store.transpose(1, 2)
    else:
        store = _randn((slots, km1, conv_dim), gen, dev, sd)
        state = store
    x = _randn((batch, conv_dim), gen, dev, io)
    w = _randn((conv_dim, kernel_width), gen, dev, io, 0.5)
    bias = _randn((conv_dim,), gen, dev, io, 0.1)
    idx = torch.randperm(slots, generator=gen, device=dev)[:batch].to(torch.int32)
    ref_state = state.double().clone()
    args = dict(x=x, weight=w, bias=bias, activation="silu", state_indices=idx)
    kargs = perturb(dict(args, conv_state=state)) if perturb else dict(args, conv_state=state)
    out = torch.full_like(x, float("nan"))
    _, secs = _timed(dev, lambda: causal_conv1d_update(**kargs, out=out))
    want = ref.reference_causal_conv1d_update(ref_state, **args)
    shapes = dict(batch=batch, conv_dim=conv_dim, kernel_width=kernel_width,
                  state_dtype=dtype_name(sd), io_dtype=dtype_name(io),
                  layout="[slots, conv_dim, K-1]" if transposed_state else "[slots, K-1, conv_dim]")
    return _result("causal_conv1d_update",
                   {"out": (out, want, io), "conv_state": (state, ref_state, sd)}, secs, shapes)


def _gdn_inputs(batch, nk, nv, dk, dv, io, gen, dev):
    q = _randn((batch, nk, dk), gen, dev, io)
    k = _randn((batch, nk, dk), gen, dev, io)
    v = _randn((batch, nv, dv), gen, dev, io)
    # g = -exp(A_log) * softplus(a + dt_bias): a log decay in about [-1, 0)
    g = -F.softplus(torch.randn((batch, nv), generator=gen, device=dev) - 2.0)
    beta = torch.sigmoid(torch.randn((batch, nv), generator=gen, device=dev))
    return dict(q=q, k=k, v=v, g=g.to(io), beta=beta.to(io))


def check_gated_delta(batch: int, num_k_heads: int, num_v_heads: int, head_k_dim: int,
                      head_v_dim: int, state_dtype: str | torch.dtype,
                      io_dtype: str | torch.dtype = "bfloat16", device: str | torch.device = "cuda",
                      seed: int = 0, *, use_qk_l2norm: bool = True,
                      perturb: Perturb = None) -> CheckResult:
    """Gated delta rule decode step: output and new state against float64."""
    from enginecfg.kernels.gated_delta import gated_delta_step

    dev = torch.device(device)
    sd, io = as_dtype(state_dtype, "state_dtype"), as_dtype(io_dtype, "io_dtype")
    gen = _gen(dev, seed)
    slots = batch + 1
    # a state of the size a run of decays and rank-one updates of unit keys leaves behind
    state = _randn((slots, num_v_heads, head_v_dim, head_k_dim), gen, dev, sd, 0.3)
    inp = _gdn_inputs(batch, num_k_heads, num_v_heads, head_k_dim, head_v_dim, io, gen, dev)
    idx = torch.randperm(slots, generator=gen, device=dev)[:batch].to(torch.int32)
    ref_state = state.double().clone()
    args = dict(inp, scale=None, use_qk_l2norm=use_qk_l2norm, state_indices=idx)
    kargs = perturb(dict(args, state=state)) if perturb else dict(args, state=state)
    out = torch.full_like(inp["v"], float("nan"))
    _, secs = _timed(dev, lambda: gated_delta_step(**kargs, out=out))
    want = ref.reference_gated_delta_step(ref_state, **args)
    shapes = dict(batch=batch, num_k_heads=num_k_heads, num_v_heads=num_v_heads,
                  head_k_dim=head_k_dim, head_v_dim=head_v_dim, state_dtype=dtype_name(sd),
                  io_dtype=dtype_name(io))
    return _result("gated_delta_step", {"out": (out, want, io), "state": (state, ref_state, sd)},
                   secs, shapes)


def _fp8_max(dt: torch.dtype) -> float:
    return float(torch.finfo(dt).max)


def _quantize_fp8(t: torch.Tensor, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor scaled fp8: ``scale = amax / fp8_max`` (as a calibrated cache would use),
    values ``t / scale`` rounded to ``dt``.  Returns (fp8 tensor, float32 scale [1])."""
    amax = float(t.abs().max()) if t.numel() else 1.0
    scale = max(amax, 1e-12) / _fp8_max(dt)
    return (t / scale).to(dt), torch.tensor([scale], dtype=torch.float32, device=t.device)


def check_paged_attention_fp8(head_size: int, num_kv_heads: int, num_q_heads: int, block_size: int,
                              kv_dtype: str | torch.dtype, seq_lens: Sequence[int],
                              device: str | torch.device = "cuda", seed: int = 0, *,
                              q_dtype: str | torch.dtype = "bfloat16", scale: float | None = None,
                              num_splits: int | None = None, perturb: Perturb = None) -> CheckResult:
    """Paged decode over an fp8 KV cache, read in fp8: K and V are quantised per tensor
    (``scale = amax / fp8_max``), the kernel loads the fp8 bytes and dequantises with
    ``k_scale`` / ``v_scale`` to q's dtype; the float64 reference uses the same fp8 values
    times the scales, exactly.  The error is compared in q's dtype (the output's)."""
    from enginecfg.kernels.paged_attention import paged_decode_attention

    dev = torch.device(device)
    dt, qd = as_dtype(kv_dtype, "kv_dtype"), as_dtype(q_dtype, "q_dtype")
    require(dt in FP8_DTYPES, "kv_dtype", dtype_name(dt), "float8_e4m3fn, float8_e5m2")
    require(len(seq_lens) >= 1, "seq_lens", list(seq_lens), "at least one sequence")
    gen = _gen(dev, seed)
    k32, v32, table, lens = _paged_cache(seq_lens, block_size, num_kv_heads, head_size, torch.float32, gen, dev)
    k, k_scale = _quantize_fp8(k32, dt)
    v, v_scale = _quantize_fp8(v32, dt)
    q = _randn((len(seq_lens), num_q_heads, head_size), gen, dev, qd)
    scale = head_size ** -0.5 if scale is None else scale
    args = dict(q=q, k_cache=k, v_cache=v, block_table=table, seq_lens=lens, scale=scale,
                k_scale=k_scale, v_scale=v_scale)
    kargs = perturb(dict(args)) if perturb else args
    out = torch.full_like(q, float("nan"))
    _, secs = _timed(dev, lambda: paged_decode_attention(**kargs, num_splits=num_splits, out=out))
    want = ref.reference_paged_decode_attention_fp8(**args)
    shapes = dict(head_size=head_size, num_kv_heads=num_kv_heads, num_q_heads=num_q_heads,
                  block_size=block_size, kv_dtype=dtype_name(dt), q_dtype=dtype_name(qd),
                  seq_lens=list(map(int, seq_lens)), k_scale=float(k_scale), v_scale=float(v_scale))
    return _result("paged_decode_attention_fp8", {"out": (out, want, qd)}, secs, shapes)


def check_mla_attention(kv_lora_rank: int, qk_rope_head_dim: int, num_heads: int, block_size: int,
                        kv_dtype: str | torch.dtype, seq_lens: Sequence[int],
                        device: str | torch.device = "cuda", seed: int = 0, *,
                        q_dtype: str | torch.dtype | None = None, scale: float | None = None,
                        num_splits: int | None = None, perturb: Perturb = None) -> CheckResult:
    """MLA decode over the latent cache ``[num_blocks, block_size, 1, kv_lora_rank + rope]``
    (vLLM's layout: one latent "head" per token, shared by all query heads): the kernel's
    output ``[batch, H, kv_lora_rank]`` against float64.  An fp8 ``kv_dtype`` quantises
    the latents per tensor and passes the scale, like :func:`check_paged_attention_fp8`.
    ``scale`` defaults to ``(kv_lora_rank + rope) ** -0.5``; q is in ``q_dtype`` (the
    cache's dtype, or bfloat16 for an fp8 cache)."""
    from enginecfg.kernels.paged_attention import mla_decode_attention

    dev = torch.device(device)
    dt = as_dtype(kv_dtype, "kv_dtype")
    fp8 = dt in FP8_DTYPES
    qd = as_dtype(q_dtype, "q_dtype") if q_dtype is not None else (torch.bfloat16 if fp8 else dt)
    require(len(seq_lens) >= 1, "seq_lens", list(seq_lens), "at least one sequence")
    width = kv_lora_rank + qk_rope_head_dim
    gen = _gen(dev, seed)
    c, _, table, lens = _paged_cache(seq_lens, block_size, 1, width, torch.float32, gen, dev)
    if fp8:
        cache, kv_scale = _quantize_fp8(c, dt)
    else:
        cache, kv_scale = c.to(dt), None
    q = _randn((len(seq_lens), num_heads, width), gen, dev, qd)
    scale = width ** -0.5 if scale is None else scale
    args = dict(q=q, kv_cache=cache, block_table=table, seq_lens=lens, scale=scale,
                kv_lora_rank=kv_lora_rank)
    kargs = perturb(dict(args)) if perturb else args
    out = torch.full((len(seq_lens), num_heads, kv_lora_rank), float("nan"), dtype=qd, device=dev)
    _, secs = _timed(dev, lambda: mla_decode_attention(**kargs, kv_scale=kv_scale, num_splits=num_splits,
                                                       out=out))
    want = ref.reference_mla_decode_attention(**args, kv_scale=1.0 if kv_scale is None else kv_scale)
    shapes = dict(kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim, num_heads=num_heads,
                  block_size=block_size, kv_dtype=dtype_name(dt), q_dtype=dtype_name(qd),
                  seq_lens=list(map(int, seq_lens)))
    return _result("mla_decode_attention", {"out": (out, want, qd)}, secs, shapes)


def _gdn_packed_inputs(batch, nk, nv, dk, dv, io, gen, dev):
    mixed = _randn((batch, 2 * nk * dk + nv * dv), gen, dev, io)
    a = _randn((batch, nv), gen, dev, io)
    b = _randn((batch, nv), gen, dev, io)
    # A_log ~ log U(1, 16) and dt_bias ~ small, as Qwen3.5 checkpoints: decays in (0, 1)
    A_log = torch.log(1 + 15 * torch.rand(nv, generator=gen, device=dev)).float()
    dt_bias = (torch.randn(nv, generator=gen, device=dev) * 0.5).float()
    return dict(mixed_qkv=mixed, a=a, b=b, A_log=A_log, dt_bias=dt_bias)


def check_gated_delta_packed(batch: int, num_k_heads: int, num_v_heads: int, head_k_dim: int,
                             head_v_dim: int, state_dtype: str | torch.dtype,
                             io_dtype: str | torch.dtype = "bfloat16", device: str | torch.device = "cuda",
                             seed: int = 0, *, use_qk_l2norm: bool = True,
                             perturb: Perturb = None) -> CheckResult:
    """The packed-input gated delta step (q, k, v in one ``mixed_qkv`` row, gating from
    ``a``, ``b``, ``A_log``, ``dt_bias``) -- the form vLLM's Qwen3.5 decode path runs --
    against float64, through shuffled state indices."""
    from enginecfg.kernels.gated_delta import gated_delta_step_packed

    dev = torch.device(device)
    sd, io = as_dtype(state_dtype, "state_dtype"), as_dtype(io_dtype, "io_dtype")
    gen = _gen(dev, seed)
    slots = batch + 1
    state = _randn((slots, num_v_heads, head_v_dim, head_k_dim), gen, dev, sd, 0.3)
    inp = _gdn_packed_inputs(batch, num_k_heads, num_v_heads, head_k_dim, head_v_dim, io, gen, dev)
    idx = torch.randperm(slots, generator=gen, device=dev)[:batch].to(torch.int32)
    ref_state = state.double().clone()
    args = dict(inp, scale=None, use_qk_l2norm=use_qk_l2norm, state_indices=idx)
    kargs = perturb(dict(args, state=state)) if perturb else dict(args, state=state)
    out = torch.full((batch, num_v_heads, head_v_dim), float("nan"), dtype=io, device=dev)
    _, secs = _timed(dev, lambda: gated_delta_step_packed(**kargs, out=out))
    want = ref.reference_gated_delta_step_packed(ref_state, **args)
    shapes = dict(batch=batch, num_k_heads=num_k_heads, num_v_heads=num_v_heads,
                  head_k_dim=head_k_dim, head_v_dim=head_v_dim, state_dtype=dtype_name(sd),
                  io_dtype=dtype_name(io), packed=True)
    return _result("gated_delta_step_packed", {"out": (out, want, io), "state": (state, ref_state, sd)},
                   secs, shapes)


def check_page_layout(page_size_bytes: int, attn_block_bytes: int, mamba_state_bytes: Sequence[int],
                      device: str | torch.device = "cuda", seed: int = 0, **kwargs: Any) -> CheckResult:
    """:func:`~enginecfg.kernels.page_check.page_check` as a CheckResult: ``max_error`` is
    the number of violations plus failed fits/alignments/read-backs, tolerance 0."""
    from enginecfg.kernels.page_check import page_check

    res = page_check(page_size_bytes, attn_block_bytes, mamba_state_bytes, device=device,
                     seed=seed, **kwargs)
    bad = (len(res.violations) + sum(not v for v in res.fits.values())
           + sum(not v for v in res.aligned.values()) + (0 if res.readback_ok else 1))
    shapes = dict(page_size_bytes=res.page_size_bytes, attn_block_bytes=res.attn_block_bytes,
                  mamba_state_bytes=list(res.mamba_state_bytes), num_pages=res.num_pages,
                  notes=list(res.notes))
    return CheckResult(name="page_check", passed=res.passed, max_error=float(bad), tolerance=0.0,
                       seconds=res.seconds, shapes=shapes, errors={"violations": (float(bad), 0.0)})


@attrs.frozen
class StatePrecisionResult:
    """Per-step relative errors ``max|S - S_ref| / max|S_ref|`` of the state kept in
    ``state_dtype`` (and of the output, against its reference) over ``steps`` steps."""

    kernel: str
    state_dtype: str
    steps: int
    state_errors: tuple[float, ...]
    output_errors: tuple[float, ...]
    final_state_error: float
    max_state_error: float
    growth: float  # mean error of the last tenth of steps over that of the first tenth

    def summary(self) -> str:
        return (f"{self.kernel} state {self.state_dtype}: after {self.steps} steps rel. error "
                f"{self.final_state_error:.3g} (max {self.max_state_error:.3g}, growth x{self.growth:.2f})")


def _rel(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Relative max error as a 0-d device tensor: read back once, after the whole run (a
    ``float()`` per step would wait for the device twice a step)."""
    return (got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)


def _floats(errs: list[torch.Tensor]) -> list[float]:
    if not errs:
        return []
    return [math.inf if math.isnan(e) else e for e in torch.stack(errs).tolist()]


def state_precision(kernel: str, state_dtype: str | torch.dtype, steps: int = 300,
                    device: str | torch.device = "cuda", seed: int = 0, *,
                    shape: dict[str, int] | None = None,
                    io_dtype: str | torch.dtype = "float32") -> StatePrecisionResult:
    """Run ``kernel`` ("mamba2" or "gated_delta") for ``steps`` decode steps from a zero
    state on fresh random inputs each step, the state in ``state_dtype``, beside a float64
    reference.  ``shape`` overrides the default small shapes (mamba2: batch, nheads,
    head_dim, dstate, ngroups; gated_delta: batch, nk, nv, dk, dv).  Inputs are made in
    ``io_dtype`` and fed identically to both, so the error is the state's rounding alone."""
    from enginecfg.kernels.gated_delta import gated_delta_step
    from enginecfg.kernels.mamba_ssm import selective_state_update

    require(kernel in ("mamba2", "gated_delta"), "kernel", kernel, "'mamba2', 'gated_delta'")
    require(int(steps) >= 1, "steps", steps, ">= 1")
    dev = torch.device(device)
    sd, io = as_dtype(state_dtype, "state_dtype"), as_dtype(io_dtype, "io_dtype")
    gen = _gen(dev, seed)
    s_err: list = []
    o_err: list = []
    if kernel == "mamba2":
        sh = dict(batch=2, nheads=4, head_dim=16, dstate=32, ngroups=2) | (shape or {})
        state = torch.zeros((sh["batch"], sh["nheads"], sh["head_dim"], sh["dstate"]),
                            dtype=sd, device=dev)
        ref_state = torch.zeros_like(state, dtype=torch.float64)
        par = _mamba_params(sh["nheads"], gen, dev)
        # every step's inputs drawn at once: one launch per tensor instead of one per step
        n, b = int(steps), sh["batch"]
        every = _mamba_inputs(n * b, sh["nheads"], sh["head_dim"], sh["dstate"], sh["ngroups"], io, gen, dev)
        every = {k: t.view(n, b, *t.shape[1:]) for k, t in every.items()}
        for i in range(n):
            inp = {k: t[i] for k, t in every.items()}
            args = dict(x=inp["x"], dt=inp["dt"], A=par["A"], B=inp["B"], C=inp["C"],
                        D=par["D"], z=inp["z"], dt_bias=par["dt_bias"], dt_softplus=True)
            y = selective_state_update(state, **args)
            y_ref = ref.reference_selective_state_update(ref_state, **args)
            s_err.append(_rel(state, ref_state))
            o_err.append(_rel(y, y_ref))
    else:
        sh = dict(batch=2, nk=2, nv=4, dk=32, dv=32) | (shape or {})
        state = torch.zeros((sh["batch"], sh["nv"], sh["dv"], sh["dk"]), dtype=sd, device=dev)
        ref_state = torch.zeros_like(state, dtype=torch.float64)
        n, b = int(steps), sh["batch"]
        every = _gdn_inputs(n * b, sh["nk"], sh["nv"], sh["dk"], sh["dv"], io, gen, dev)
        every = {k: t.view(n, b, *t.shape[1:]) for k, t in every.items()}
        for i in range(n):
            inp = {k: t[i] for k, t in every.items()}
            o = gated_delta_step(state, **inp)
            o_ref = ref.reference_gated_delta_step(ref_state, **inp)
            s_err.append(_rel(state, ref_state))
            o_err.append(_rel(o, o_ref))
    s_err, o_err = _floats(s_err), _floats(o_err)
    tenth = max(1, len(s_err) // 10)
    first = sum(s_err[:tenth]) / tenth
    last = sum(s_err[-tenth:]) / tenth
    growth = last / first if first > 0 else (1.0 if last == 0 else math.inf)
    return StatePrecisionResult(kernel=kernel, state_dtype=dtype_name(sd), steps=int(steps),
                                state_errors=tuple(s_err), output_errors=tuple(o_err),
                                final_state_error=s_err[-1], max_state_error=max(s_err),
                                growth=growth)


#: each named check's function (``KernelCheck.function`` reads it)
CHECKS: dict[KernelCheck, Callable[..., Any]] = {
    KernelCheck.PAGED_ATTENTION: check_paged_attention,
    KernelCheck.PAGED_ATTENTION_FP8: check_paged_attention_fp8,
    KernelCheck.PAGED_PREFILL: check_paged_prefill,
    KernelCheck.MLA_ATTENTION: check_mla_attention,
    KernelCheck.CAUSAL_CONV1D_UPDATE: check_causal_conv1d_update,
    KernelCheck.SELECTIVE_STATE_UPDATE: check_selective_state_update,
    KernelCheck.GATED_DELTA: check_gated_delta,
    KernelCheck.GATED_DELTA_PACKED: check_gated_delta_packed,
    KernelCheck.PAGE_LAYOUT: check_page_layout,
    KernelCheck.STATE_PRECISION: state_precision,
}


def run_check(check: KernelCheck, **kwargs: Any) -> CheckResult | StatePrecisionResult:
    """Run the check *check* names with *kwargs* (``device=`` and its shapes)."""
    return CHECKS[check](**kwargs)
