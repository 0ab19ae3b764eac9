"""vLLM 0.19.0's KV-cache grouping and capacity arithmetic, in plain Python.

vLLM decides how many tokens of KV cache a GPU holds only after it has loaded the weights:
``vllm/v1/core/kv_cache_utils.py`` groups the layers' KV-cache specs, gives every group one
page size, divides the free memory into blocks and logs "GPU KV cache size: N tokens" and
"Maximum concurrency for L tokens per request: Cx".  This module re-implements that
arithmetic (not imported: enginecfg never needs vLLM or torch) so the same figures can be
given before anything is loaded, for any setting.  ``tests/kv_oracle/expected.json`` holds
vLLM's own answers on the fixture configs; the tests compare them exactly.

The spec classes mirror vLLM's dataclasses field for field because the grouping keys layers
by spec *equality*: two layers land in one group only when every field matches.
Dtypes are canonical names (``bfloat16``, ``float8_e4m3fn``); sizes come from
:func:`enginecfg.pipeline.dtypes.dtype_size`.

What is left out, because enginecfg's configs never reach it: pipeline parallelism (one
worker's layers are the whole model), decode/prefill context parallelism (size 1),
chunked-local and cross attention, ``num_gpu_blocks_override`` and the auto-fit of
``max_model_len=-1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from enginecfg.pipeline.models.dtypes import dtype_size
from enginecfg.pipeline.errors import ConfigRejectedError

__all__ = [
    "Limits",
    "FullAttentionSpec",
    "MLAAttentionSpec",
    "SlidingWindowSpec",
    "MambaSpec",
    "UniformTypeSpecs",
    "KVCacheGroup",
    "KVCacheConfig",
    "get_kv_cache_groups",
    "largest_fitting",
    "needs_unifying",
    "kv_cache_config_from_groups",
    "max_concurrency",
    "kv_tokens",
    "max_memory_usage_bytes",
    "group_memory_usage_bytes",
    "estimate_max_model_len",
    "group_estimate_max_model_len",
    "check_enough_kv_cache_memory",
    "needed_memory_error",
    "cdiv",
]


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


@dataclass(frozen=True)
class Limits:
    """The engine settings the per-request memory depends on."""

    max_model_len: int
    max_num_batched_tokens: int
    mamba_cache_mode: str = "none"


# --------------------------------------------------------------------------- specs
@dataclass(frozen=True, kw_only=True)
class _AttentionBase:
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: str
    page_size_padded: int | None = None

    @property
    def page_size_bytes(self) -> int:
        real = self.real_page_size_bytes
        if self.page_size_padded is not None:
            return self.page_size_padded
        return real

    @property
    def real_page_size_bytes(self) -> int:
        return 2 * self.block_size * self.num_kv_heads * self.head_size * dtype_size(self.dtype)


#: the fields vLLM's AttentionSpec declares (compared when full-attention layers merge)
_ATTENTION_FIELDS = ("block_size", "num_kv_heads", "head_size", "dtype", "page_size_padded")


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(_AttentionBase):
    """A layer that keeps K and V of every token (``sliding_window`` is only recorded here
    when the hybrid manager is off and a sliding layer is treated as full)."""

    head_size_v: int | None = None
    sliding_window: int | None = None
    attention_chunk_size: int | None = None

    def __post_init__(self) -> None:
        if self.head_size_v is None:
            object.__setattr__(self, "head_size_v", self.head_size)

    @property
    def real_page_size_bytes(self) -> int:
        return self.block_size * self.num_kv_heads * (self.head_size + self.head_size_v) \
            * dtype_size(self.dtype)

    def max_memory_usage_bytes(self, limits: Limits) -> int:
        return cdiv(limits.max_model_len, self.block_size) * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    """Multi-head latent attention: one latent vector per token (656 bytes in fp8_ds_mla)."""

    cache_dtype_str: str | None = None

    @property
    def real_page_size_bytes(self) -> int:
        if self.cache_dtype_str == "fp8_ds_mla":
            return self.block_size * 656
        return self.block_size * self.num_kv_heads * self.head_size * dtype_size(self.dtype)


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(_AttentionBase):
    """A layer that keeps only the last ``sliding_window`` tokens (plus one block of slack,
    since the window need not start on a block boundary)."""

    sliding_window: int

    def max_memory_usage_bytes(self, limits: Limits) -> int:
        tokens = min(self.sliding_window - 1 + limits.max_num_batched_tokens, limits.max_model_len)
        return (cdiv(tokens, self.block_size) + 1) * self.page_size_bytes


@dataclass(frozen=True, kw_only=True)
class MambaSpec:
    """A recurrent-state layer: one state page per request (two in ``align`` mode, one per
    block in ``all`` mode)."""

    block_size: int
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    page_size_padded: int | None = None
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0

    @property
    def real_page_size_bytes(self) -> int:
        return sum(math.prod(s) * dtype_size(d) for s, d in zip(self.shapes, self.dtypes))

    @property
    def page_size_bytes(self) -> int:
        if self.page_size_padded is not None:
            return self.page_size_padded
        return self.real_page_size_bytes

    def max_memory_usage_bytes(self, limits: Limits) -> int:
        if limits.mamba_cache_mode == "all":
            return cdiv(limits.max_model_len, self.block_size) * self.page_size_bytes
        if limits.mamba_cache_mode == "align":
            return self.page_size_bytes * (2 + self.num_speculative_blocks)
        return self.page_size_bytes * (1 + self.num_speculative_blocks)


Spec = FullAttentionSpec | SlidingWindowSpec | MambaSpec


@dataclass(frozen=True)
class UniformTypeSpecs:
    """One group for layers that all need the same token slots but differ in size."""

    block_size: int
    specs: tuple[tuple[str, Spec], ...]

    @property
    def page_size_bytes(self) -> int:
        return sum(s.page_size_bytes for _, s in self.specs)

    def max_memory_usage_bytes(self, limits: Limits) -> int:
        pages = max(cdiv(s.max_memory_usage_bytes(limits), s.page_size_bytes) for _, s in self.specs)
        return pages * self.page_size_bytes


@dataclass
class KVCacheGroup:
    layer_names: list[str]
    spec: Spec | UniformTypeSpecs


@dataclass
class KVCacheConfig:
    num_blocks: int
    tensor_sizes: list[int]
    groups: list[KVCacheGroup]


# --------------------------------------------------------------------------- merging
class _NotMergeable(Exception):
    """vLLM's assertion that the layers of one group share one spec failed."""


