"""Triton kernels for the shapes a resolved config implies, each with a PyTorch reference.

Importing ``enginecfg.kernels`` imports neither torch nor triton: the names below resolve
lazily, on first attribute access, from the submodule that defines them.  The kernels are
plain functions on torch tensors; they know nothing of stages, pipeline or store.

Submodules and their public API
-------------------------------
``paged_attention`` -- KV cache ``[num_blocks, block_size, num_kv_heads, head_size]``
(K and V alike; bf16/fp16/fp32, float32 accumulation; any block size, e.g. 528 or 2096;
head size up to 512, non-powers of two padded and masked; GQA ``Hq = G * Hkv``)::

    paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens, scale,
                           *, max_seq_len=None, num_splits=None, out=None, launch=None) -> out
        q [batch, Hq, D]; block_table int32 [batch, max_blocks]; seq_lens int32 [batch]
    paged_prefill_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc,
                            scale, *, max_query_len=None, out=None, launch=None) -> out
        q [num_tokens, Hq, D]: the new chunk of each sequence, back to back;
        query_start_loc int32 [batch+1]; seq_lens = cached prefix + chunk (chunk in cache)
    decode_launch_config(batch, num_kv_heads, max_seq_len, head_size, kv_dtype, device,
                         num_splits=None, launch=None) -> dict (tile, warps, stages, splits)
        ``launch`` ({"tile", "num_warps", "num_stages"}, prefill also "rows") overrides the
        launch defaults, which were picked by sweeps on an H200 (bench/NOTES.md)

    An fp8 cache (float8_e4m3fn / float8_e5m2) is read in fp8 with per-tensor
    ``k_scale=`` / ``v_scale=`` (one-element float32 tensors), as vLLM keeps them.
    mla_decode_attention(q, kv_cache, block_table, seq_lens, scale, kv_lora_rank,
                         *, kv_scale=None, max_seq_len=None, num_splits=None, out=None,
                         launch=None) -> out [batch, H, kv_lora_rank]
        DeepSeek MLA: kv_cache [num_blocks, block_size, (1,) kv_lora_rank + rope], one
        latent per token shared by all heads; q [batch, H, kv_lora_rank + rope] (absorbed)

``mamba_ssm`` -- Mamba2 decode step, states updated in place::

    selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=True, state_indices=None, *, out=None,
                           block_p=None, num_warps=4) -> y
        state [slots, nheads, head_dim, dstate]; x, z [batch, nheads, head_dim];
        dt [batch, nheads]; A, D, dt_bias [nheads]; B, C [batch, ngroups, dstate]
    causal_conv1d_update(conv_state, x, weight, bias=None, activation="silu",
                         state_indices=None, *, out=None, block_d=512, num_warps=4) -> out
        conv_state [slots, K-1, conv_dim] (any strides: pass a [slots, conv_dim, K-1]
        cache as .transpose(1, 2)); x [batch, conv_dim]; weight [conv_dim, K]

``gated_delta`` -- Qwen3-Next / Qwen3.5 gated delta rule decode step, in place::

    gated_delta_step(state, q, k, v, g, beta, scale=None, use_qk_l2norm=True,
                     state_indices=None, *, eps=1e-6, out=None, block_v=None,
                     num_warps=8) -> o
        state [slots, nv, dv, dk]; q, k [batch, nk, dk]; v [batch, nv, dv];
        g (log decay), beta [batch, nv]
    gated_delta_step_packed(state, mixed_qkv, a, b, A_log, dt_bias, scale=None,
                            use_qk_l2norm=True, state_indices=None, *, eps=1e-6, out=None,
                            launch=None) -> o
        what a Qwen3.5 layer holds at decode: mixed_qkv [batch, 2*nk*dk + nv*dv] (q, k, v
        heads), a, b [batch, nv], A_log, dt_bias [nv]; g and beta are formed in the kernel

``page_check`` -- hybrid page isolation on one byte buffer::

    page_check(page_size_bytes, attn_block_bytes, mamba_state_bytes, *, num_pages=3,
               kv_dtype="bfloat16", mamba_state_dtypes=None, device="cuda", seed=0,
               kernel_page_size_bytes=None) -> PageCheckResult

``_reference`` (re-exported by each kernel module) -- float64 references of the same
signatures plus ``compute_dtype``: ``reference_paged_decode_attention``,
``reference_paged_prefill_attention``, ``reference_selective_state_update``,
``reference_causal_conv1d_update``, ``reference_gated_delta_step``.

``checks`` -- random inputs of given shapes, kernel vs reference, ``CheckResult(name,
passed, max_error, tolerance, seconds, shapes, errors)``::

    check_paged_attention(head_size, num_kv_heads, num_q_heads, block_size, kv_dtype,
                          seq_lens, device="cuda", seed=0, *, scale=None, num_splits=None,
                          perturb=None)
    check_paged_prefill(head_size, num_kv_heads, num_q_heads, block_size, kv_dtype,
                        seq_lens, query_lens, device="cuda", seed=0, *, scale=None, perturb=None)
    check_selective_state_update(batch, nheads, head_dim, dstate, ngroups, state_dtype,
                                 io_dtype="bfloat16", device="cuda", seed=0, *, use_z=True,
                                 use_state_indices=True, perturb=None)
    check_causal_conv1d_update(batch, conv_dim, kernel_width, state_dtype,
                               io_dtype="bfloat16", device="cuda", seed=0, *,
                               transposed_state=False, perturb=None)
    check_gated_delta(batch, num_k_heads, num_v_heads, head_k_dim, head_v_dim, state_dtype,
                      io_dtype="bfloat16", device="cuda", seed=0, *, use_qk_l2norm=True,
                      perturb=None)
    check_gated_delta_packed(batch, num_k_heads, num_v_heads, head_k_dim, head_v_dim,
                             state_dtype, io_dtype="bfloat16", device="cuda", seed=0, ...)
    check_paged_attention_fp8(head_size, num_kv_heads, num_q_heads, block_size, kv_dtype,
                              seq_lens, device="cuda", seed=0, *, q_dtype="bfloat16", ...)
    check_mla_attention(kv_lora_rank, qk_rope_head_dim, num_heads, block_size, kv_dtype,
                        seq_lens, device="cuda", seed=0, *, q_dtype=None, ...)
    check_page_layout(page_size_bytes, attn_block_bytes, mamba_state_bytes, device="cuda",
                      seed=0, **page_check_kwargs)
    state_precision(kernel, state_dtype, steps=300, device="cuda", seed=0, *, shape=None,
                    io_dtype="float32") -> StatePrecisionResult (error after every step)
    TOLERANCE, tolerance_for(dtype, reference)
    CHECKS: KernelCheck -> the function above
    run_check(check: KernelCheck, **kwargs) -> CheckResult | StatePrecisionResult

``kinds`` (no torch) -- ``KernelCheck``, an enum naming each check above and the kernel it
proves (``.kernel``): what a caller plans with before torch is imported::

    run_check(KernelCheck.PAGED_ATTENTION, device="cuda", head_size=128, ...) -> CheckResult

On a machine without a GPU the kernels run in Triton's interpreter when the environment
variable ``TRITON_INTERPRET=1`` is set before triton is first imported (the tests do so).
"""

