"""Gated delta rule, one recurrent (decode) step, as in Qwen3-Next / Qwen3.5 linear attention.

Per sequence b and value head h (key head ``kh = h // (nv / nk)``), with the state
``S = state[slot(b), h]`` of shape ``[dv, dk]``::

    q, k  <- q / sqrt(|q|^2 + eps), k / sqrt(|k|^2 + eps)     (if use_qk_l2norm)
    S     <- exp(g[b, h]) * S                                  (g is the log decay, <= 0)
    u     <- v[b, h] - S k                                     ([dv], the delta)
    S     <- S + beta[b, h] * u k^T                            (rank-one correction)
    o     <- scale * S q                                       (scale defaults to dk ** -0.5)

Every row ``i`` of S (one value channel) evolves on its own -- ``u_i`` needs only row
``i`` -- so a program owns ``BLOCK_V`` rows and the full ``dk`` of one head: the state
is read once and written once, in float32 arithmetic, stored back in its own dtype.

Two entry points share that update:

* :func:`gated_delta_step` takes q, k, v, g and beta as separate tensors;
* :func:`gated_delta_step_packed` takes what a Qwen3.5 layer has at decode time: the
  conv output ``mixed_qkv`` ``[batch, 2*nk*dk + nv*dv]`` (q, then k, then v, each head
  after head), the raw gate inputs ``a`` and ``b`` ``[batch, nv]`` and the per-head
  ``A_log`` and ``dt_bias``; the kernel forms ``g = -exp(A_log) * softplus(a + dt_bias)``
  and ``beta = sigmoid(b)`` itself, so no intermediate tensor is written or read.

Launch shape: the step is a pure stream over the state (``2 * dv * dk`` elements a head),
so what matters is enough independent loads in flight.  Small programs (16 or 32 rows,
one warp) let many programs share a multiprocessor; the defaults come from H200 sweeps
(bench/NOTES.md).  A float32 state streamed in many waves gets a register budget above
the one the compiler picks by itself: fewer programs a multiprocessor, and more bytes a
second.  The state is always reached through ``state_indices`` when given, like vLLM's
continuous-batching layers, so the slots a batch touches can be anywhere.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from enginecfg.kernels._reference import reference_gated_delta_step, reference_gated_delta_step_packed
from enginecfg.kernels._util import (
    STORAGE_DTYPES,
    next_pow2,
    require,
    require_dtype,
    require_same_device,
    require_shape,
    sm_count,
)

__all__ = ["gated_delta_step", "gated_delta_step_packed", "gdn_launch_config",
           "reference_gated_delta_step", "reference_gated_delta_step_packed"]


@triton.jit
def _gdn_slot(idx_ptr, b, HAS_IDX: tl.constexpr):
    """The state slot of sequence ``b`` (negative: a padded row)."""
    if HAS_IDX:
        return tl.load(idx_ptr + b).to(tl.int64)
    return b.to(tl.int64)


@triton.jit
def _gdn_state_ptrs(state_ptr, slot, h, s_sn, s_sh, s_sv, s_sk, offs_v, offs_k,
                    HEAD_STRIDE: tl.constexpr, ROW_STRIDE: tl.constexpr):
    """Pointers to rows ``offs_v`` of ``state[slot, h]``.

    ``HEAD_STRIDE`` > 0: each head is one contiguous ``[dv, dk]`` block, and the head and
    row strides are compile-time constants: fewer address instructions stand between the
    slot and the state load, which is what counts when a launch has only a few programs.
    """
    if HEAD_STRIDE > 0:
        return (state_ptr + slot * s_sn + h * HEAD_STRIDE
                + offs_v[:, None] * ROW_STRIDE + offs_k[None, :])
    return (state_ptr + slot * s_sn + h * s_sh
            + offs_v[:, None] * s_sv + offs_k[None, :] * s_sk)


@triton.jit
def _gdn_load(state_ptr, slot, h, s_sn, s_sh, s_sv, s_sk, offs_v, offs_k, v_ok, k_ok, HINTS: tl.constexpr,
              EVEN: tl.constexpr, HEAD_STRIDE: tl.constexpr, ROW_STRIDE: tl.constexpr):
    """Pointers to rows ``offs_v`` of ``state[slot, h]``, and the rows.

    The kernels request q, k, v and the gate inputs before the slot is known (none of
    them depends on it) and issue this long load as soon as it is, then do the norms and
    gate arithmetic while it is in flight: one memory round trip after the slot, with one
    warp a program and nothing else to hide it.
    """
    st_ptrs = _gdn_state_ptrs(state_ptr, slot, h, s_sn, s_sh, s_sv, s_sk, offs_v, offs_k, HEAD_STRIDE, ROW_STRIDE)
    if EVEN:
        # the tile lies inside the head: no predicate on the widest load and store
        if HINTS:
            S = tl.load(st_ptrs, eviction_policy="evict_first").to(tl.float32)
        else:
            S = tl.load(st_ptrs).to(tl.float32)
    else:
        mask = v_ok[:, None] & k_ok[None, :]
        if HINTS:
            S = tl.load(st_ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        else:
            S = tl.load(st_ptrs, mask=mask, other=0.0).to(tl.float32)
    return st_ptrs, S


@triton.jit
def _gdn_update(st_ptrs, S, o_ptrs, v_ok, k_ok, q, k, v, decay, beta, scale, eps,
                L2NORM: tl.constexpr, HINTS: tl.constexpr, EVEN: tl.constexpr):
    """One step on the loaded rows S: stores them back in the state's dtype, and o."""
    if L2NORM:
        q = q / tl.sqrt(tl.sum(q * q, 0) + eps)
        k = k / tl.sqrt(tl.sum(k * k, 0) + eps)
    q = q * scale
    S = S * decay
    u = (v - tl.sum(S * k[None, :], 1)) * beta
    S = S + u[:, None] * k[None, :]
    new = S.to(st_ptrs.dtype.element_ty)
    if EVEN:
        if HINTS:
            tl.store(st_ptrs, new, eviction_policy="evict_first")
        else:
            tl.store(st_ptrs, new)
    else:
        mask = v_ok[:, None] & k_ok[None, :]
        if HINTS:
            tl.store(st_ptrs, new, mask=mask, eviction_policy="evict_first")
        else:
            tl.store(st_ptrs, new, mask=mask)
    o = tl.sum(S * q[None, :], 1)
    tl.store(o_ptrs, o.to(o_ptrs.dtype.element_ty), mask=v_ok)