def _merge(specs: Sequence[Spec]) -> Spec:
    """``KVCacheSpec.merge`` of the first spec's class (its checks, its error kinds)."""
    first = specs[0]
    if isinstance(first, MLAAttentionSpec):
        if not all(isinstance(s, MLAAttentionSpec) for s in specs):
            raise _NotMergeable
        if len({s.cache_dtype_str for s in specs}) != 1:
            raise _NotMergeable
        return MLAAttentionSpec(block_size=first.block_size, num_kv_heads=first.num_kv_heads,
                                head_size=first.head_size, dtype=first.dtype,
                                page_size_padded=first.page_size_padded,
                                cache_dtype_str=first.cache_dtype_str)
    if isinstance(first, FullAttentionSpec):
        if not all(isinstance(s, FullAttentionSpec) for s in specs):
            raise _NotMergeable
        windows = {s.sliding_window for s in specs if s.sliding_window is not None}
        chunks = {s.attention_chunk_size for s in specs if s.attention_chunk_size is not None}
        if any(isinstance(s, MLAAttentionSpec) for s in specs):
            raise _NotMergeable
        merged = FullAttentionSpec(
            block_size=first.block_size, num_kv_heads=first.num_kv_heads,
            head_size=first.head_size, head_size_v=first.head_size_v, dtype=first.dtype,
            page_size_padded=first.page_size_padded,
            sliding_window=_one_window(windows), attention_chunk_size=_one_window(chunks))
        for s in specs:
            if any(getattr(s, f) != getattr(merged, f) for f in _ATTENTION_FIELDS):
                raise _NotMergeable
        if merged.sliding_window is not None and merged.attention_chunk_size is not None:
            raise _NotMergeable
        return merged
    if not all(s == first for s in specs[1:]):
        raise _NotMergeable
    return first


