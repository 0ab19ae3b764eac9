"""Plain PyTorch references for every kernel, computed in float64 by default.

They spell out the math the Triton kernels must reproduce, with no tiling, no online
softmax and no in-kernel rounding, so a disagreement points at the kernel.  Each takes
``compute_dtype`` (float64 unless told) and works on any device; the ones that own a
recurrent state update that state in place (rounded to its dtype), like the kernels.
Only torch is imported here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "reference_paged_decode_attention",
    "reference_paged_prefill_attention",
    "reference_selective_state_update",
    "reference_causal_conv1d_update",
    "reference_gated_delta_step",
    "reference_gated_delta_step_packed",
    "unpack_gated_delta_inputs",
    "reference_paged_decode_attention_fp8",
    "reference_mla_decode_attention",
    "gather_paged_kv",
]


def gather_paged_kv(cache: torch.Tensor, block_table: torch.Tensor, b: int, length: int) -> torch.Tensor:
    """The first ``length`` tokens of sequence ``b`` as ``[length, num_kv_heads, head_size]``."""
    block_size = cache.shape[1]
    n_blocks = -(-length // block_size)
    blocks = block_table[b, :n_blocks].long()
    return cache[blocks].reshape(-1, cache.shape[2], cache.shape[3])[:length]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
            q_pos: torch.Tensor) -> torch.Tensor:
    """q ``[n, Hq, D]`` at positions ``q_pos``, k/v ``[T, Hkv, D]``; causal softmax attention."""
    hq, hkv = q.shape[1], k.shape[1]
    g = hq // hkv
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    scores = torch.einsum("nhd,thd->hnt", q, k) * scale
    t = torch.arange(k.shape[0], device=q.device)
    scores = scores.masked_fill(t[None, None, :] > q_pos[None, :, None], float("-inf"))
    if k.shape[0] == 0:
        return torch.zeros_like(q)
    p = torch.softmax(scores, dim=-1)
    return torch.einsum("hnt,thd->nhd", p, v)


def reference_paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens, scale,
                                     *, compute_dtype=torch.float64) -> torch.Tensor:
    """``out[b, h] = softmax(scale * q[b, h] . K_b^T) V_b`` over the ``seq_lens[b]`` cached
    tokens of sequence ``b``; query head ``h`` reads KV head ``h // (Hq / Hkv)``.
    Returns ``[batch, Hq, D]`` in ``compute_dtype``."""
    out = torch.zeros(q.shape, dtype=compute_dtype, device=q.device)
    lens = seq_lens.tolist()
    for b, length in enumerate(lens):
        if length == 0:
            continue
        k = gather_paged_kv(k_cache, block_table, b, length).to(compute_dtype)
        v = gather_paged_kv(v_cache, block_table, b, length).to(compute_dtype)
        qb = q[b : b + 1].to(compute_dtype)
        out[b] = _attend(qb, k, v, scale, torch.tensor([length - 1], device=q.device))[0]
    return out


def reference_paged_prefill_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc,
                                      scale, *, compute_dtype=torch.float64) -> torch.Tensor:
    """Chunked prefill: the ``q_len`` rows of sequence ``b`` are its last ``q_len`` context
    positions; row ``i`` attends to positions ``0 .. seq_len - q_len + i``.
    Returns ``[num_tokens, Hq, D]`` in ``compute_dtype``."""
    out = torch.zeros(q.shape, dtype=compute_dtype, device=q.device)
    qsl = query_start_loc.tolist()
    for b, length in enumerate(seq_lens.tolist()):
        s, e = qsl[b], qsl[b + 1]
        if e == s:
            continue
        k = gather_paged_kv(k_cache, block_table, b, length).to(compute_dtype)
        v = gather_paged_kv(v_cache, block_table, b, length).to(compute_dtype)
        pos = torch.arange(length - (e - s), length, device=q.device)
        out[s:e] = _attend(q[s:e].to(compute_dtype), k, v, scale, pos)
    return out


def _rows(state: torch.Tensor, batch: int, state_indices: torch.Tensor | None) -> torch.Tensor:
    if state_indices is None:
        return torch.arange(batch, device=state.device)
    return state_indices.long()


def _live(rows: torch.Tensor, state_indices: torch.Tensor | None) -> torch.Tensor | None:
    """Batch rows whose state index is not negative (None if there are none).  Without
    indices every row is live, decided without reading the device (no sync per step)."""
    if state_indices is None:
        return rows
    live = torch.nonzero(rows >= 0).flatten()
    return live if live.numel() else None


def reference_selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                                     dt_softplus=True, state_indices=None,
                                     *, compute_dtype=torch.float64) -> torch.Tensor:
    """One Mamba2 decode step, per sequence b, head h (group g = h // (nheads / ngroups)):

    ``dt' = softplus(dt[b,h] + dt_bias[h])``; ``dA = exp(dt' * A[h])``;
    ``state[b,h] = dA * state[b,h] + dt' * x[b,h][:, None] * B[b,g][None, :]``;
    ``y[b,h] = state[b,h] @ C[b,g] + D[h] * x[b,h]``; then ``y *= silu(z[b,h])`` if z.
    ``state`` is updated in place (rows ``state_indices[b]`` if given; a negative index
    skips that sequence and leaves y zero).  Returns y in ``compute_dtype``.
    """
    cd = compute_dtype
    batch, nheads, _ = x.shape
    ngroups = B.shape[1]
    rows = _rows(state, batch, state_indices)
    y = torch.zeros(x.shape, dtype=cd, device=x.device)
    bsel = _live(rows, state_indices)
    if bsel is None:
        return y
    srows = rows[bsel]
    s = state[srows].to(cd)
    xx = x[bsel].to(cd)
    d = dt[bsel].to(cd)
    if dt_bias is not None:
        d = d + dt_bias.to(cd)[None, :]
    if dt_softplus:
        d = F.softplus(d)
    dA = torch.exp(d * A.to(cd)[None, :])
    rep = nheads // ngroups
    Bh = B[bsel].to(cd).repeat_interleave(rep, dim=1)
    Ch = C[bsel].to(cd).repeat_interleave(rep, dim=1)
    s = s * dA[:, :, None, None] + (d[:, :, None] * xx)[..., None] * Bh[:, :, None, :]
    state[srows] = s.to(state.dtype)
    yy = torch.einsum("bhpn,bhn->bhp", s, Ch)
    if D is not None:
        yy = yy + D.to(cd)[None, :, None] * xx
    if z is not None:
        zz = z[bsel].to(cd)
        yy = yy * zz * torch.sigmoid(zz)
    y[bsel] = yy
    return y


def reference_causal_conv1d_update(conv_state, x, weight, bias=None, activation="silu",
                                   state_indices=None, *, compute_dtype=torch.float64) -> torch.Tensor:
    """One step of a depthwise causal conv of width K, per channel c:

    ``window = [conv_state[b, 0..K-2, c], x[b, c]]``; ``out = sum_k weight[c, k] * window[k]
    + bias[c]``, then silu if ``activation == "silu"``; ``conv_state[b]`` becomes
    ``window[1:]`` (in place; layout ``[batch, K-1, conv_dim]``).  Returns out in
    ``compute_dtype``.
    """
    cd = compute_dtype
    batch = x.shape[0]
    rows = _rows(conv_state, batch, state_indices)
    out = torch.zeros(x.shape, dtype=cd, device=x.device)
    live = _live(rows, state_indices)
    if live is None:
        return out
    srows = rows[live]
    window = torch.cat([conv_state[srows].to(cd), x[live].to(cd)[:, None, :]], dim=1)
    o = torch.einsum("bkc,ck->bc", window, weight.to(cd))
    if bias is not None:
        o = o + bias.to(cd)[None, :]
    if activation in ("silu", "swish"):
        o = o * torch.sigmoid(o)
    conv_state[srows] = window[:, 1:].to(conv_state.dtype)
    out[live] = o
    return out


def _l2norm(t: torch.Tensor, eps: float) -> torch.Tensor:
    return t * torch.rsqrt((t * t).sum(-1, keepdim=True) + eps)


def reference_gated_delta_step(state, q, k, v, g, beta, scale=None, use_qk_l2norm=True,
                               state_indices=None, *, eps=1e-6,
                               compute_dtype=torch.float64) -> torch.Tensor:
    """One gated delta rule step per sequence b and value head h (key head
    ``h // (nv / nk)``), with ``S = state[b, h]`` of shape ``[dv, dk]``:

    ``q, k <- q / sqrt(|q|^2 + eps), k / sqrt(|k|^2 + eps)`` if ``use_qk_l2norm``;
    ``S <- exp(g[b,h]) * S``; ``u = v[b,h] - S k``; ``S <- S + beta[b,h] * u k^T``;
    ``o[b,h] = scale * S q`` (scale defaults to ``dk ** -0.5``).  State updated in place.
    Returns o ``[batch, nv, dv]`` in ``compute_dtype``.
    """
    cd = compute_dtype
    batch, nk, dk = q.shape
    nv = v.shape[1]
    if scale is None:
        scale = dk ** -0.5
    rows = _rows(state, batch, state_indices)
    out = torch.zeros(v.shape, dtype=cd, device=v.device)
    live = _live(rows, state_indices)
    if live is None:
        return out
    srows = rows[live]
    qq, kk = q[live].to(cd), k[live].to(cd)
    if use_qk_l2norm:
        qq, kk = _l2norm(qq, eps), _l2norm(kk, eps)
    rep = nv // nk
    qq = qq.repeat_interleave(rep, dim=1)
    kk = kk.repeat_interleave(rep, dim=1)
    S = state[srows].to(cd) * torch.exp(g[live].to(cd))[:, :, None, None]
    u = v[live].to(cd) - torch.einsum("bhvk,bhk->bhv", S, kk)
    S = S + beta[live].to(cd)[:, :, None, None] * u[..., None] * kk[:, :, None, :]
    state[srows] = S.to(state.dtype)
    out[live] = scale * torch.einsum("bhvk,bhk->bhv", S, qq)
    return out


def unpack_gated_delta_inputs(mixed_qkv, a, b, A_log, dt_bias, num_k_heads: int, head_k_dim: int,
                              head_v_dim: int, *, compute_dtype=torch.float64) -> dict:
    """Split a Qwen3.5 layer's packed decode inputs into the q, k, v, g, beta of
    :func:`reference_gated_delta_step`: ``mixed_qkv`` ``[batch, 2*nk*dk + nv*dv]`` holds q
    heads, k heads, v heads; ``g = -exp(A_log) * softplus(a + dt_bias)``, ``beta = sigmoid(b)``."""
    cd = compute_dtype
    batch = mixed_qkv.shape[0]
    nk, dk, dv = num_k_heads, head_k_dim, head_v_dim
    x = mixed_qkv.to(cd)
    q = x[:, : nk * dk].reshape(batch, nk, dk)
    k = x[:, nk * dk : 2 * nk * dk].reshape(batch, nk, dk)
    v = x[:, 2 * nk * dk :].reshape(batch, -1, dv)
    g = -torch.exp(A_log.to(cd))[None, :] * F.softplus(a.to(cd) + dt_bias.to(cd)[None, :])
    beta = torch.sigmoid(b.to(cd))
    return dict(q=q, k=k, v=v, g=g, beta=beta)


def reference_gated_delta_step_packed(state, mixed_qkv, a, b, A_log, dt_bias, scale=None,
                                      use_qk_l2norm=True, state_indices=None, *, eps=1e-6,
                                      compute_dtype=torch.float64) -> torch.Tensor:
    """:func:`reference_gated_delta_step` on packed inputs (see
    :func:`unpack_gated_delta_inputs`); the key head count follows from the state's shape."""
    nv, dv, dk = state.shape[1:]
    nk = (mixed_qkv.shape[1] - nv * dv) // (2 * dk)
    parts = unpack_gated_delta_inputs(mixed_qkv, a, b, A_log, dt_bias, nk, dk, dv,
                                      compute_dtype=compute_dtype)
    return reference_gated_delta_step(state, **parts, scale=scale, use_qk_l2norm=use_qk_l2norm,
                                      state_indices=state_indices, eps=eps, compute_dtype=compute_dtype)


def reference_paged_decode_attention_fp8(q, k_cache, v_cache, block_table, seq_lens, scale,
                                         k_scale=1.0, v_scale=1.0, *,
                                         compute_dtype=torch.float64) -> torch.Tensor:
    """Decode over an fp8 KV cache: the stored fp8 values times the per-tensor scales
    (``k_scale``, ``v_scale``: floats or one-element tensors), exactly, in ``compute_dtype``."""
    ks = float(k_scale) if not torch.is_tensor(k_scale) else float(k_scale.reshape(-1)[0])
    vs = float(v_scale) if not torch.is_tensor(v_scale) else float(v_scale.reshape(-1)[0])
    k = k_cache.to(compute_dtype) * ks
    v = v_cache.to(compute_dtype) * vs
    return reference_paged_decode_attention(q, k, v, block_table, seq_lens, scale,
                                            compute_dtype=compute_dtype)


def reference_mla_decode_attention(q, kv_cache, block_table, seq_lens, scale, kv_lora_rank,
                                   kv_scale=1.0, *, compute_dtype=torch.float64) -> torch.Tensor:
    """MLA decode over the latent cache ``[num_blocks, block_size, kv_lora_rank + rope]``
    (one latent "head" per token, shared by every query head): for query head h of
    sequence b, ``out = softmax(scale * q[b, h] . C^T) C[:, :kv_lora_rank]`` with ``C`` the
    sequence's cached latents (times ``kv_scale``).  q ``[batch, H, kv_lora_rank + rope]``
    (absorbed).  Returns ``[batch, H, kv_lora_rank]`` in ``compute_dtype``."""
    ks = float(kv_scale) if not torch.is_tensor(kv_scale) else float(kv_scale.reshape(-1)[0])
    cache = kv_cache.to(compute_dtype) * ks
    if cache.dim() == 4:  # [num_blocks, block_size, 1, D]
        cache = cache[:, :, 0]
    batch, heads, _ = q.shape
    out = torch.zeros((batch, heads, kv_lora_rank), dtype=compute_dtype, device=q.device)
    bs = cache.shape[1]
    for bi, length in enumerate(seq_lens.tolist()):
        if length == 0:
            continue
        n_blocks = -(-length // bs)
        c = cache[block_table[bi, :n_blocks].long()].reshape(-1, cache.shape[-1])[:length]
        s = (q[bi].to(compute_dtype) @ c.T) * scale
        out[bi] = torch.softmax(s, dim=-1) @ c[:, :kv_lora_rank]
    return out
