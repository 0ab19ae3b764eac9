"""What a resolved config costs in KV cache: the figures vLLM prints only after loading.

Puts :mod:`.kv_specs` (what each layer keeps), :mod:`.kv_cache` (vLLM's grouping and block
arithmetic) and :mod:`.weights` (what the weights leave free) together into one JSON-ready
record: the memory budget and its basis, each KV-cache group with its page size, tokens
per block and bytes per token of context, the Mamba padding, the layer padding and the
block rounding in bytes and percent, the KV capacity in tokens, the concurrency at several
context lengths, the largest max_model_len that fits, and the smallest footprint one
request pins.  The ``impact`` stage records it; ``enginecfg explain`` and ``plan`` show it.
"""

from __future__ import annotations

from typing import Any, Sequence

from enginecfg.pipeline.hf import ContentMemo, memoised
from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import kv_specs
from enginecfg.pipeline.models.engine_defaults import max_num_batched_tokens
from enginecfg.pipeline.models.weights import estimate_weights

__all__ = ["H200_GIB", "DEFAULT_UTILIZATION", "DEFAULT_CONTEXTS", "FIGURES", "memory_budget", "impact"]

#: the figures of configs seen before in this process: the arithmetic is pure, and an engine
#: resolving the same model under the same arguments again pays it once
FIGURES = ContentMemo(maxsize=256)

#: the H200's memory, the default GPU
H200_GIB = 141.0
DEFAULT_UTILIZATION = 0.9
DEFAULT_CONTEXTS = (1024, 8192, 32768)


def memory_budget(cfg, *, gpu_memory_gib: float = H200_GIB,
                  gpu_memory_utilization: float = DEFAULT_UTILIZATION,
                  kv_cache_memory: int | None = None, specs: dict | None = None) -> dict[str, Any]:
    """The KV-cache bytes of one GPU, and how they were arrived at."""
    gpu_bytes = int(gpu_memory_gib * 2**30)
    out: dict[str, Any] = {"gpu_memory_bytes": gpu_bytes,
                           "gpu_memory_utilization": gpu_memory_utilization}
    if kv_cache_memory is not None:
        out.update(kv_cache_memory=int(kv_cache_memory), source="--kv-cache-memory", weights=None)
        return out
    weights = estimate_weights(cfg, specs)
    usable = int(gpu_bytes * gpu_memory_utilization)
    out.update(kv_cache_memory=max(usable - weights.bytes_per_gpu, 0), source="estimate",
               weights=weights.to_dict())
    return out


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def _limits(cfg, max_model_len: int | None = None) -> kc.Limits:
    return kc.Limits(max_model_len=max_model_len or cfg.model_config.max_model_len,
                     max_num_batched_tokens=max_num_batched_tokens(cfg),
                     mamba_cache_mode=cfg.cache_config.mamba_cache_mode)


def _group_row(g: kc.KVCacheGroup, group_size: int, limits: kc.Limits) -> dict[str, Any]:
    s = g.spec
    uniform = isinstance(s, kc.UniformTypeSpecs)
    kind = "uniform" if uniform else {
        kc.MLAAttentionSpec: "mla", kc.FullAttentionSpec: "full_attention",
        kc.SlidingWindowSpec: "sliding_window", kc.MambaSpec: "mamba"}[type(s)]
    row: dict[str, Any] = {
        "kind": kind, "num_layers": len(g.layer_names), "block_size": s.block_size,
        "page_size_bytes": s.page_size_bytes,
    }
    slots = len(g.layer_names) if uniform else group_size
    if kind == "mamba":
        row.update(mamba_type=s.mamba_type, state_bytes=s.real_page_size_bytes,
                   bytes_per_token=None,
                   bytes_per_request=s.max_memory_usage_bytes(limits) * slots)
    else:
        row["bytes_per_token"] = s.page_size_bytes * slots // s.block_size
        if kind == "sliding_window":
            row["sliding_window"] = s.sliding_window
        if not uniform:
            row.update(num_kv_heads=s.num_kv_heads, head_size=s.head_size, dtype=s.dtype)
    return row