def _one_window(sizes: set[int]) -> int | None:
    if not sizes:
        return None
    if len(sizes) == 1:
        return next(iter(sizes))
    raise ConfigRejectedError(
        "All attention layers in the same KV cache group must have the same window size.",
        field="model_config.hf_config.sliding_window", vllm_type="ValueError")


def _is_uniform(specs: Mapping[str, Spec]) -> bool:
    if not specs:
        return True
    try:
        _merge(list(specs.values()))
    except _NotMergeable:
        return False
    return True


def _is_uniform_type(specs: Mapping[str, Spec]) -> bool:
    values = list(specs.values())
    if len({s.block_size for s in values}) > 1:
        return False
    one = values[0]
    if isinstance(one, FullAttentionSpec):
        return all(isinstance(s, FullAttentionSpec) for s in values)
    if isinstance(one, SlidingWindowSpec):
        return all(isinstance(s, SlidingWindowSpec) and s.sliding_window == one.sliding_window
                   for s in values)
    if isinstance(one, MambaSpec):
        return all(isinstance(s, MambaSpec) and s.num_speculative_blocks == one.num_speculative_blocks
                   for s in values)
    raise ConfigRejectedError(f"Unsupported KV cache spec type: {type(one).__name__}",
                              field="model_config.architecture", vllm_type="NotImplementedError")


def needs_unifying(specs: Mapping[str, Spec]) -> bool:
    """Whether ``--disable-hybrid-kv-cache-manager`` has specs of several kinds to convert
    to one (vLLM warns when it has)."""
    return bool(specs) and not (_is_uniform(specs) or _is_uniform_type(specs))


def _unify_hybrid(specs: dict[str, Spec]) -> dict[str, Spec]:
    """``--disable-hybrid-kv-cache-manager``: sliding-window layers become full attention."""
    if _is_uniform(specs) or _is_uniform_type(specs):
        return specs
    has_full = any(isinstance(s, FullAttentionSpec) for s in specs.values())
    has_sliding = any(isinstance(s, SlidingWindowSpec) for s in specs.values())
    out = dict(specs)
    if has_full and has_sliding:
        for name, s in specs.items():
            if isinstance(s, SlidingWindowSpec):
                out[name] = FullAttentionSpec(block_size=s.block_size, num_kv_heads=s.num_kv_heads,
                                              head_size=s.head_size, dtype=s.dtype,
                                              sliding_window=s.sliding_window,
                                              page_size_padded=s.page_size_padded)
    if not (_is_uniform(out) or _is_uniform_type(out)):
        raise ConfigRejectedError(
            "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one "
            "unified type.", field="scheduler_config.disable_hybrid_kv_cache_manager",
            vllm_type="ValueError")
    return out


