"""What a resolved config costs in KV cache: the figures vLLM prints only after loading.

Puts :mod:`.kv_specs` (what each layer keeps), :mod:`.kv_cache` (vLLM's grouping and block
arithmetic) and :mod:`.weights` (what the weights leave free) together into one value,
:class:`Impact`: the memory budget and its basis, each KV-cache group with its page size,
tokens per block and bytes per token of context, the Mamba padding, the layer padding and
the block rounding in bytes and percent, the KV capacity in tokens, the concurrency at
several context lengths, the largest max_model_len that fits, and the smallest footprint
one request pins.  The ``impact`` stage records it (or :class:`ImpactUnavailable` when the
figures cannot be worked out); ``enginecfg explain`` and ``plan`` show it.

Every value here is frozen all the way down (tuples, read-only mappings), so a figure handed
to one caller can be shared with the next; ``to_dict()`` gives the JSON the run document
and the audit store keep, key for key and in the same order.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

import attrs

from enginecfg.pipeline.hf import ContentMemo, memoised
from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import kv_specs
from enginecfg.pipeline.models.engine_defaults import max_num_batched_tokens
from enginecfg.pipeline.models.weights import WeightsEstimate, estimate_weights

__all__ = [
    "H200_GIB", "DEFAULT_UTILIZATION", "DEFAULT_CONTEXTS", "FIGURES", "ImpactOptions", "WeightsFigures",
    "MemoryBudget", "GroupFigures", "MambaPadding", "Padding", "BlockRounding", "Impact",
    "ImpactUnavailable", "memory_budget", "impact",
]

#: the figures of configs seen before in this process: the arithmetic is pure, and an engine
#: resolving the same model under the same arguments again pays it once (the values are
#: immutable, so every run is handed the same one)
FIGURES = ContentMemo(maxsize=256)

#: the H200's memory, the default GPU
H200_GIB = 141.0
DEFAULT_UTILIZATION = 0.9
DEFAULT_CONTEXTS = (1024, 8192, 32768)


class _Immutable:
    """Frozen all the way down: a copy is the value itself (the memo of figures hands the
    same value to every run that asks)."""

    __slots__ = ()

    def __copy__(self):
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        return self

    def __reduce__(self):
        # pickled by its field values (a read-only mapping travels as a dict)
        return type(self), tuple(dict(v) if isinstance(v, MappingProxyType) else v
                                 for v in attrs.astuple(self, recurse=False))


def _read_only(value: Mapping[int, float | None]) -> Mapping[int, float | None]:
    return MappingProxyType(dict(value))


@attrs.frozen
class ImpactOptions(_Immutable):
    """What the figures assume about the GPU: its memory, vLLM's share of it, or the
    KV-cache bytes outright (``--kv-cache-memory-bytes``: no weights estimate), and the
    context lengths the concurrency is given at."""

    gpu_memory_gib: float = H200_GIB
    gpu_memory_utilization: float = DEFAULT_UTILIZATION
    kv_cache_memory: int | None = None
    contexts: tuple[int, ...] = attrs.field(default=DEFAULT_CONTEXTS, converter=tuple)

    def to_dict(self) -> dict[str, Any]:
        """The memory options as ``plan --json`` states them (the contexts apart)."""
        return {"gpu_memory_gib": self.gpu_memory_gib,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "kv_cache_memory": self.kv_cache_memory}


@attrs.frozen
class WeightsFigures(_Immutable):
    """The weights estimate a budget subtracted: parameters, bytes, bytes per GPU, and the
    basis of the estimate in words."""

    params: int
    bytes_total: int
    bytes_per_gpu: int
    basis: tuple[str, ...] = attrs.field(converter=tuple)

    @classmethod
    def from_estimate(cls, est: WeightsEstimate) -> "WeightsFigures":
        return cls(est.params, est.bytes_total, est.bytes_per_gpu, est.basis)

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "bytes_total": self.bytes_total,
                "bytes_per_gpu": self.bytes_per_gpu, "basis": list(self.basis)}


@attrs.frozen
class MemoryBudget(_Immutable):
    """The KV-cache bytes of one GPU and how they were arrived at: ``source`` is
    ``"estimate"`` (GPU memory x utilization - the weights) or ``"--kv-cache-memory"``
    (given; ``weights`` is then None)."""

    gpu_memory_bytes: int
    gpu_memory_utilization: float
    kv_cache_memory: int
    source: str
    weights: WeightsFigures | None

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_memory_bytes": self.gpu_memory_bytes,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "kv_cache_memory": self.kv_cache_memory, "source": self.source,
                "weights": self.weights.to_dict() if self.weights is not None else None}


@attrs.frozen
class GroupFigures(_Immutable):
    """One KV-cache group (one block table).  ``kind`` is ``full_attention``,
    ``sliding_window``, ``mla``, ``mamba`` or ``uniform`` (layers of several sizes sharing
    token slots).  Attention groups give ``bytes_per_token`` of context; a Mamba group gives
    ``bytes_per_request`` (its state, whatever the context) instead."""

    kind: str
    num_layers: int
    block_size: int
    page_size_bytes: int
    bytes_per_token: int | None = None
    bytes_per_request: int | None = None
    mamba_type: str | None = None
    state_bytes: int | None = None
    sliding_window: int | None = None
    num_kv_heads: int | None = None
    head_size: int | None = None
    dtype: str | None = None

    @property
    def is_mamba(self) -> bool:
        return self.kind == "mamba"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "num_layers": self.num_layers,
                               "block_size": self.block_size, "page_size_bytes": self.page_size_bytes}
        if self.kind == "mamba":
            out.update(mamba_type=self.mamba_type, state_bytes=self.state_bytes, bytes_per_token=None,
                       bytes_per_request=self.bytes_per_request)
            return out
        out["bytes_per_token"] = self.bytes_per_token
        if self.kind == "sliding_window":
            out["sliding_window"] = self.sliding_window
        if self.kind != "uniform":
            out.update(num_kv_heads=self.num_kv_heads, head_size=self.head_size, dtype=self.dtype)
        return out


@attrs.frozen
class MambaPadding(_Immutable):
    """A Mamba state page padded to the attention page size: the state, the page, the
    padding in bytes and in percent of the state."""

    state_bytes: int
    page_bytes: int
    bytes: int
    percent: float

    def to_dict(self) -> dict[str, Any]:
        return {"state_bytes": self.state_bytes, "page_bytes": self.page_bytes, "bytes": self.bytes,
                "percent": self.percent}


@attrs.frozen
class Padding(_Immutable):
    """Memory that holds nothing: the Mamba page padding, and the empty layer slots of the
    groups (in layers and in percent of the layers)."""

    mamba: MambaPadding | None
    layers: int
    layer_percent: float

    def to_dict(self) -> dict[str, Any]:
        return {"mamba": self.mamba.to_dict() if self.mamba is not None else None,
                "layers": self.layers, "layer_percent": self.layer_percent}


@attrs.frozen
class BlockRounding(_Immutable):
    """KV-cache bytes left over after the last whole block, and their share."""

    bytes: int
    percent: float

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "percent": self.percent}


@attrs.frozen
class Impact(_Immutable):
    """The KV-cache figures of a resolved config on one GPU.

    ``kv_tokens`` is vLLM's "GPU KV cache size"; ``max_concurrency`` its "Maximum
    concurrency for max_model_len tokens per request"; ``concurrency`` the same at other
    context lengths (None above max_model_len); ``fits`` vLLM's start-up error when one
    request of max_model_len does not fit (None when it does), and ``max_model_len_fits``
    the largest that would.  A model with no KV-cache layer has no groups and a ``note``.
    """

    memory: MemoryBudget
    max_model_len: int
    max_num_batched_tokens: int
    groups: tuple[GroupFigures, ...] = attrs.field(converter=tuple)
    num_blocks: int
    kv_tokens: int
    max_concurrency: float | None
    concurrency: Mapping[int, float | None] = attrs.field(converter=_read_only)
    max_model_len_fits: int
    fits: str | None
    bytes_per_token: int
    min_request_bytes: int
    request_bytes: int | None
    padding: Padding | None
    block_rounding: BlockRounding | None
    prefix_cache_granularity: int | None
    note: str | None = None

    @property
    def attention_groups(self) -> tuple[GroupFigures, ...]:
        return tuple(g for g in self.groups if not g.is_mamba)

    @property
    def attention_block_size(self) -> int | None:
        """The smallest attention block (tokens), None without attention groups."""
        return min((g.block_size for g in self.attention_groups), default=None)

    def concurrency_at(self, context: int) -> float | None:
        """Requests of *context* tokens that fit at once (None: not worked out, or above
        max_model_len)."""
        return self.concurrency.get(context)

    def to_dict(self) -> dict[str, Any]:
        """The ``impact`` of the run document."""
        out: dict[str, Any] = {
            "memory": self.memory.to_dict(), "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "groups": [g.to_dict() for g in self.groups], "num_blocks": self.num_blocks,
            "kv_tokens": self.kv_tokens, "max_concurrency": self.max_concurrency,
            "concurrency": {str(n): x for n, x in self.concurrency.items()},
            "max_model_len_fits": self.max_model_len_fits, "fits": self.fits,
            "bytes_per_token": self.bytes_per_token, "min_request_bytes": self.min_request_bytes,
        }
        if self.request_bytes is not None:
            out["request_bytes"] = self.request_bytes
        out.update(padding=self.padding.to_dict() if self.padding is not None else None,
                   block_rounding=self.block_rounding.to_dict() if self.block_rounding is not None else None,
                   prefix_cache_granularity=self.prefix_cache_granularity)
        if self.note is not None:
            out["note"] = self.note
        return out


@attrs.frozen
class ImpactUnavailable(_Immutable):
    """The figures could not be worked out (a layer pattern enginecfg does not know, a
    config field they need that the stages do not): why, and the field when one is to blame."""

    error: str
    field: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.error, "field": self.field}


def memory_budget(cfg, *, gpu_memory_gib: float = H200_GIB,
                  gpu_memory_utilization: float = DEFAULT_UTILIZATION,
                  kv_cache_memory: int | None = None, specs: dict | None = None) -> MemoryBudget:
    """The KV-cache bytes of one GPU, and how they were arrived at."""
    gpu_bytes = int(gpu_memory_gib * 2**30)
    if kv_cache_memory is not None:
        return MemoryBudget(gpu_bytes, gpu_memory_utilization, int(kv_cache_memory), "--kv-cache-memory", None)
    weights = estimate_weights(cfg, specs)
    usable = int(gpu_bytes * gpu_memory_utilization)
    return MemoryBudget(gpu_bytes, gpu_memory_utilization, max(usable - weights.bytes_per_gpu, 0), "estimate",
                        WeightsFigures.from_estimate(weights))


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def _limits(cfg, max_model_len: int | None = None) -> kc.Limits:
    return kc.Limits(max_model_len=max_model_len or cfg.model_config.max_model_len,
                     max_num_batched_tokens=max_num_batched_tokens(cfg),
                     mamba_cache_mode=cfg.cache_config.mamba_cache_mode)


_KINDS = {kc.MLAAttentionSpec: "mla", kc.FullAttentionSpec: "full_attention",
          kc.SlidingWindowSpec: "sliding_window", kc.MambaSpec: "mamba"}


def _group_figures(g: kc.KVCacheGroup, group_size: int, limits: kc.Limits) -> GroupFigures:
    s = g.spec
    common = {"num_layers": len(g.layer_names), "block_size": s.block_size,
              "page_size_bytes": s.page_size_bytes}
    if isinstance(s, kc.UniformTypeSpecs):
        # every layer of the group has its own page: the slots are the group's layers
        return GroupFigures("uniform", **common,
                            bytes_per_token=s.page_size_bytes * len(g.layer_names) // s.block_size)
    kind = _KINDS[type(s)]
    if kind == "mamba":
        return GroupFigures(kind, **common, mamba_type=s.mamba_type, state_bytes=s.real_page_size_bytes,
                            bytes_per_request=s.max_memory_usage_bytes(limits) * group_size)
    return GroupFigures(kind, **common, bytes_per_token=s.page_size_bytes * group_size // s.block_size,
                        sliding_window=s.sliding_window if kind == "sliding_window" else None,
                        num_kv_heads=s.num_kv_heads, head_size=s.head_size, dtype=s.dtype)


@memoised(FIGURES)
def impact(cfg, *, gpu_memory_gib: float = H200_GIB,
           gpu_memory_utilization: float = DEFAULT_UTILIZATION, kv_cache_memory: int | None = None,
           contexts: Sequence[int] = DEFAULT_CONTEXTS,
           disable_hybrid_kv_cache_manager: bool = False, startup_block_size: int | None = None) -> Impact:
    """The KV-cache figures of a resolved config on one GPU (see the module doc).

    *startup_block_size*: the block size the engine start gave the attention layers (the
    ``startup`` fact's ``block_size``); None: the config's, as :func:`.kv_specs.engine_block_size`
    reads it."""
    mc, cc = cfg.model_config, cfg.cache_config
    specs = kv_specs.layer_specs(cfg, block_size=startup_block_size)
    budget = memory_budget(cfg, gpu_memory_gib=gpu_memory_gib,
                           gpu_memory_utilization=gpu_memory_utilization,
                           kv_cache_memory=kv_cache_memory, specs=specs)
    available = budget.kv_cache_memory
    groups = kc.get_kv_cache_groups(specs, disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)
    limits = _limits(cfg)
    kcfg = kc.kv_cache_config_from_groups(groups, available)
    if not groups:
        return Impact(memory=budget, max_model_len=mc.max_model_len,
                      max_num_batched_tokens=limits.max_num_batched_tokens, groups=(),
                      num_blocks=kcfg.num_blocks, kv_tokens=0, max_concurrency=None, concurrency={},
                      max_model_len_fits=mc.max_model_len, fits=None, bytes_per_token=0,
                      min_request_bytes=0, request_bytes=None, padding=None, block_rounding=None,
                      prefix_cache_granularity=None,
                      note="no layer keeps KV cache (attention-free or encoder-only)")
    group_size = max(len(g.layer_names) for g in groups)
    rows = [_group_figures(g, group_size, limits) for g in groups]
    used = sum(kcfg.tensor_sizes)
    mamba_pages = [s for s in specs.values() if isinstance(s, kc.MambaSpec)]
    mamba_pad = None
    if mamba_pages:
        m = mamba_pages[0]
        extra = m.page_size_bytes - m.real_page_size_bytes
        mamba_pad = MambaPadding(m.real_page_size_bytes, m.page_size_bytes, extra,
                                 _pct(extra, m.real_page_size_bytes))
    pad_layers = kc.padding_layers(groups)
    concurrency = {n: kc.max_concurrency(kcfg, _limits(cfg, n)) if n <= mc.max_model_len else None
                   for n in contexts}
    granularity = None
    if cc.enable_prefix_caching:
        attention = [g.spec.block_size for g in groups if not isinstance(g.spec, kc.MambaSpec)]
        granularity = min(attention) if attention else cc.mamba_block_size
    return Impact(
        memory=budget,
        max_model_len=mc.max_model_len,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        groups=rows,
        num_blocks=kcfg.num_blocks,
        kv_tokens=kc.kv_tokens(kcfg),
        max_concurrency=kc.max_concurrency(kcfg, limits),
        concurrency=concurrency,
        max_model_len_fits=kc.group_estimate_max_model_len(groups, limits, available),
        fits=kc.check_groups_fit(groups, limits, available),
        bytes_per_token=sum(r.bytes_per_token or 0 for r in rows),
        min_request_bytes=kc.group_memory_usage_bytes(groups, _limits(cfg, 1)),
        request_bytes=kc.group_memory_usage_bytes(groups, limits),
        padding=Padding(mamba_pad, pad_layers, _pct(pad_layers, sum(len(g.layer_names) for g in groups))),
        block_rounding=BlockRounding(available - used, _pct(available - used, available)),
        prefix_cache_granularity=granularity,
    )