@memoised(FIGURES)
def impact(cfg, *, gpu_memory_gib: float = H200_GIB,
           gpu_memory_utilization: float = DEFAULT_UTILIZATION, kv_cache_memory: int | None = None,
           contexts: Sequence[int] = DEFAULT_CONTEXTS,
           disable_hybrid_kv_cache_manager: bool = False) -> dict[str, Any]:
    """The KV-cache figures of a resolved config on one GPU (see the module doc)."""
    mc, cc = cfg.model_config, cfg.cache_config
    specs = kv_specs.layer_specs(cfg)
    budget = memory_budget(cfg, gpu_memory_gib=gpu_memory_gib,
                           gpu_memory_utilization=gpu_memory_utilization,
                           kv_cache_memory=kv_cache_memory, specs=specs)
    available = budget["kv_cache_memory"]
    groups = kc.get_kv_cache_groups(specs, disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)
    limits = _limits(cfg)
    kcfg = kc.kv_cache_config_from_groups(groups, available)
    out: dict[str, Any] = {"memory": budget, "max_model_len": mc.max_model_len,
                           "max_num_batched_tokens": limits.max_num_batched_tokens}
    if not groups:
        out.update(groups=[], num_blocks=kcfg.num_blocks, kv_tokens=0, max_concurrency=None,
                   concurrency={}, max_model_len_fits=mc.max_model_len, fits=None,
                   bytes_per_token=0, min_request_bytes=0, padding=None,
                   block_rounding=None, prefix_cache_granularity=None,
                   note="no layer keeps KV cache (attention-free or encoder-only)")
        return out
    group_size = max(len(g.layer_names) for g in groups)
    rows = [_group_row(g, group_size, limits) for g in groups]
    used = sum(kcfg.tensor_sizes)
    mamba_pages = [s for s in specs.values() if isinstance(s, kc.MambaSpec)]
    mamba_pad = None
    if mamba_pages:
        m = mamba_pages[0]
        extra = m.page_size_bytes - m.real_page_size_bytes
        mamba_pad = {"state_bytes": m.real_page_size_bytes, "page_bytes": m.page_size_bytes,
                     "bytes": extra, "percent": _pct(extra, m.real_page_size_bytes)}
    pad_layers = kc.padding_layers(groups)
    concurrency = {}
    for n in contexts:
        concurrency[str(n)] = kc.max_concurrency(kcfg, _limits(cfg, n)) if n <= mc.max_model_len else None
    granularity = None
    if cc.enable_prefix_caching:
        granularity = min(g.spec.block_size for g in groups
                          if not isinstance(g.spec, kc.MambaSpec)) if any(
            not isinstance(g.spec, kc.MambaSpec) for g in groups) else cc.mamba_block_size
    out.update(
        groups=rows,
        num_blocks=kcfg.num_blocks,
        kv_tokens=kc.kv_tokens(kcfg),
        max_concurrency=kc.max_concurrency(kcfg, limits),
        concurrency=concurrency,
        max_model_len_fits=kc.group_estimate_max_model_len(groups, limits, available),
        fits=kc.check_groups_fit(groups, limits, available),
        bytes_per_token=sum(r["bytes_per_token"] or 0 for r in rows),
        min_request_bytes=kc.group_memory_usage_bytes(groups, _limits(cfg, 1)),
        request_bytes=kc.group_memory_usage_bytes(groups, limits),
        padding={"mamba": mamba_pad,
                 "layers": pad_layers,
                 "layer_percent": _pct(pad_layers, sum(len(g.layer_names) for g in groups))},
        block_rounding={"bytes": available - used, "percent": _pct(available - used, available)},
        prefix_cache_granularity=granularity,
    )
    return out
