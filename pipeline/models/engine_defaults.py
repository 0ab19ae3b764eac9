"""vLLM 0.19.0's engine defaults: what it fills in for the engine arguments a caller leaves unset.

Written once here and read by the ``engine-defaults`` stage (which sets them, with its
reasons) and by the KV-cache figures (which need them whether or not a stage ran):

- chunked prefill and prefix caching: vLLM turns chunked prefill on unless the model is
  encoder-decoder (or a pooling model that is encoder-only or pools MEAN, CLS or STEP), and
  prefix caching on only for plain decoder models.  Both follow from :func:`attn_type`, the
  kind of attention vLLM's model config reports.  Hybrid and attention-free generative
  models therefore start with prefix caching off, and a MEAN- or CLS-pooling (or
  bidirectional) model with both off;
- the block size, and the scheduler's token budget and request limit ``vllm serve`` starts
  with on an H200.
"""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline.hf import typed

__all__ = ["DEFAULT_BLOCK_SIZE", "DEFAULT_MAX_NUM_SEQS", "DEFAULT_MAX_NUM_BATCHED_TOKENS", "is_causal",
           "attn_type", "prefix_caching_supported", "chunked_prefill_supported", "chunked_prefill",
           "max_num_batched_tokens", "max_num_seqs", "CHUNKED_LOCAL_ATTENTION_WARNING",
           "HYBRID_MANAGER_NEEDED_ERROR", "HYBRID_MANAGER_NEEDED_ERROR_K10B", "hybrid_kv_cache_manager_must_be_off"]

#: tokens per KV-cache block when the caller sets none (hybrid models grow it later)
DEFAULT_BLOCK_SIZE = 16
#: ``vllm serve``'s default ``max_num_seqs`` on a GPU of 70 GiB or more
DEFAULT_MAX_NUM_SEQS = 1024
#: ... and its default ``max_num_batched_tokens``
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


def is_causal(hf_config: Any) -> bool:
    """Does the model attend causally?  ``hf_config.is_causal`` is compared with a literal,
    as vLLM compares it: any value but ``False`` (absent included) means causal."""
    return typed.attr(hf_config, "is_causal", typed.ANY, default=True) is not False


def attn_type(cfg: Any) -> str:
    """The attention kind vLLM's model config reports: ``decoder``, ``encoder_only``,
    ``encoder_decoder``, ``hybrid`` or ``attention_free``."""
    mc = cfg.model_config
    hf = mc.hf_config
    if cfg.pooler_config is not None:
        # the pooling type is compared with a literal too: any value
        if cfg.pooler_config.seq_pooling_type == "CLS" or not is_causal(hf):
            return "encoder_only"
        return "decoder"
    if mc.is_hybrid:
        return "hybrid"
    if mc.is_attention_free:
        return "attention_free"
    if typed.attr(hf, "is_encoder_decoder", typed.ANY, default=False) is True:
        return "encoder_decoder"
    return "decoder"


def _pooling_decoder_ok(cfg: Any) -> bool:
    pc = cfg.pooler_config
    return not (pc.seq_pooling_type in ("MEAN", "CLS") or pc.tok_pooling_type == "STEP")


def prefix_caching_supported(cfg: Any) -> bool:
    """vLLM's default for ``--enable-prefix-caching``."""
    kind = attn_type(cfg)
    if cfg.pooler_config is None:
        return kind == "decoder"
    return kind == "decoder" and _pooling_decoder_ok(cfg)


def chunked_prefill_supported(cfg: Any) -> bool:
    """vLLM's default for ``--enable-chunked-prefill``."""
    kind = attn_type(cfg)
    if cfg.pooler_config is None:
        return kind != "encoder_decoder"
    if kind == "encoder_only":
        return False
    if kind == "decoder":
        return _pooling_decoder_ok(cfg)
    return kind != "encoder_decoder"


def chunked_prefill(cfg: Any) -> bool:
    """Whether chunked prefill is on: as set, else vLLM's default."""
    on = cfg.scheduler_config.enable_chunked_prefill
    return chunked_prefill_supported(cfg) if on is None else bool(on)


def max_num_batched_tokens(cfg: Any) -> int:
    """The scheduler's token budget per step, as ``vllm serve`` defaults it on an H200.

    Without chunked prefill a whole prompt must fit, so the budget is at least
    max_model_len; it never exceeds ``max_num_seqs * max_model_len`` (the given
    ``max_num_seqs``, else its default of 1024).
    """
    sc, mc = cfg.scheduler_config, cfg.model_config
    if sc.max_num_batched_tokens is not None:
        return sc.max_num_batched_tokens
    value = DEFAULT_MAX_NUM_BATCHED_TOKENS
    if not chunked_prefill(cfg):
        value = max(mc.max_model_len, value)
    seqs = sc.max_num_seqs if sc.max_num_seqs is not None else DEFAULT_MAX_NUM_SEQS
    return min(seqs * mc.max_model_len, value)


def max_num_seqs(cfg: Any) -> int:
    """The most requests one scheduler step serves, as ``vllm serve`` defaults it on an H200:
    1024, and never more than the token budget."""
    sc = cfg.scheduler_config
    if sc.max_num_seqs is not None:
        return sc.max_num_seqs
    return min(DEFAULT_MAX_NUM_SEQS, max_num_batched_tokens(cfg))


#: vLLM's warning when chunked local attention turns the hybrid KV cache manager off
CHUNKED_LOCAL_ATTENTION_WARNING = (
    "There is a latency regression when using chunked local attention with the hybrid KV cache "
    "manager. Disabling it, by default. To enable it, set the environment "
    "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1.")
#: ... and its refusal when the caller asked for the manager explicitly
HYBRID_MANAGER_NEEDED_ERROR = (
    "Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. "
    "Consider omitting the --no-disable-hybrid-kv-cache-manager flag to let vLLM decide automatically.")
#: ... the same refusal naming the flag as releases with rule K10b spell it (vLLM 0.33.0 on)
HYBRID_MANAGER_NEEDED_ERROR_K10B = HYBRID_MANAGER_NEEDED_ERROR.replace(
    "--no-disable-hybrid-kv-cache-manager", "--enable-hybrid-kv-cache-manager")


def hybrid_kv_cache_manager_must_be_off(text_config: Any, *, chunked_local_allowed: bool) -> bool:
    """Whether vLLM 0.19.0 on a GPU turns the hybrid KV cache manager off for this model,
    given the engine arguments enginecfg takes: only for chunked local attention (a text
    config with ``attention_chunk_size``) when ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``
    is 0 (*chunked_local_allowed* False; it is 1 by default).  (KV-cache events, a KV
    transfer connector and EAGLE drafts turn it off too; enginecfg takes none of them.)"""
    return typed.attr(text_config, "attention_chunk_size", typed.ANY) is not None and not chunked_local_allowed
