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
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from enginecfg.kernels._reference import reference_gated_delta_step
from enginecfg.kernels._util import (
    STORAGE_DTYPES,
    next_pow2,
    require,
    require_dtype,
    require_same_device,
    require_shape,
)

__all__ = ["gated_delta_step", "reference_gated_delta_step"]


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
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    vb = tl.program_id(2)
    offs_v = vb * BLOCK_V + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, K_PAD)
    v_ok = offs_v < dv
    k_ok = offs_k < dk
    o_ptrs = o_ptr + b * s_ob + h * s_oh + offs_v * s_od
    if HAS_IDX:
        slot = tl.load(idx_ptr + b).to(tl.int64)
    else:
        slot = b.to(tl.int64)
    if slot < 0:
        tl.store(o_ptrs, tl.zeros([BLOCK_V], tl.float32).to(o_ptr.dtype.element_ty), mask=v_ok)
        return
    kh = h // v_per_k

    q = tl.load(q_ptr + b * s_qb + kh * s_qh + offs_k * s_qd, mask=k_ok, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + b * s_kb + kh * s_kh + offs_k * s_kd, mask=k_ok, other=0.0).to(tl.float32)
    if L2NORM:
        q = q / tl.sqrt(tl.sum(q * q, 0) + eps)
        k = k / tl.sqrt(tl.sum(k * k, 0) + eps)
    q = q * scale
    v = tl.load(v_ptr + b * s_vb + h * s_vh + offs_v * s_vd, mask=v_ok, other=0.0).to(tl.float32)
    decay = tl.exp(tl.load(g_ptr + b * s_gb + h * s_gh).to(tl.float32))
    beta = tl.load(beta_ptr + b * s_bb + h * s_bh).to(tl.float32)

    st_ptrs = (state_ptr + slot * s_sn + h * s_sh
               + offs_v[:, None] * s_sv + offs_k[None, :] * s_sk)
    mask = v_ok[:, None] & k_ok[None, :]
    S = tl.load(st_ptrs, mask=mask, other=0.0).to(tl.float32) * decay
    u = v - tl.sum(S * k[None, :], 1)
    S = S + (beta * u)[:, None] * k[None, :]
    tl.store(st_ptrs, S.to(state_ptr.dtype.element_ty), mask=mask)
    o = tl.sum(S * q[None, :], 1)
    tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=v_ok)


def gated_delta_step(state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     g: torch.Tensor, beta: torch.Tensor, scale: float | None = None,
                     use_qk_l2norm: bool = True, state_indices: torch.Tensor | None = None, *,
                     eps: float = 1e-6, out: torch.Tensor | None = None,
                     block_v: int | None = None, num_warps: int = 8) -> torch.Tensor:
    """One gated-delta decode step; updates ``state`` in place, returns o ``[batch, nv, dv]``.

    state ``[slots, nv, dv, dk]`` (float32/float16/bfloat16), q and k ``[batch, nk, dk]``,
    v ``[batch, nv, dv]``, g and beta ``[batch, nv]``, ``nv % nk == 0``.  o has v's dtype.
    """
    require(state.dim() == 4, "state.dim", state.dim(), "4: [slots, nv, dv, dk]")
    require_dtype(state, "state", STORAGE_DTYPES)
    slots, nv, dv, dk = state.shape
    require(q.dim() == 3, "q.dim", q.dim(), "3: [batch, nk, dk]")
    batch, nk = q.shape[0], q.shape[1]
    require(nk >= 1 and nv % nk == 0, "nk", nk, f"a divisor of nv={nv}")
    require_shape(q, "q", (batch, nk, dk))
    require_shape(k, "k", (batch, nk, dk))
    require_shape(v, "v", (batch, nv, dv))
    require_shape(g, "g", (batch, nv))
    require_shape(beta, "beta", (batch, nv))
    if state_indices is not None:
        require_dtype(state_indices, "state_indices", (torch.int32, torch.int64))
        require_shape(state_indices, "state_indices", (batch,))
    else:
        require(batch <= slots, "q.shape[0]", batch, f"<= state slots ({slots}) without state_indices")
    require_same_device({"state": state, "q": q, "k": k, "v": v, "g": g, "beta": beta,
                         "state_indices": state_indices})
    if scale is None:
        scale = dk ** -0.5
    if out is None:
        out = torch.empty_like(v)
    if batch == 0:
        return out
    k_pad = next_pow2(dk)
    if block_v is None:
        # rows of state per program, from H200 sweeps at dk = dv = 128 over 8 warps:
        # 16 KiB for float32 (89% of copy bandwidth), 32 KiB for 16-bit states (81%)
        per_program = 16384 if state.dtype == torch.float32 else 32768
        block_v = max(1, min(next_pow2(dv), (per_program // state.element_size()) // k_pad))
    grid = (batch, nv, triton.cdiv(dv, block_v))
    _gdn_kernel[grid](
        state, q, k, v, g, beta, out, state_indices if state_indices is not None else g,
        *state.stride(), *q.stride(), *k.stride(), *v.stride(), *g.stride(), *beta.stride(),
        *out.stride(),
        dk, dv, nv // nk, float(scale), float(eps),
        BLOCK_V=block_v, K_PAD=k_pad, L2NORM=bool(use_qk_l2norm), HAS_IDX=state_indices is not None,
        num_warps=num_warps,
    )
    return out