from __future__ import annotations

if __name__ == "kernels":  # imported by its bare name from a checkout root on sys.path
    from enginecfg._layout import hand_over_bare_import

    hand_over_bare_import(__name__, __file__)

import importlib
from typing import Any

__all__ = [
    "paged_decode_attention",
    "paged_prefill_attention",
    "mla_decode_attention",
    "decode_launch_config",
    "selective_state_update",
    "causal_conv1d_update",
    "gated_delta_step",
    "gated_delta_step_packed",
    "page_check",
    "PageCheckResult",
    "PageViolation",
    "reference_paged_decode_attention",
    "reference_paged_prefill_attention",
    "reference_selective_state_update",
    "reference_causal_conv1d_update",
    "reference_gated_delta_step",
    "reference_gated_delta_step_packed",
    "reference_paged_decode_attention_fp8",
    "reference_mla_decode_attention",
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
    "KernelCheck",
    "CHECKS",
    "run_check",
]

#: submodules, importable as attributes (``enginecfg.kernels.checks``) once touched.
SUBMODULES = ("paged_attention", "mamba_ssm", "gated_delta", "page_check", "checks", "kinds")

_HOME = {
    "paged_decode_attention": "paged_attention",
    "paged_prefill_attention": "paged_attention",
    "decode_launch_config": "paged_attention",
    "mla_decode_attention": "paged_attention",
    "gated_delta_step_packed": "gated_delta",
    "reference_gated_delta_step_packed": "_reference",
    "reference_paged_decode_attention_fp8": "_reference",
    "reference_mla_decode_attention": "_reference",
    "check_gated_delta_packed": "checks",
    "check_paged_attention_fp8": "checks",
    "check_mla_attention": "checks",
    "selective_state_update": "mamba_ssm",
    "causal_conv1d_update": "mamba_ssm",
    "gated_delta_step": "gated_delta",
    "page_check": "page_check",
    "PageCheckResult": "page_check",
    "PageViolation": "page_check",
    "reference_paged_decode_attention": "_reference",
    "reference_paged_prefill_attention": "_reference",
    "reference_selective_state_update": "_reference",
    "reference_causal_conv1d_update": "_reference",
    "reference_gated_delta_step": "_reference",
    "CheckResult": "checks",
    "StatePrecisionResult": "checks",
    "TOLERANCE": "checks",
    "tolerance_for": "checks",
    "check_paged_attention": "checks",
    "check_paged_prefill": "checks",
    "check_selective_state_update": "checks",
    "check_causal_conv1d_update": "checks",
    "check_gated_delta": "checks",
    "check_page_layout": "checks",
    "state_precision": "checks",
    "KernelCheck": "kinds",
    "CHECKS": "checks",
    "run_check": "checks",
}

def __getattr__(name: str) -> Any:
    """Import the defining submodule on first use, so this package stays torch-free."""
    if name in SUBMODULES or name == "_reference":
        return importlib.import_module(f"{__name__}.{name}")
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value

def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(SUBMODULES))
