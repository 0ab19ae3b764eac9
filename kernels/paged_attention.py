"""Paged attention over a block-table KV cache: single-token decode and chunked prefill.

Cache layout (both K and V): ``[num_blocks, block_size, num_kv_heads, head_size]``, any
strides.  ``block_table`` int32 ``[batch, max_blocks]`` maps a sequence's logical block
``i`` to a physical block; ``seq_lens`` int32 ``[batch]`` is each sequence's context length
(for prefill: cached prefix + the new chunk).

Why the kernels look the way they do:

* The KV is walked in tiles of a power-of-two ``TILE`` tokens and each token's physical
  block and in-block offset are computed (``tok // block_size``, ``tok % block_size``), so
  a block size need not be a power of two (528, 784, 1056, 2096 arise from hybrid
  attention/Mamba page alignment) and a tile may straddle two blocks.
* One program serves all ``G = num_q_heads / num_kv_heads`` query heads of a KV head, so
  each K/V row is read from memory once per KV head, not once per query head; the G rows
  are padded to 16 so the scores are a ``tl.dot``.
* Head sizes that are not powers of two (80, 96, ...) are padded to the next power of two
  and masked.
* Decode splits a long context into ``num_splits`` pieces (flash-decoding) when there are
  too few (sequence, KV head) pairs to fill the GPU; a second small kernel merges the
  partial softmaxes.  Accumulation is float32 throughout; 16-bit K/V feed the dot
  products in their own dtype, float32 K/V use exact (non-tf32) float32 dots.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from enginecfg.kernels._reference import (
    reference_mla_decode_attention,
    reference_paged_decode_attention,
    reference_paged_decode_attention_fp8,
    reference_paged_prefill_attention,
)
from enginecfg.kernels._util import (
    FP8_DTYPES,
    STORAGE_DTYPES,
    next_pow2,
    require,
    require_dtype,
    require_same_device,
    require_shape,
    sm_count,
)

__all__ = [
    "paged_decode_attention",
    "mla_decode_attention",
    "FP8_DTYPES",
    "paged_prefill_attention",
    "reference_paged_decode_attention",
    "reference_paged_decode_attention_fp8",
    "reference_mla_decode_attention",
    "reference_paged_prefill_attention",
    "decode_launch_config",
]

_LOG2E = 1.4426950408889634
MAX_HEAD_SIZE = 512
#: decode programs wanted per multiprocessor before flash-decoding splits stop being added
_PROGRAMS_PER_SM = 2
#: Triton's CPU interpreter: bf16 dots there must be done on float32 copies.
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
_F32_PRECISION = tl.constexpr("ieee" if _INTERPRET else "tf32x3")


@triton.jit
def _dot(a, b, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """``a @ b`` with a float32 accumulator.

    ``IEEE`` (float32 operands): on a GPU the product is split into three tf32 products
    ("tf32x3"), which runs on the tensor cores at close to float32 accuracy -- a plain
    float32 dot falls back to scalar FMAs and made float32 caches 7x slower than bf16.
    ``UPCAST`` feeds float32 copies of (already rounded) 16-bit operands to the dot: the
    products of two bf16/fp16 numbers are exact in float32, so the result matches a
    16-bit-input dot; it exists because Triton's CPU interpreter mishandles bf16 dots.
    """
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif IEEE:
        return tl.dot(a, b, input_precision=_F32_PRECISION)
    else:
        return tl.dot(a, b)


@triton.jit
def _decode_kernel(
    q_ptr, k_ptr, v_ptr, bt_ptr, sl_ptr, out_ptr, po_ptr, pml_ptr, ks_ptr, vs_ptr,
    scale_log2,
    s_qb, s_qh, s_qd,
    s_kn, s_kt, s_kh, s_kd,
    s_vn, s_vt, s_vh, s_vd,
    s_btb, s_btn,
    s_ob, s_oh, s_od,
    s_pb, s_ph, s_ps,
    num_q_heads, tokens_per_split, max_blocks,
    G: tl.constexpr, M_PAD: tl.constexpr, HEAD: tl.constexpr, D_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, SPLIT: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, FP8: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    if FP8:
        scale_log2 = scale_log2 * tl.load(ks_ptr).to(tl.float32)
        v_scale = tl.load(vs_ptr).to(tl.float32)

    seq_len = tl.load(sl_ptr + b)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)

    rows = tl.arange(0, M_PAD)
    heads = kvh * G + rows
    row_ok = rows < G
    offs_d = tl.arange(0, D_PAD)
    d_ok = offs_d < HEAD

    q = tl.load(
        q_ptr + b * s_qb + heads[:, None] * s_qh + offs_d[None, :] * s_qd,
        mask=row_ok[:, None] & d_ok[None, :], other=0.0,
    )
    if not FP8:
        q = q.to(k_ptr.dtype.element_ty)

    m_i = tl.full([M_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([M_PAD], tl.float32)
    acc = tl.zeros([M_PAD, D_PAD], tl.float32)

    bt_row = bt_ptr + b.to(tl.int64) * s_btb
    for t0 in range(start, end, TILE):
        toks = t0 + tl.arange(0, TILE)
        blk = toks // BLOCK_SIZE
        t_ok = (toks < end) & (blk < max_blocks)
        off = toks % BLOCK_SIZE
        phys = tl.load(bt_row + blk * s_btn, mask=t_ok, other=0).to(tl.int64)
        kv_mask = t_ok[:, None] & d_ok[None, :]
        k = tl.load(
            k_ptr + phys[:, None] * s_kn + off[:, None] * s_kt + kvh * s_kh + offs_d[None, :] * s_kd,
            mask=kv_mask, other=0.0,
        )
        v = tl.load(
            v_ptr + phys[:, None] * s_vn + off[:, None] * s_vt + kvh * s_vh + offs_d[None, :] * s_vd,
            mask=kv_mask, other=0.0,
        )
        if FP8:
            # fp8 -> the query's 16-bit dtype is exact; the per-tensor scales are applied
            # to the scores and once to the output instead of to every element
            k = k.to(q_ptr.dtype.element_ty)
            v = v.to(q_ptr.dtype.element_ty)
        s = _dot(q, tl.trans(k), IEEE, UPCAST)
        s = tl.where(t_ok[None, :], s * scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        pv = _dot(p.to(v.dtype), v, IEEE, UPCAST)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    if FP8:
        acc = acc * v_scale
    if SPLIT:
        base = b * s_pb + heads * s_ph + split * s_ps
        tl.store(po_ptr + base[:, None] * D_PAD + offs_d[None, :], acc, mask=row_ok[:, None])
        tl.store(pml_ptr + base * 2, m_i, mask=row_ok)
        tl.store(pml_ptr + base * 2 + 1, l_i, mask=row_ok)
    else:
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        o = acc / l_safe[:, None]
        tl.store(
            out_ptr + b * s_ob + heads[:, None] * s_oh + offs_d[None, :] * s_od,
            o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :],
        )


@triton.jit
def _merge_kernel(
    po_ptr, pml_ptr, out_ptr,
    s_pb, s_ph, s_ps,
    s_ob, s_oh, s_od,
    num_splits,
    HEAD: tl.constexpr, D_PAD: tl.constexpr, S_PAD: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, S_PAD)
    s_ok = offs_s < num_splits
    base = b * s_pb + h * s_ph
    m = tl.load(pml_ptr + (base + offs_s * s_ps) * 2, mask=s_ok, other=float("-inf"))
    l = tl.load(pml_ptr + (base + offs_s * s_ps) * 2 + 1, mask=s_ok, other=0.0)
    m_max = tl.max(m, 0)
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.exp2(m - m_max)
    total = tl.sum(w * l, 0)
    total = tl.where(total == 0.0, 1.0, total)
    offs_d = tl.arange(0, D_PAD)
    acc = tl.zeros([D_PAD], tl.float32)
    for s in range(0, num_splits):
        ms = tl.load(pml_ptr + (base + s * s_ps) * 2)
        ws = tl.exp2(ms - m_max)
        part = tl.load(po_ptr + (base + s * s_ps) * D_PAD + offs_d)
        acc += part * ws
    o = acc / total
    tl.store(out_ptr + b * s_ob + h * s_oh + offs_d * s_od, o.to(out_ptr.dtype.element_ty),
             mask=offs_d < HEAD)


def _tile_for(d_pad: int, kv_dtype: torch.dtype) -> tuple[int, int]:
    """Decode (TILE tokens, num_warps): a K tile of 8-32 KiB, the accumulator in registers.

    Chosen from sweeps on an H200 (bench/NOTES.md): for bf16 at head 512, 4 warps ran at
    90% of copy bandwidth where 8 warps ran at 48%.
    """
    if kv_dtype == torch.float32:
        return (64, 4) if d_pad <= 128 else (16, 4) if d_pad <= 256 else (16, 8)
    if d_pad <= 64:
        return 64, 4
    if d_pad <= 128:
        return 64, 4
    if d_pad <= 256:
        return 32, 4
    return 16, 4


def decode_launch_config(batch: int, num_kv_heads: int, max_seq_len: int, head_size: int,
                         kv_dtype: torch.dtype, device: torch.device,
                         num_splits: int | None = None,
                         launch: dict[str, int] | None = None) -> dict[str, int]:
    """The tile, warps and split count the decode kernel would use for these shapes.

    Splits are added only while (batch x KV heads) programs fall short of about two per
    multiprocessor, and each split keeps at least four tiles of tokens, so short contexts
    and big batches run unsplit and write the output directly.  ``launch`` overrides
    ``tile``, ``num_warps`` and ``num_stages`` (for tuning sweeps).
    """
    d_pad = max(16, next_pow2(head_size))
    tile, warps = _tile_for(d_pad, kv_dtype)
    stages = 2
    if launch:
        tile = int(launch.get("tile", tile))
        warps = int(launch.get("num_warps", warps))
        stages = int(launch.get("num_stages", stages))
    if num_splits is None:
        base = max(1, batch * num_kv_heads)
        want = max(1, math.ceil(_PROGRAMS_PER_SM * sm_count(device) / base))
        most = max(1, math.ceil(max(1, max_seq_len) / (4 * tile)))
        num_splits = min(want, most, 256)
    num_splits = max(1, int(num_splits))
    per_split = math.ceil(max(1, max_seq_len) / num_splits)
    per_split = math.ceil(per_split / tile) * tile
    num_splits = max(1, math.ceil(max(1, max_seq_len) / per_split))
    return {"tile": tile, "num_warps": warps, "num_stages": stages, "num_splits": num_splits,
            "tokens_per_split": per_split, "d_pad": d_pad}


def _check_cache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_table: torch.Tensor, seq_lens: torch.Tensor, q_rank: int,
                 allow_fp8: bool = False) -> tuple[int, ...]:
    require(q.dim() == q_rank, "q.dim", q.dim(), str(q_rank))
    require(k_cache.dim() == 4, "k_cache.dim", k_cache.dim(),
            "4: [num_blocks, block_size, num_kv_heads, head_size]")
    num_blocks, block_size, num_kv_heads, head_size = k_cache.shape
    require_shape(v_cache, "v_cache", tuple(k_cache.shape))
    require_dtype(k_cache, "k_cache", STORAGE_DTYPES + (FP8_DTYPES if allow_fp8 else ()))
    require(v_cache.dtype == k_cache.dtype, "v_cache.dtype", str(v_cache.dtype), str(k_cache.dtype))
    require_dtype(q, "q", STORAGE_DTYPES)
    require(1 <= head_size <= MAX_HEAD_SIZE, "head_size", head_size, f"1..{MAX_HEAD_SIZE}")
    require(q.shape[-1] == head_size, "q.shape[-1]", q.shape[-1], f"{head_size} (the cache head size)")
    num_q_heads = q.shape[-2]
    require(num_kv_heads >= 1 and num_q_heads % num_kv_heads == 0, "q num_heads", num_q_heads,
            f"a multiple of num_kv_heads={num_kv_heads}")
    require(block_table.dim() == 2, "block_table.dim", block_table.dim(), "2: [batch, max_blocks]")
    require_dtype(block_table, "block_table", (torch.int32,))
    require_dtype(seq_lens, "seq_lens", (torch.int32,))
    batch = block_table.shape[0]
    require_shape(seq_lens, "seq_lens", (batch,))
    require_same_device({"q": q, "k_cache": k_cache, "v_cache": v_cache,
                         "block_table": block_table, "seq_lens": seq_lens})
    return batch, block_size, num_kv_heads, head_size, num_q_heads


def _scale_tensor(value, device) -> torch.Tensor:
    """A per-tensor scale as the one-element float32 tensor the kernels load."""
    if value is None:
        value = 1.0
    if torch.is_tensor(value):
        require(value.numel() == 1, "kv scale numel", value.numel(), "1 (a per-tensor scale)")
        return value.reshape(1).to(device=device, dtype=torch.float32)
    return torch.full((1,), float(value), dtype=torch.float32, device=device)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_table: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                           *, max_seq_len: int | None = None, num_splits: int | None = None,
                           out: torch.Tensor | None = None,
                           launch: dict[str, int] | None = None,
                           k_scale: torch.Tensor | float | None = None,
                           v_scale: torch.Tensor | float | None = None) -> torch.Tensor:
    """One new query token per sequence attending to its whole paged context.

    An fp8 cache (``float8_e4m3fn`` / ``float8_e5m2``) is read as fp8 (half the bytes of
    bf16) with per-tensor ``k_scale`` / ``v_scale`` (one-element float32 tensors or
    floats; 1.0 if not given), the values vLLM's fp8 caches carry.  The fp8 values are
    widened to q's dtype (exact: both fp8 formats fit in bf16 and fp16) for the dot
    products; ``k_scale`` multiplies the scores and ``v_scale`` the output, which is the
    same math as dequantising every element, one rounding fewer.

    ``q`` ``[batch, num_q_heads, head_size]``; returns ``out`` of the same shape and dtype.
    ``max_seq_len`` bounds the split sizes (default: ``max_blocks * block_size``, known
    without a device sync); ``num_splits`` overrides the split heuristic and ``launch``
    the tile/warps/stages (see :func:`decode_launch_config`).  A sequence of
    length 0 yields zeros.  Tokens past the table's capacity (``max_blocks * block_size``)
    are ignored rather than read through a column that does not exist; the physical
    block numbers in the table are trusted.
    """
    batch, block_size, num_kv_heads, head_size, num_q_heads = _check_cache(
        q, k_cache, v_cache, block_table, seq_lens, 3, allow_fp8=True)
    require(q.shape[0] == batch, "q.shape[0]", q.shape[0], f"{batch} (block_table rows)")
    fp8 = k_cache.dtype in FP8_DTYPES
    compute = q.dtype if fp8 else k_cache.dtype
    ks = _scale_tensor(k_scale, q.device) if fp8 else seq_lens
    vs = _scale_tensor(v_scale, q.device) if fp8 else seq_lens
    if max_seq_len is None:
        max_seq_len = block_table.shape[1] * block_size
    cfg = decode_launch_config(batch, num_kv_heads, max_seq_len, head_size, compute,
                               q.device, num_splits, launch)
    if out is None:
        out = torch.empty_like(q)
    if batch == 0:
        return out
    G = num_q_heads // num_kv_heads
    m_pad = max(16, next_pow2(G))
    d_pad = cfg["d_pad"]
    splits = cfg["num_splits"]
    split = splits > 1
    if split:
        po = torch.empty((batch, num_q_heads, splits, d_pad), device=q.device, dtype=torch.float32)
        pml = torch.empty((batch, num_q_heads, splits, 2), device=q.device, dtype=torch.float32)
    else:
        po = pml = out  # unused
    ps = (num_q_heads * splits, splits, 1)
    _decode_kernel[(batch, num_kv_heads, splits)](
        q, k_cache, v_cache, block_table, seq_lens, out, po, pml, ks, vs,
        float(scale) * _LOG2E,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_table.stride(), *out.stride(),
        *ps,
        num_q_heads, cfg["tokens_per_split"], block_table.shape[1],
        G=G, M_PAD=m_pad, HEAD=head_size, D_PAD=d_pad, BLOCK_SIZE=block_size,
        TILE=cfg["tile"], SPLIT=split, IEEE=compute == torch.float32,
        UPCAST=_INTERPRET and compute == torch.bfloat16, FP8=fp8,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    if split:
        _merge_kernel[(batch, num_q_heads)](
            po, pml, out, *ps, *out.stride(), splits,
            HEAD=head_size, D_PAD=d_pad, S_PAD=max(2, next_pow2(splits)), num_warps=4,
        )
    return out


@triton.jit
def _prefill_kernel(
    q_ptr, k_ptr, v_ptr, bt_ptr, sl_ptr, qsl_ptr, out_ptr,
    scale_log2,
    s_qt, s_qh, s_qd,
    s_kn, s_kt, s_kh, s_kd,
    s_vn, s_vt, s_vh, s_vd,
    s_btb, s_btn,
    s_ot, s_oh, s_od,
    max_blocks,
    G: tl.constexpr, BLOCK_Q: tl.constexpr, M_PAD: tl.constexpr,
    HEAD: tl.constexpr, D_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
):
    qtile = tl.program_id(0)
    b = tl.program_id(1)
    kvh = tl.program_id(2)

    q_start = tl.load(qsl_ptr + b)
    q_len = tl.load(qsl_ptr + b + 1) - q_start
    if qtile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(sl_ptr + b)
    prefix = seq_len - q_len

    rows = tl.arange(0, M_PAD)
    q_local = rows // G
    heads = kvh * G + rows % G
    qi = qtile * BLOCK_Q + q_local
    row_ok = (q_local < BLOCK_Q) & (qi < q_len)
    q_pos = prefix + qi
    offs_d = tl.arange(0, D_PAD)
    d_ok = offs_d < HEAD
    tok_rows = (q_start + qi).to(tl.int64)

    q = tl.load(
        q_ptr + tok_rows[:, None] * s_qt + heads[:, None] * s_qh + offs_d[None, :] * s_qd,
        mask=row_ok[:, None] & d_ok[None, :], other=0.0,
    )
    q = q.to(k_ptr.dtype.element_ty)

    m_i = tl.full([M_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([M_PAD], tl.float32)
    acc = tl.zeros([M_PAD, D_PAD], tl.float32)

    last_q = tl.minimum(qtile * BLOCK_Q + BLOCK_Q, q_len) - 1
    kv_end = tl.minimum(prefix + last_q + 1, seq_len)
    bt_row = bt_ptr + b.to(tl.int64) * s_btb
    for t0 in range(0, kv_end, TILE):
        toks = t0 + tl.arange(0, TILE)
        blk = toks // BLOCK_SIZE
        t_ok = (toks < kv_end) & (blk < max_blocks)
        off = toks % BLOCK_SIZE
        phys = tl.load(bt_row + blk * s_btn, mask=t_ok, other=0).to(tl.int64)
        kv_mask = t_ok[:, None] & d_ok[None, :]
        k = tl.load(
            k_ptr + phys[:, None] * s_kn + off[:, None] * s_kt + kvh * s_kh + offs_d[None, :] * s_kd,
            mask=kv_mask, other=0.0,
        )
        v = tl.load(
            v_ptr + phys[:, None] * s_vn + off[:, None] * s_vt + kvh * s_vh + offs_d[None, :] * s_vd,
            mask=kv_mask, other=0.0,
        )
        s = _dot(q, tl.trans(k), IEEE, UPCAST)
        visible = t_ok[None, :] & (toks[None, :] <= q_pos[:, None]) & row_ok[:, None]
        s = tl.where(visible, s * scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        pv = _dot(p.to(v.dtype), v, IEEE, UPCAST)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    o = acc / l_safe[:, None]
    tl.store(
        out_ptr + tok_rows[:, None] * s_ot + heads[:, None] * s_oh + offs_d[None, :] * s_od,
        o.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :],
    )


def _prefill_config(d_pad: int, kv_dtype: torch.dtype) -> tuple[int, int, int, int]:
    """Prefill (TILE, num_warps, query rows per program, stages), from H200 sweeps."""
    if kv_dtype == torch.float32:
        return (32, 4, 64, 2) if d_pad <= 128 else (16, 4, 32, 2) if d_pad <= 256 else (16, 8, 32, 2)
    if d_pad <= 128:
        return 32, 8, 128, 3
    if d_pad <= 256:
        return 32, 4, 64, 2
    return 32, 8, 64, 2


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_table: torch.Tensor, seq_lens: torch.Tensor,
                            query_start_loc: torch.Tensor, scale: float, *,
                            max_query_len: int | None = None,
                            out: torch.Tensor | None = None,
                            launch: dict[str, int] | None = None) -> torch.Tensor:
    """A chunk of new query tokens per sequence, causal over (cached prefix + the chunk).

    ``q`` ``[num_tokens, num_q_heads, head_size]`` holds the sequences' chunks back to
    back; sequence ``b`` owns rows ``query_start_loc[b]:query_start_loc[b+1]`` (int32
    ``[batch+1]``).  Its ``q_len`` new tokens are the last ``q_len`` of its ``seq_lens[b]``
    context and must already be written into the paged cache; query ``i`` sees keys at
    positions ``<= seq_lens[b] - q_len + i``.  Returns ``out`` shaped like ``q``.
    ``launch`` overrides ``tile``, ``num_warps``, ``num_stages`` and ``rows`` (query rows
    per program, a power of two).
    """
    batch, block_size, num_kv_heads, head_size, num_q_heads = _check_cache(
        q, k_cache, v_cache, block_table, seq_lens, 3)
    require_dtype(query_start_loc, "query_start_loc", (torch.int32,))
    require_shape(query_start_loc, "query_start_loc", (batch + 1,))
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max().item()) if batch else 0
    if out is None:
        out = torch.empty_like(q)
    if batch == 0 or max_query_len == 0:
        return out
    G = num_q_heads // num_kv_heads
    d_pad = max(16, next_pow2(head_size))
    tile, warps, m_pad, stages = _prefill_config(d_pad, k_cache.dtype)
    if launch:
        tile = int(launch.get("tile", tile))
        warps = int(launch.get("num_warps", warps))
        stages = int(launch.get("num_stages", stages))
        m_pad = int(launch.get("rows", m_pad))
    m_pad = max(m_pad, next_pow2(G))
    block_q = m_pad // G
    grid = (triton.cdiv(max_query_len, block_q), batch, num_kv_heads)
    _prefill_kernel[grid](
        q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out,
        float(scale) * _LOG2E,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_table.stride(), *out.stride(),
        block_table.shape[1],
        G=G, BLOCK_Q=block_q, M_PAD=m_pad, HEAD=head_size, D_PAD=d_pad,
        BLOCK_SIZE=block_size, TILE=tile, IEEE=k_cache.dtype == torch.float32,
        UPCAST=_INTERPRET and k_cache.dtype == torch.bfloat16,
        num_warps=warps, num_stages=stages,
    )
    return out


# ----------------------------------------------------------------------------- MLA decode
@triton.jit
def _mla_decode_kernel(
    q_ptr, c_ptr, bt_ptr, sl_ptr, out_ptr, po_ptr, pml_ptr, cs_ptr,
    scale_log2,
    s_qb, s_qh, s_qd,
    s_cn, s_ct, s_cd,
    s_btb, s_btn,
    s_ob, s_oh, s_od,
    s_pb, s_ph, s_ps,
    num_heads, tokens_per_split, max_blocks,
    LORA: tl.constexpr, L_PAD: tl.constexpr, ROPE: tl.constexpr, R_PAD: tl.constexpr,
    M: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, SPLIT: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, FP8: tl.constexpr,
):
    b = tl.program_id(0)
    hb = tl.program_id(1)
    split = tl.program_id(2)
    if FP8:
        c_scale = tl.load(cs_ptr).to(tl.float32)
        scale_log2 = scale_log2 * c_scale

    seq_len = tl.load(sl_ptr + b)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)

    heads = hb * M + tl.arange(0, M)
    h_ok = heads < num_heads
    offs_l = tl.arange(0, L_PAD)
    l_ok = offs_l < LORA
    offs_r = tl.arange(0, R_PAD)
    r_ok = offs_r < ROPE
    q_row = q_ptr + b * s_qb + heads[:, None] * s_qh
    q_n = tl.load(q_row + offs_l[None, :] * s_qd, mask=h_ok[:, None] & l_ok[None, :], other=0.0)
    q_r = tl.load(q_row + (LORA + offs_r[None, :]) * s_qd, mask=h_ok[:, None] & r_ok[None, :], other=0.0)
    if not FP8:
        q_n = q_n.to(c_ptr.dtype.element_ty)
        q_r = q_r.to(c_ptr.dtype.element_ty)

    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc = tl.zeros([M, L_PAD], tl.float32)
    bt_row = bt_ptr + b.to(tl.int64) * s_btb
    for t0 in range(start, end, TILE):
        toks = t0 + tl.arange(0, TILE)
        blk = toks // BLOCK_SIZE
        t_ok = (toks < end) & (blk < max_blocks)
        phys = tl.load(bt_row + blk * s_btn, mask=t_ok, other=0).to(tl.int64)
        row = c_ptr + phys[:, None] * s_cn + (toks % BLOCK_SIZE)[:, None] * s_ct
        c_n = tl.load(row + offs_l[None, :] * s_cd, mask=t_ok[:, None] & l_ok[None, :], other=0.0)
        c_r = tl.load(row + (LORA + offs_r[None, :]) * s_cd, mask=t_ok[:, None] & r_ok[None, :], other=0.0)
        if FP8:  # exact in the query's 16-bit dtype; the scale goes on scores and output
            c_n = c_n.to(q_ptr.dtype.element_ty)
            c_r = c_r.to(q_ptr.dtype.element_ty)
        s = _dot(q_n, tl.trans(c_n), IEEE, UPCAST) + _dot(q_r, tl.trans(c_r), IEEE, UPCAST)
        s = tl.where(t_ok[None, :], s * scale_log2, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(c_n.dtype), c_n, IEEE, UPCAST)
        m_i = m_new

    if FP8:
        acc = acc * c_scale
    if SPLIT:
        base = b * s_pb + heads * s_ph + split * s_ps
        tl.store(po_ptr + base[:, None] * L_PAD + offs_l[None, :], acc, mask=h_ok[:, None])
        tl.store(pml_ptr + base * 2, m_i, mask=h_ok)
        tl.store(pml_ptr + base * 2 + 1, l_i, mask=h_ok)
    else:
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        o = acc / l_safe[:, None]
        tl.store(out_ptr + b * s_ob + heads[:, None] * s_oh + offs_l[None, :] * s_od,
                 o.to(out_ptr.dtype.element_ty), mask=h_ok[:, None] & l_ok[None, :])


def mla_decode_attention(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                         seq_lens: torch.Tensor, scale: float, kv_lora_rank: int, *,
                         kv_scale: torch.Tensor | float | None = None,
                         max_seq_len: int | None = None, num_splits: int | None = None,
                         out: torch.Tensor | None = None,
                         launch: dict[str, int] | None = None) -> torch.Tensor:
    """Multi-head latent attention (DeepSeek V2/V3 MLA), one decode token per sequence.

    The cache holds one latent vector per token, ``kv_lora_rank + qk_rope_head_dim`` wide
    (``[num_blocks, block_size, D]``, or ``[num_blocks, block_size, 1, D]`` as vLLM keeps
    it: one KV "head"), shared by every query head: the latent's first ``kv_lora_rank``
    entries serve as the value, the whole vector as the key.  ``q`` ``[batch, H, D]`` is
    the absorbed query (``q_nope @ W_UK`` next to ``q_pe``).  Returns ``[batch, H,
    kv_lora_rank]``.  An fp8 cache is dequantised with the per-tensor ``kv_scale`` to q's
    dtype.  Each program serves 16 query heads, so the latent is read once per 16 heads.
    """
    if kv_cache.dim() == 4:
        require(kv_cache.shape[2] == 1, "kv_cache.shape[2]", kv_cache.shape[2], "1 (MLA keeps one latent head)")
        kv_cache = kv_cache[:, :, 0]
    require(kv_cache.dim() == 3, "kv_cache.dim", kv_cache.dim(), "3: [num_blocks, block_size, D] (or 4 with 1 head)")
    require_dtype(kv_cache, "kv_cache", STORAGE_DTYPES + FP8_DTYPES)
    require_dtype(q, "q", STORAGE_DTYPES)
    num_blocks, block_size, width = kv_cache.shape
    require(q.dim() == 3 and q.shape[2] == width, "q.shape", list(q.shape), f"[batch, H, {width}]")
    require(1 <= kv_lora_rank <= width and kv_lora_rank <= 1024, "kv_lora_rank", kv_lora_rank,
            f"1..min({width}, 1024)")
    rope = width - kv_lora_rank
    require(rope <= 256, "qk_rope_head_dim", rope, "<= 256")
    require(block_table.dim() == 2, "block_table.dim", block_table.dim(), "2: [batch, max_blocks]")
    require_dtype(block_table, "block_table", (torch.int32,))
    require_dtype(seq_lens, "seq_lens", (torch.int32,))
    batch, heads = q.shape[0], q.shape[1]
    require(block_table.shape[0] == batch, "block_table.shape[0]", block_table.shape[0], str(batch))
    require_shape(seq_lens, "seq_lens", (batch,))
    require_same_device({"q": q, "kv_cache": kv_cache, "block_table": block_table, "seq_lens": seq_lens})
    fp8 = kv_cache.dtype in FP8_DTYPES
    compute = q.dtype if fp8 else kv_cache.dtype
    cs = _scale_tensor(kv_scale, q.device) if fp8 else seq_lens
    if out is None:
        out = torch.empty((batch, heads, kv_lora_rank), dtype=q.dtype, device=q.device)
    require_shape(out, "out", (batch, heads, kv_lora_rank))
    if batch == 0:
        return out
    l_pad = max(16, next_pow2(kv_lora_rank))
    r_pad = max(16, next_pow2(rope))
    m = 16
    hblocks = triton.cdiv(heads, m)
    if max_seq_len is None:
        max_seq_len = block_table.shape[1] * block_size
    tile = 16 if l_pad >= 512 or compute == torch.float32 else 32
    warps = 4 if l_pad <= 256 else 8
    stages = 2
    if launch:
        tile = int(launch.get("tile", tile))
        warps = int(launch.get("num_warps", warps))
        stages = int(launch.get("num_stages", stages))
    if num_splits is None:
        want = max(1, math.ceil(_PROGRAMS_PER_SM * sm_count(q.device) / max(1, batch * hblocks)))
        num_splits = min(want, max(1, math.ceil(max(1, max_seq_len) / (4 * tile))), 256)
    per_split = math.ceil(math.ceil(max(1, max_seq_len) / max(1, int(num_splits))) / tile) * tile
    splits = max(1, math.ceil(max(1, max_seq_len) / per_split))
    split = splits > 1
    if split:
        po = torch.empty((batch, heads, splits, l_pad), device=q.device, dtype=torch.float32)
        pml = torch.empty((batch, heads, splits, 2), device=q.device, dtype=torch.float32)
    else:
        po = pml = out
    ps = (heads * splits, splits, 1)
    _mla_decode_kernel[(batch, hblocks, splits)](
        q, kv_cache, block_table, seq_lens, out, po, pml, cs,
        float(scale) * _LOG2E,
        *q.stride(), *kv_cache.stride(), *block_table.stride(), *out.stride(), *ps,
        heads, per_split, block_table.shape[1],
        LORA=kv_lora_rank, L_PAD=l_pad, ROPE=rope, R_PAD=r_pad, M=m, BLOCK_SIZE=block_size,
        TILE=tile, SPLIT=split, IEEE=compute == torch.float32,
        UPCAST=_INTERPRET and compute == torch.bfloat16, FP8=fp8,
        num_warps=warps, num_stages=stages,
    )
    if split:
        _merge_kernel[(batch, heads)](
            po, pml, out, *ps, *out.stride(), splits,
            HEAD=kv_lora_rank, D_PAD=l_pad, S_PAD=max(2, next_pow2(splits)), num_warps=4,
        )
    return out