@triton.jit
def _gdn_kernel(
    state_ptr, q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, o_ptr, idx_ptr,
    s_sn, s_sh, s_sv, s_sk,
    s_qb, s_qh, s_qd,
    s_kb, s_kh, s_kd,
    s_vb, s_vh, s_vd,
    s_gb, s_gh,
    s_bb, s_bh,
    s_ob, s_oh, s_od,
    dk, dv, v_per_k, scale, eps,
    BLOCK_V: tl.constexpr, K_PAD: tl.constexpr, L2NORM: tl.constexpr, HAS_IDX: tl.constexpr,
    HINTS: tl.constexpr, EARLY: tl.constexpr, EVEN: tl.constexpr,
    HEAD_STRIDE: tl.constexpr, ROW_STRIDE: tl.constexpr,
):
    vb = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    offs_v = vb * BLOCK_V + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, K_PAD)
    v_ok = offs_v < dv
    k_ok = offs_k < dk
    o_ptrs = o_ptr + b * s_ob + h * s_oh + offs_v * s_od
    kh = h // v_per_k
    if EARLY:
        q, k, v, g, beta = _gdn_inputs(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, b, h, kh, offs_k, offs_v, k_ok, v_ok,
                                       s_qb, s_qh, s_qd, s_kb, s_kh, s_kd, s_vb, s_vh, s_vd, s_gb, s_gh, s_bb, s_bh)
    slot = _gdn_slot(idx_ptr, b, HAS_IDX)
    if slot < 0:
        tl.store(o_ptrs, tl.zeros([BLOCK_V], tl.float32).to(o_ptr.dtype.element_ty), mask=v_ok)
        return
    st_ptrs, S = _gdn_load(state_ptr, slot, h, s_sn, s_sh, s_sv, s_sk, offs_v, offs_k, v_ok, k_ok, HINTS,
                           EVEN, HEAD_STRIDE, ROW_STRIDE)
    if not EARLY:
        q, k, v, g, beta = _gdn_inputs(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, b, h, kh, offs_k, offs_v, k_ok, v_ok,
                                       s_qb, s_qh, s_qd, s_kb, s_kh, s_kd, s_vb, s_vh, s_vd, s_gb, s_gh, s_bb, s_bh)
    _gdn_update(st_ptrs, S, o_ptrs, v_ok, k_ok, q, k, v, tl.exp(g), beta, scale, eps, L2NORM, HINTS, EVEN)


