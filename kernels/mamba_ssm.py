"""Mamba2 decode step: the selective-scan state update and the causal conv1d state update.

Both are pure streaming kernels (each state element is read once and written once), so
their speed is the state's bytes over memory bandwidth.  Arithmetic is float32 whatever
the state dtype; the new state is rounded to the state's dtype when stored, which is the
only place a 16-bit state loses precision (see ``checks.state_precision``).

SSM state: ``[num_slots, nheads, head_dim, dstate]``; one program owns ``BLOCK_P`` rows of
one head of one sequence, so no two programs touch the same state bytes.

Conv state: logical shape ``[num_slots, K-1, conv_dim]`` (oldest column first), chosen so
a program's loads and stores run along ``conv_dim`` and coalesce.  Any strides work: a
cache kept as ``[num_slots, conv_dim, K-1]`` is passed as ``.transpose(1, 2)`` and is
updated in place all the same.

``state_indices`` (int32 ``[batch]``, optional) maps sequence b to its cache slot; a
negative entry (a padded batch row) leaves every slot untouched and writes zeros to y.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from enginecfg.kernels._reference import (
    reference_causal_conv1d_update,
    reference_selective_state_update,
)
from enginecfg.kernels._util import (
    STORAGE_DTYPES,
    next_pow2,
    require,
    require_dtype,
    require_same_device,
    require_shape,
    sm_count,
)

__all__ = [
    "selective_state_update",
    "ssm_launch_config",
    "causal_conv1d_update",
    "reference_selective_state_update",
    "reference_causal_conv1d_update",
]


@triton.jit
def _ssm_kernel(
    state_ptr, x_ptr, dt_ptr, dtb_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, y_ptr, idx_ptr,
    s_sn, s_sh, s_sp, s_sd,
    s_xb, s_xh, s_xp,
    s_dtb, s_dth,
    s_Bb, s_Bg, s_Bd,
    s_Cb, s_Cg, s_Cd,
    s_zb, s_zh, s_zp,
    s_yb, s_yh, s_yp,
    head_dim, dstate, heads_per_group,
    BLOCK_P: tl.constexpr, N_PAD: tl.constexpr,
    HAS_DTB: tl.constexpr, HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_IDX: tl.constexpr,
    SOFTPLUS: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    pb = tl.program_id(2)
    offs_p = pb * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, N_PAD)
    p_ok = offs_p < head_dim
    n_ok = offs_n < dstate
    y_ptrs = y_ptr + b * s_yb + h * s_yh + offs_p * s_yp

    if HAS_IDX:
        slot = tl.load(idx_ptr + b).to(tl.int64)
    else:
        slot = b.to(tl.int64)
    if slot < 0:
        tl.store(y_ptrs, tl.zeros([BLOCK_P], tl.float32).to(y_ptr.dtype.element_ty), mask=p_ok)
        return
    g = h // heads_per_group

    dt = tl.load(dt_ptr + b * s_dtb + h * s_dth).to(tl.float32)
    if HAS_DTB:
        dt += tl.load(dtb_ptr + h).to(tl.float32)
    if SOFTPLUS:
        dt = tl.maximum(dt, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(dt)))
    a = tl.load(A_ptr + h).to(tl.float32)
    dA = tl.exp(dt * a)

    x = tl.load(x_ptr + b * s_xb + h * s_xh + offs_p * s_xp, mask=p_ok, other=0.0).to(tl.float32)
    Bv = tl.load(B_ptr + b * s_Bb + g * s_Bg + offs_n * s_Bd, mask=n_ok, other=0.0).to(tl.float32)
    Cv = tl.load(C_ptr + b * s_Cb + g * s_Cg + offs_n * s_Cd, mask=n_ok, other=0.0).to(tl.float32)

    st_ptrs = (state_ptr + slot * s_sn + h * s_sh
               + offs_p[:, None] * s_sp + offs_n[None, :] * s_sd)
    mask = p_ok[:, None] & n_ok[None, :]
    s = tl.load(st_ptrs, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    s = s * dA + (dt * x)[:, None] * Bv[None, :]
    tl.store(st_ptrs, s.to(state_ptr.dtype.element_ty), mask=mask, eviction_policy="evict_first")

    y = tl.sum(s * Cv[None, :], 1)
    if HAS_D:
        y += x * tl.load(D_ptr + h).to(tl.float32)
    if HAS_Z:
        z = tl.load(z_ptr + b * s_zb + h * s_zh + offs_p * s_zp, mask=p_ok, other=0.0).to(tl.float32)
        y = y * z * tl.sigmoid(z)
    tl.store(y_ptrs, y.to(y_ptr.dtype.element_ty), mask=p_ok)


def ssm_launch_config(batch: int, nheads: int, head_dim: int, dstate: int, device: torch.device,
                      block_p: int | None = None, num_warps: int | None = None) -> dict[str, int]:
    """Rows of state per program and warps for the Mamba2 step.

    Large batches: 4096 state elements a program (32 rows of dstate 128) on 4 warps.  Few
    sequences leave too few programs to keep every multiprocessor's loads in flight (at
    one sequence, 64 heads x 2 programs on 132 SMs), so rows are halved until there are
    about eight programs per multiprocessor, down to 4 rows; warps follow the tile size.
    """
    n_pad = next_pow2(dstate)
    bp = max(1, min(next_pow2(head_dim), 4096 // n_pad))
    if block_p is None:
        want = 8 * sm_count(device)
        while bp > 4 and batch * nheads * triton.cdiv(head_dim, bp) < want:
            bp //= 2
    else:
        bp = block_p
    if num_warps is None:
        num_warps = max(1, min(4, bp * n_pad // 1024))
    return {"block_p": bp, "num_warps": num_warps}


def selective_state_update(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                           B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None = None,
                           z: torch.Tensor | None = None, dt_bias: torch.Tensor | None = None,
                           dt_softplus: bool = True, state_indices: torch.Tensor | None = None,
                           *, out: torch.Tensor | None = None, block_p: int | None = None,
                           num_warps: int | None = None, launch: dict | None = None) -> torch.Tensor:
    """One Mamba2 step; updates ``state`` in place and returns ``y`` ``[batch, nheads, head_dim]``.

    Shapes: state ``[slots, nheads, head_dim, dstate]`` (float32/float16/bfloat16),
    x ``[batch, nheads, head_dim]``, dt ``[batch, nheads]``, A, D, dt_bias ``[nheads]``,
    B, C ``[batch, ngroups, dstate]`` with ``nheads % ngroups == 0``, z like x.  Math in
    :func:`~enginecfg.kernels._reference.reference_selective_state_update`.  y has x's dtype.
    """
    require(state.dim() == 4, "state.dim", state.dim(), "4: [slots, nheads, head_dim, dstate]")
    require_dtype(state, "state", STORAGE_DTYPES)
    slots, nheads, head_dim, dstate = state.shape
    require(x.dim() == 3, "x.dim", x.dim(), "3: [batch, nheads, head_dim]")
    batch = x.shape[0]
    require_shape(x, "x", (batch, nheads, head_dim))
    require_shape(dt, "dt", (batch, nheads))
    require_shape(A, "A", (nheads,))
    require(B.dim() == 3, "B.dim", B.dim(), "3: [batch, ngroups, dstate]")
    ngroups = B.shape[1]
    require(ngroups >= 1 and nheads % ngroups == 0, "ngroups", ngroups, f"a divisor of nheads={nheads}")
    require_shape(B, "B", (batch, ngroups, dstate))
    require_shape(C, "C", (batch, ngroups, dstate))
    for name, t in (("D", D), ("dt_bias", dt_bias)):
        if t is not None:
            require_shape(t, name, (nheads,))
    if z is not None:
        require_shape(z, "z", (batch, nheads, head_dim))
    if state_indices is not None:
        require_dtype(state_indices, "state_indices", (torch.int32, torch.int64))
        require_shape(state_indices, "state_indices", (batch,))
    else:
        require(batch <= slots, "x.shape[0]", batch, f"<= state slots ({slots}) without state_indices")
    require_same_device({"state": state, "x": x, "dt": dt, "A": A, "B": B, "C": C, "D": D, "z": z,
                         "dt_bias": dt_bias, "state_indices": state_indices})
    if out is None:
        out = torch.empty_like(x)
    if batch == 0:
        return out
    n_pad = next_pow2(dstate)
    cfg = ssm_launch_config(batch, nheads, head_dim, dstate, state.device, block_p, num_warps)
    block_p, num_warps = cfg["block_p"], cfg["num_warps"]
    grid = (batch, nheads, triton.cdiv(head_dim, block_p))
    zz = z if z is not None else x
    _ssm_kernel[grid](
        state, x, dt, dt_bias if dt_bias is not None else A, A, B, C,
        D if D is not None else A, zz, out,
        state_indices if state_indices is not None else dt,
        *state.stride(), *x.stride(), *dt.stride(), *B.stride(), *C.stride(), *zz.stride(),
        *out.stride(),
        head_dim, dstate, nheads // ngroups,
        BLOCK_P=block_p, N_PAD=n_pad,
        HAS_DTB=dt_bias is not None, HAS_D=D is not None, HAS_Z=z is not None,
        HAS_IDX=state_indices is not None, SOFTPLUS=bool(dt_softplus),
        num_warps=num_warps,
    )
    return out


@triton.jit
def _conv_col(base, j: tl.constexpr, s_ck, d_ok):
    return tl.load(base + j * s_ck, mask=d_ok, other=0.0, eviction_policy="evict_first")


@triton.jit
def _conv_w(w_row, j: tl.constexpr, s_wk, d_ok):
    return tl.load(w_row + j * s_wk, mask=d_ok, other=0.0).to(tl.float32)


@triton.jit
def _conv_kernel(
    cs_ptr, x_ptr, w_ptr, bias_ptr, out_ptr, idx_ptr,
    s_cn, s_ck, s_cd,
    s_xb, s_xd,
    s_wd, s_wk,
    s_ob, s_od,
    dim,
    K: tl.constexpr, BLOCK_D: tl.constexpr,
    HAS_BIAS: tl.constexpr, SILU: tl.constexpr, HAS_IDX: tl.constexpr,
):
    """One step for ``BLOCK_D`` channels of one sequence.

    A program moves a few hundred bytes, so its time is memory latency, not bandwidth.
    x, the weights and the bias do not depend on the slot and are requested before it
    arrives; then every state column is loaded before any is stored (a store waits for
    its value, and a load written after it would wait too), so the step costs one round
    trip after the slot.  Each thread owns its channels in every column, so shifting the
    columns in place is safe without a barrier.
    """
    db = tl.program_id(0)
    b = tl.program_id(1)
    offs_d = db * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = offs_d < dim
    o_ptrs = out_ptr + b * s_ob + offs_d * s_od
    x = tl.load(x_ptr + b * s_xb + offs_d * s_xd, mask=d_ok, other=0.0)
    w_row = w_ptr + offs_d * s_wd
    if HAS_BIAS:
        acc = tl.load(bias_ptr + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    else:
        acc = tl.zeros([BLOCK_D], tl.float32)
    acc += x.to(tl.float32) * _conv_w(w_row, K - 1, s_wk, d_ok)
    if HAS_IDX:
        slot = tl.load(idx_ptr + b).to(tl.int64)
    else:
        slot = b.to(tl.int64)
    if slot < 0:
        tl.store(o_ptrs, tl.zeros([BLOCK_D], tl.float32).to(out_ptr.dtype.element_ty), mask=d_ok)
        return
    base = cs_ptr + slot * s_cn + offs_d * s_cd
    if K <= 5:
        # widths up to 5 (every real model uses 3 or 4) hold all columns at once;
        # column j feeds tap j and moves to column j - 1; x becomes column K - 2
        c0 = _conv_col(base, 0, s_ck, d_ok)
        if K >= 3:
            c1 = _conv_col(base, 1, s_ck, d_ok)
        if K >= 4:
            c2 = _conv_col(base, 2, s_ck, d_ok)
        if K >= 5:
            c3 = _conv_col(base, 3, s_ck, d_ok)
        acc += c0.to(tl.float32) * _conv_w(w_row, 0, s_wk, d_ok)
        if K >= 3:
            acc += c1.to(tl.float32) * _conv_w(w_row, 1, s_wk, d_ok)
            tl.store(base, c1, mask=d_ok)
        if K >= 4:
            acc += c2.to(tl.float32) * _conv_w(w_row, 2, s_wk, d_ok)
            tl.store(base + s_ck, c2, mask=d_ok)
        if K >= 5:
            acc += c3.to(tl.float32) * _conv_w(w_row, 3, s_wk, d_ok)
            tl.store(base + 2 * s_ck, c3, mask=d_ok)
    else:
        for j in tl.static_range(K - 1):
            col = _conv_col(base, j, s_ck, d_ok)
            acc += col.to(tl.float32) * _conv_w(w_row, j, s_wk, d_ok)
            if j > 0:
                tl.store(base + (j - 1) * s_ck, col, mask=d_ok)
    tl.store(base + (K - 2) * s_ck, x.to(cs_ptr.dtype.element_ty), mask=d_ok)
    if SILU:
        acc = acc * tl.sigmoid(acc)
    tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=d_ok)


def causal_conv1d_update(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                         bias: torch.Tensor | None = None, activation: str | None = "silu",
                         state_indices: torch.Tensor | None = None, *,
                         out: torch.Tensor | None = None, block_d: int | None = None,
                         num_warps: int | None = None) -> torch.Tensor:
    """One decode step of Mamba's depthwise causal conv; shifts ``conv_state`` in place.

    conv_state ``[slots, K-1, conv_dim]`` (any strides; see the module docstring),
    x ``[batch, conv_dim]``, weight ``[conv_dim, K]``, bias ``[conv_dim]``; activation
    ``"silu"`` or None.  Returns ``[batch, conv_dim]`` in x's dtype.
    """
    require(conv_state.dim() == 3, "conv_state.dim", conv_state.dim(), "3: [slots, K-1, conv_dim]")
    require_dtype(conv_state, "conv_state", STORAGE_DTYPES)
    slots, km1, dim = conv_state.shape
    require(x.dim() == 2 and x.shape[1] == dim, "x.shape", list(x.shape), f"[batch, {dim}]")
    batch = x.shape[0]
    require_shape(weight, "weight", (dim, km1 + 1))
    require(km1 >= 1, "conv width K", km1 + 1, ">= 2")
    if bias is not None:
        require_shape(bias, "bias", (dim,))
    require(activation in (None, "silu", "swish"), "activation", activation, "None, 'silu'")
    if state_indices is not None:
        require_dtype(state_indices, "state_indices", (torch.int32, torch.int64))
        require_shape(state_indices, "state_indices", (batch,))
    else:
        require(batch <= slots, "x.shape[0]", batch, f"<= conv_state slots ({slots}) without state_indices")
    require_same_device({"conv_state": conv_state, "x": x, "weight": weight, "bias": bias,
                         "state_indices": state_indices})
    if out is None:
        out = torch.empty_like(x)
    if batch == 0:
        return out
    K = km1 + 1
    if block_d is None:
        block_d = 256
    if num_warps is None:
        # H200 sweeps (bench/NOTES.md): 256 channels a program; 2 channels a thread for a
        # 16-bit state (4 warps: 9.1 us against 10.8 on 2 warps, Nemotron, 256 sequences)
        # and 4 for a float32 one (2 warps: 15.1 us against 15.8 on 4)
        per_thread = 4 if conv_state.element_size() >= 4 else 2
        num_warps = max(1, block_d // (32 * per_thread))
    grid = (triton.cdiv(dim, block_d), batch)
    _conv_kernel[grid](
        conv_state, x, weight, bias if bias is not None else weight, out,
        state_indices if state_indices is not None else x,
        *conv_state.stride(), *x.stride(), *weight.stride(), *out.stride(),
        dim,
        K=K, BLOCK_D=block_d,
        HAS_BIAS=bias is not None, SILU=activation is not None, HAS_IDX=state_indices is not None,
        num_warps=num_warps,
    )
    return out