def _unify_page_size(specs: dict[str, Spec]) -> dict[str, Spec]:
    """Grow the block size of smaller-page layers until every page is the largest one."""
    pages = {s.page_size_bytes for s in specs.values()}
    if len(pages) <= 1:
        return specs
    top = max(pages)
    out: dict[str, Spec] = {}
    for name, s in specs.items():
        page = s.page_size_bytes
        if page == top:
            out[name] = s
            continue
        if top % page:
            raise ConfigRejectedError(
                "The page size of the layer is not divisible by the maximum page size. Cannot "
                f"unify by adjusting block_size. (layer {name}: {page} bytes, largest page: "
                f"{top} bytes)", field="cache_config.block_size", vllm_type="NotImplementedError")
        out[name] = replace(s, block_size=s.block_size * (top // page))
    return out


def _create_groups(specs: Mapping[str, Spec], grouped: list[list[str]]) -> list[KVCacheGroup]:
    groups = []
    for names in grouped:
        try:
            merged = _merge([specs[n] for n in names])
        except _NotMergeable:  # pragma: no cover - grouping by equality makes this unreachable
            raise ConfigRejectedError("All layers in the same KV cache group must be the same.",
                                      field="model_config.architecture", vllm_type="AssertionError")
        groups.append(KVCacheGroup(list(names), merged))
    return groups


def get_kv_cache_groups(specs: Mapping[str, Spec], *,
                        disable_hybrid_kv_cache_manager: bool = False) -> list[KVCacheGroup]:
    """``get_kv_cache_groups``: split the layers into groups that share one block table.

    ``specs`` maps layer names to specs in the model's layer-construction order (the order
    decides which layers pair up, not the figures).  Attention-free models get no group.
    """
    specs = dict(specs)
    if disable_hybrid_kv_cache_manager:
        specs = _unify_hybrid(specs)
    if not specs:
        return []
    if _is_uniform(specs):
        return _create_groups(specs, [list(specs)])
    if _is_uniform_type(specs):
        block = next(iter(specs.values())).block_size
        return [KVCacheGroup(list(specs), UniformTypeSpecs(block, tuple(specs.items())))]
    specs = _unify_page_size(specs)
    by_spec: dict[Spec, list[str]] = {}
    for name, s in specs.items():
        by_spec.setdefault(s, []).append(name)
    counts = [len(v) for v in by_spec.values()]
    group_size = min(counts)
    if max(counts) < group_size * 1.5:
        group_size = max(counts)
    grouped: list[list[str]] = []
    for names in by_spec.values():
        n = cdiv(len(names), group_size)
        grouped.extend(names[i::n] for i in range(n))
    return _create_groups(specs, grouped)


def padding_layers(groups: Sequence[KVCacheGroup]) -> int:
    """Layer slots the grouping pads (groups shorter than the longest one)."""
    if not groups or isinstance(groups[0].spec, UniformTypeSpecs):
        return 0
    size = max(len(g.layer_names) for g in groups)
    return sum(size - len(g.layer_names) for g in groups)


def _uniform_page(groups: Sequence[KVCacheGroup]) -> int:
    pages = {g.spec.page_size_bytes for g in groups}
    if len(pages) != 1:  # pragma: no cover - the page unification guarantees one size
        raise ConfigRejectedError(f"KV cache groups have different page sizes {sorted(pages)}",
                                  field="cache_config.block_size", vllm_type="AssertionError")
    return pages.pop()


# --------------------------------------------------------------------------- capacity
def kv_cache_config_from_groups(groups: Sequence[KVCacheGroup], available_memory: int) -> KVCacheConfig:
    """``get_kv_cache_config_from_groups``: blocks that fit in ``available_memory`` bytes."""
    if not groups:
        return KVCacheConfig(num_blocks=1, tensor_sizes=[], groups=list(groups))
    if len(groups) == 1 and isinstance(groups[0].spec, UniformTypeSpecs):
        spec = groups[0].spec
        blocks = available_memory // spec.page_size_bytes
        return KVCacheConfig(num_blocks=blocks,
                             tensor_sizes=[s.page_size_bytes * blocks for _, s in spec.specs],
                             groups=list(groups))
    group_size = max(len(g.layer_names) for g in groups)
    page = _uniform_page(groups)
    blocks = max(int(available_memory // page // group_size), 0)
    return KVCacheConfig(num_blocks=blocks, tensor_sizes=[page * blocks] * group_size,
                         groups=list(groups))


def kv_tokens(config: KVCacheConfig) -> int:
    """The "GPU KV cache size: N tokens" figure vLLM logs."""
    if not config.groups:
        return 0
    smallest = min(g.spec.block_size for g in config.groups)
    return config.num_blocks // len(config.groups) * smallest


def max_memory_usage_bytes(specs: Iterable, limits: Limits) -> int:
    """Per-layer sum of the memory one request of ``max_model_len`` tokens needs."""
    return sum(s.max_memory_usage_bytes(limits) for s in specs)


def max_concurrency(config: KVCacheConfig, limits: Limits) -> float:
    """``get_max_concurrency_for_kv_cache_config``: requests of ``max_model_len`` that fit."""
    per_group = max(len(g.layer_names) for g in config.groups)
    per_request = per_group * max_memory_usage_bytes((g.spec for g in config.groups), limits)
    per_block = config.groups[0].spec.page_size_bytes * per_group
    return config.num_blocks / cdiv(per_request, per_block)


def group_memory_usage_bytes(groups: Sequence[KVCacheGroup], limits: Limits) -> int:
    """Memory one request needs as the groups lay it out (padding layers included)."""
    if not groups:
        return 0
    if len(groups) == 1 and isinstance(groups[0].spec, UniformTypeSpecs):
        return sum(s.max_memory_usage_bytes(limits) for _, s in groups[0].spec.specs)
    size = max(len(g.layer_names) for g in groups)
    page = _uniform_page(groups)
    blocks = sum(cdiv(g.spec.max_memory_usage_bytes(limits), page) for g in groups)
    return size * page * blocks


def largest_fitting(fits, upper: int) -> int:
    """The largest length in 1..*upper* that *fits* (a test that holds up to some length and
    not beyond), by bisection; 0 where not even 1 fits."""
    if not fits(1):
        return 0
    lo, hi, best = 1, upper, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def estimate_max_model_len(specs: Iterable, limits: Limits, available_memory: int) -> int:
    """``estimate_max_model_len``: largest max_model_len (up to the configured one) whose
    per-layer memory fits; 0 when not even one token does."""
    specs = list(specs)
    return largest_fitting(lambda n: max_memory_usage_bytes(specs, replace(limits, max_model_len=n))
                   <= available_memory, limits.max_model_len)


def group_estimate_max_model_len(groups: Sequence[KVCacheGroup], limits: Limits,
                                 available_memory: int) -> int:
    """The same search on the grouped layout (what the engine start reports)."""
    if group_memory_usage_bytes(groups, limits) <= available_memory:
        return limits.max_model_len  # the search's upper end fits: skip the search
    return largest_fitting(lambda n: group_memory_usage_bytes(groups, replace(limits, max_model_len=n))
                   <= available_memory, limits.max_model_len)


def _gib(n: int) -> str:
    return f"{round(n / 2**30, 2)}"


def needed_memory_error(needed: int, available: int, max_model_len: int, estimated: int) -> str:
    """vLLM's message when one request of max_model_len does not fit."""
    hint = ""
    if estimated > 0:
        hint = ("Based on the available memory, the estimated maximum model length is "
                f"{estimated}. ")
    return (f"To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({_gib(needed)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({_gib(available)} GiB). {hint}Try increasing `gpu_memory_utilization` or "
            f"decreasing `max_model_len` when initializing the engine. See "
            f"https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")


def check_enough_kv_cache_memory(specs: Mapping[str, Spec], limits: Limits,
                                 available_memory: int) -> str | None:
    """``check_enough_kv_cache_memory`` (per-layer form): vLLM's error text, or None."""
    if not specs:
        return None
    if available_memory <= 0:
        return ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine. See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    needed = max_memory_usage_bytes(specs.values(), limits)
    if needed <= available_memory:
        return None
    return needed_memory_error(needed, available_memory, limits.max_model_len,
                               estimate_max_model_len(specs.values(), limits, available_memory))


def check_groups_fit(groups: Sequence[KVCacheGroup], limits: Limits,
                     available_memory: int) -> str | None:
    """The engine start's check on the grouped layout: vLLM's error text, or None."""
    if not groups:
        return None
    if available_memory <= 0:
        return ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine. See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    needed = group_memory_usage_bytes(groups, limits)
    if needed <= available_memory:
        return None
    return needed_memory_error(needed, available_memory, limits.max_model_len,
                               group_estimate_max_model_len(groups, limits, available_memory))