@triton.jit
def _gdn_inputs(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, b, h, kh, offs_k, offs_v, k_ok, v_ok,
                s_qb, s_qh, s_qd, s_kb, s_kh, s_kd, s_vb, s_vh, s_vd, s_gb, s_gh, s_bb, s_bh):
    q = tl.load(q_ptr + b * s_qb + kh * s_qh + offs_k * s_qd, mask=k_ok, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + b * s_kb + kh * s_kh + offs_k * s_kd, mask=k_ok, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + b * s_vb + h * s_vh + offs_v * s_vd, mask=v_ok, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + b * s_gb + h * s_gh).to(tl.float32)
    beta = tl.load(beta_ptr + b * s_bb + h * s_bh).to(tl.float32)
    return q, k, v, g, beta


@triton.jit
def _gdn_packed_kernel(
    state_ptr, qkv_ptr, a_ptr, b_ptr, alog_ptr, dtb_ptr, o_ptr, idx_ptr,
    s_sn, s_sh, s_sv, s_sk,
    s_xb, s_ab, s_bb,
    s_ob, s_oh, s_od,
    nk, dk, dv, v_per_k, scale, eps,
    BLOCK_V: tl.constexpr, K_PAD: tl.constexpr, L2NORM: tl.constexpr, HAS_IDX: tl.constexpr,
    HINTS: tl.constexpr, EARLY: tl.constexpr, EVEN: tl.constexpr,
    HEAD_STRIDE: tl.constexpr, ROW_STRIDE: tl.constexpr,
):
    vb = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    offs_v = vb * BLOCK_V + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, K_PAD)
    v_ok = offs_v < dv
    k_ok = offs_k < dk
    o_ptrs = o_ptr + b * s_ob + h * s_oh + offs_v * s_od
    kh = h // v_per_k
    row = qkv_ptr + b.to(tl.int64) * s_xb
    if EARLY:
        q, k, v, x, a_log, b_in = _gdn_packed_inputs(row, a_ptr, b_ptr, alog_ptr, dtb_ptr, b, h, kh, nk, dk, dv,
                                                     offs_k, offs_v, k_ok, v_ok, s_ab, s_bb)
    slot = _gdn_slot(idx_ptr, b, HAS_IDX)
    if slot < 0:
        tl.store(o_ptrs, tl.zeros([BLOCK_V], tl.float32).to(o_ptr.dtype.element_ty), mask=v_ok)
        return
    st_ptrs, S = _gdn_load(state_ptr, slot, h, s_sn, s_sh, s_sv, s_sk, offs_v, offs_k, v_ok, k_ok, HINTS,
                           EVEN, HEAD_STRIDE, ROW_STRIDE)
    if not EARLY:
        q, k, v, x, a_log, b_in = _gdn_packed_inputs(row, a_ptr, b_ptr, alog_ptr, dtb_ptr, b, h, kh, nk, dk, dv,
                                                     offs_k, offs_v, k_ok, v_ok, s_ab, s_bb)
    softplus = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    decay = tl.exp(-tl.exp(a_log) * softplus)
    _gdn_update(st_ptrs, S, o_ptrs, v_ok, k_ok, q, k, v, decay, tl.sigmoid(b_in), scale, eps, L2NORM, HINTS,
                EVEN)


@triton.jit
def _gdn_packed_inputs(row, a_ptr, b_ptr, alog_ptr, dtb_ptr, b, h, kh, nk, dk, dv, offs_k, offs_v, k_ok, v_ok,
                       s_ab, s_bb):
    q = tl.load(row + kh * dk + offs_k, mask=k_ok, other=0.0).to(tl.float32)
    k = tl.load(row + (nk + kh) * dk + offs_k, mask=k_ok, other=0.0).to(tl.float32)
    v = tl.load(row + 2 * nk * dk + h * dv + offs_v, mask=v_ok, other=0.0).to(tl.float32)
    x = tl.load(a_ptr + b * s_ab + h).to(tl.float32) + tl.load(dtb_ptr + h).to(tl.float32)
    a_log = tl.load(alog_ptr + h).to(tl.float32)
    b_in = tl.load(b_ptr + b * s_bb + h).to(tl.float32)
    return q, k, v, x, a_log, b_in


def gdn_launch_config(dv: int, dk: int, state_dtype: torch.dtype,
                      launch: dict[str, int] | None = None, *, packed: bool = False,
                      programs: int | None = None, sms: int = 132) -> dict[str, int]:
    """Rows of state per program, warps, the load order and the register budget, from H200
    sweeps (bench/NOTES.md).

    One warp a program and small programs, so that many programs share a multiprocessor
    and keep enough loads in flight.  A float32 state: 16 rows of a 128-wide head, the
    inputs read after the state load is issued.  When the launch has more than 32 tiles a
    multiprocessor (two waves at 16 programs a multiprocessor; with Qwen3.5's 48 value
    heads, 12 sequences and up; ``programs`` unknown counts as that): no cache hints, and
    a cap of 168 registers (``maxnreg``) instead of none.  Without a cap the compiler keeps
    the program to 128-152 registers (13-16 programs a multiprocessor); with it, it takes
    154-168 (12 a multiprocessor) and the stream runs at 97.7% of copy bandwidth instead of
    95% (0.978x vLLM's kernel at 256 sequences, against 1.002-1.009x; bench/NOTES.md, round
    5).  Smaller launches keep the hints and no cap (at 8 sequences, 1.5 waves, the cap
    cost 6% with packed inputs).  A 16-bit state from packed inputs: 32 rows, no cache
    hints, and the inputs requested before the slot is known (``early``); 95% against 88%
    for the float32 shape, unless ``programs`` (sequences x value heads) gives too few
    programs to fill the GPU.  A 16-bit state in a launch of at most 4 tiles a
    multiprocessor (one sequence: latency, not bandwidth, sets the time): the state's head
    and row strides as compile-time constants (``const``; 3.5-3.8 us against 4.0-4.3 on the
    H200; a float32 state there gains nothing from them).
    ``launch`` (``{"block_v", "num_warps", "hints", "early", "const", "maxnreg"}``; maxnreg 0:
    no cap) overrides them, for sweeps.  (Programs that loop over several tiles, prefetching
    or pipelined, several heads a program, the state tile as one TMA copy, a one-axis grid
    and o stored before the state were no faster on the H200, most of them 1-60% slower:
    bench/NOTES.md, rounds 4 and 5.)
    """
    k_pad = next_pow2(dk)
    wide = state_dtype == torch.float32 or not packed
    block_v = max(1, min(next_pow2(dv), (2048 if wide else 4096) // k_pad))
    if not wide and programs is not None and programs * triton.cdiv(dv, block_v) < 2 * sms:
        # too few programs to fill the GPU twice (one sequence): the smaller tile wins
        block_v = max(1, min(next_pow2(dv), 2048 // k_pad))
    warps = 1
    tiles = None if programs is None else programs * triton.cdiv(dv, block_v)
    stream = state_dtype == torch.float32 and (tiles is None or tiles > 32 * sms)
    hints = wide and not stream
    early = not wide
    const = state_dtype != torch.float32 and tiles is not None and tiles <= 4 * sms
    maxnreg = 168 if stream else 0
    if launch:
        block_v = int(launch.get("block_v", block_v))
        warps = int(launch.get("num_warps", warps))
        hints = bool(launch.get("hints", hints))
        early = bool(launch.get("early", early))
        const = bool(launch.get("const", const))
        maxnreg = int(launch.get("maxnreg", maxnreg))
    even = dk == k_pad and dv % block_v == 0
    return {"block_v": block_v, "num_warps": warps, "k_pad": k_pad, "hints": hints, "early": early,
            "even": even, "const": const, "maxnreg": maxnreg}


def _compile_options(cfg: dict) -> dict[str, int]:
    """Warps, and the register cap where the launch has one (a ptxas option: only passed
    when set)."""
    return {"num_warps": cfg["num_warps"], **({"maxnreg": cfg["maxnreg"]} if cfg["maxnreg"] else {})}


def _state_strides(state: torch.Tensor, cfg: dict) -> dict[str, int]:
    """The head and row strides as compile-time constants (``const``), where each head of
    the state is one contiguous ``[dv, dk]`` block; 0 (read at run time) otherwise."""
    _, _, dv, dk = state.shape
    s_sh, s_sv, s_sk = state.stride()[1:]
    if cfg["const"] and s_sk == 1 and s_sv == dk and s_sh == dv * dk:
        return {"HEAD_STRIDE": dv * dk, "ROW_STRIDE": dk}
    return {"HEAD_STRIDE": 0, "ROW_STRIDE": 0}


def _check_state(state: torch.Tensor) -> tuple[int, int, int, int]:
    require(state.dim() == 4, "state.dim", state.dim(), "4: [slots, nv, dv, dk]")
    require_dtype(state, "state", STORAGE_DTYPES)
    return tuple(state.shape)


def _check_indices(state_indices, batch: int, slots: int, what: str) -> None:
    if state_indices is not None:
        require_dtype(state_indices, "state_indices", (torch.int32, torch.int64))
        require_shape(state_indices, "state_indices", (batch,))
    else:
        require(batch <= slots, f"{what}.shape[0]", batch, f"<= state slots ({slots}) without state_indices")


def gated_delta_step(state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     g: torch.Tensor, beta: torch.Tensor, scale: float | None = None,
                     use_qk_l2norm: bool = True, state_indices: torch.Tensor | None = None, *,
                     eps: float = 1e-6, out: torch.Tensor | None = None,
                     block_v: int | None = None, num_warps: int | None = None,
                     launch: dict[str, int] | None = None) -> torch.Tensor:
    """One gated-delta decode step; updates ``state`` in place, returns o ``[batch, nv, dv]``.

    state ``[slots, nv, dv, dk]`` (float32/float16/bfloat16), q and k ``[batch, nk, dk]``,
    v ``[batch, nv, dv]``, g and beta ``[batch, nv]``, ``nv % nk == 0``.  o has v's dtype.
    """
    slots, nv, dv, dk = _check_state(state)
    require(q.dim() == 3, "q.dim", q.dim(), "3: [batch, nk, dk]")
    batch, nk = q.shape[0], q.shape[1]
    require(nk >= 1 and nv % nk == 0, "nk", nk, f"a divisor of nv={nv}")
    require_shape(q, "q", (batch, nk, dk))
    require_shape(k, "k", (batch, nk, dk))
    require_shape(v, "v", (batch, nv, dv))
    require_shape(g, "g", (batch, nv))
    require_shape(beta, "beta", (batch, nv))
    _check_indices(state_indices, batch, slots, "q")
    require_same_device({"state": state, "q": q, "k": k, "v": v, "g": g, "beta": beta,
                         "state_indices": state_indices})
    if scale is None:
        scale = dk ** -0.5
    if out is None:
        out = torch.empty_like(v)
    if batch == 0:
        return out
    sms = sm_count(state.device)
    cfg = gdn_launch_config(dv, dk, state.dtype, launch, programs=batch * nv, sms=sms)
    bv = block_v or cfg["block_v"]
    n_vb = triton.cdiv(dv, bv)
    args = (state, q, k, v, g, beta, out, state_indices if state_indices is not None else g,
            *state.stride(), *q.stride(), *k.stride(), *v.stride(), *g.stride(), *beta.stride(),
            *out.stride(), dk, dv, nv // nk, float(scale), float(eps))
    meta = dict(BLOCK_V=bv, K_PAD=cfg["k_pad"], L2NORM=bool(use_qk_l2norm), HAS_IDX=state_indices is not None,
                HINTS=cfg["hints"], EVEN=cfg["even"] and dv % bv == 0, **_state_strides(state, cfg),
                **_compile_options(dict(cfg, num_warps=num_warps or cfg["num_warps"])))
    _gdn_kernel[(n_vb, nv, batch)](*args, EARLY=cfg["early"], **meta)
    return out


def gated_delta_step_packed(state: torch.Tensor, mixed_qkv: torch.Tensor, a: torch.Tensor,
                            b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
                            scale: float | None = None, use_qk_l2norm: bool = True,
                            state_indices: torch.Tensor | None = None, *, eps: float = 1e-6,
                            out: torch.Tensor | None = None,
                            launch: dict[str, int] | None = None) -> torch.Tensor:
    """One gated-delta decode step from a layer's packed inputs; updates ``state`` in place.

    state ``[slots, nv, dv, dk]``; ``mixed_qkv`` ``[batch, 2*nk*dk + nv*dv]`` with a
    contiguous last dim (q heads, then k heads, then v heads); ``a``, ``b`` ``[batch, nv]``;
    ``A_log``, ``dt_bias`` ``[nv]``.  Per head: ``g = -exp(A_log) * softplus(a + dt_bias)``,
    ``beta = sigmoid(b)``, then the step of :func:`gated_delta_step`.  Returns o
    ``[batch, nv, dv]`` in mixed_qkv's dtype (``out`` may be any view of that shape).
    """
    slots, nv, dv, dk = _check_state(state)
    require(mixed_qkv.dim() == 2, "mixed_qkv.dim", mixed_qkv.dim(), "2: [batch, 2*nk*dk + nv*dv]")
    batch, width = mixed_qkv.shape
    qk = width - nv * dv
    require(qk > 0 and qk % (2 * dk) == 0, "mixed_qkv.shape[1]", width,
            f"2*nk*{dk} + {nv}*{dv} for some key head count nk")
    nk = qk // (2 * dk)
    require(nv % nk == 0, "nk", nk, f"a divisor of nv={nv}")
    require(mixed_qkv.stride(1) == 1, "mixed_qkv.stride(1)", mixed_qkv.stride(1), "1 (contiguous last dim)")
    require_shape(a, "a", (batch, nv))
    require_shape(b, "b", (batch, nv))
    require_shape(A_log, "A_log", (nv,))
    require_shape(dt_bias, "dt_bias", (nv,))
    require(a.stride(1) == 1 and b.stride(1) == 1, "a/b.stride(1)", (a.stride(1), b.stride(1)), "1")
    require(A_log.stride(0) == 1 and dt_bias.stride(0) == 1, "A_log/dt_bias.stride(0)",
            (A_log.stride(0), dt_bias.stride(0)), "1")
    _check_indices(state_indices, batch, slots, "mixed_qkv")
    require_same_device({"state": state, "mixed_qkv": mixed_qkv, "a": a, "b": b, "A_log": A_log,
                         "dt_bias": dt_bias, "state_indices": state_indices})
    if scale is None:
        scale = dk ** -0.5
    if out is None:
        out = torch.empty((batch, nv, dv), dtype=mixed_qkv.dtype, device=mixed_qkv.device)
    require_shape(out, "out", (batch, nv, dv))
    if batch == 0:
        return out
    cfg = gdn_launch_config(dv, dk, state.dtype, launch, packed=True, programs=batch * nv,
                            sms=sm_count(state.device))
    bv = cfg["block_v"]
    n_vb = triton.cdiv(dv, bv)
    args = (state, mixed_qkv, a, b, A_log, dt_bias, out, state_indices if state_indices is not None else a,
            *state.stride(), mixed_qkv.stride(0), a.stride(0), b.stride(0), *out.stride(),
            nk, dk, dv, nv // nk, float(scale), float(eps))
    meta = dict(BLOCK_V=bv, K_PAD=cfg["k_pad"], L2NORM=bool(use_qk_l2norm), HAS_IDX=state_indices is not None,
                HINTS=cfg["hints"], EVEN=cfg["even"], **_state_strides(state, cfg), **_compile_options(cfg))
    _gdn_packed_kernel[(n_vb, nv, batch)](*args, EARLY=cfg["early"], **meta)
    return out
