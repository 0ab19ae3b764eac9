"""What a resolved config costs in KV cache: the figures vLLM prints only after loading.

Puts :mod:`.kv_specs` (what each layer keeps), :mod:`.kv_cache` (vLLM's grouping and block
arithmetic) and :mod:`.memory` (what vLLM's worker leaves the KV cache) together into one value,
:class:`Impact`: the memory budget and its basis, each KV-cache group with its page size,
tokens per block and bytes per token of context, the Mamba padding, the layer padding and
the block rounding in bytes and percent, the KV capacity in tokens, the concurrency at
several context lengths, the largest max_model_len that fits, the smallest footprint one
request pins, and whether the engine would start at all.  The ``impact`` stage records it
(or :class:`ImpactUnavailable` when the figures cannot be worked out); ``enginecfg explain``
and ``plan`` show it.

The memory is taken as vLLM 0.19.0's worker takes it (``v1/worker/gpu_worker.py``,
``v1/worker/utils.py``, ``v1/core/kv_cache_utils.py``):

- ``gpu_memory_utilization``: vLLM requests ``ceil(total memory x utilization)`` bytes of
  the card (the total the driver reports, :mod:`.gpus`) and gives the KV cache what is left
  of them after the weights and the profiling run: enginecfg subtracts each part vLLM's
  worker takes (:mod:`.memory`: the weights, the activation peak, the memory outside torch,
  and the CUDA graph estimate under ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``), each
  with its basis, and where a part is known only once the engine runs, its range; the KV
  figures are given at the point estimate and over the range (:class:`KVRange`);
- ``kv_cache_memory`` (``--kv-cache-memory-bytes``): when set (and not 0, which vLLM reads as
  unset), exactly that many bytes per GPU, the utilization ignored;
- ``num_gpu_blocks_override``: the block count replaces the one the memory gives, after the
  start-up check (which still uses the memory), as vLLM replaces it;
- ``max_model_len=-1``: the start-up auto-fit, the largest length that fits.

At start-up vLLM refuses to go on when the KV cache has no memory, when one request of
max_model_len does not fit, when auto-fit finds no length, or when the card's free memory is
below what the utilization requests; :attr:`Impact.starts` and :attr:`Impact.start_error`
say which, in vLLM's own words.  A start-up block size (the attention backend's preference,
decided by the start-up step) can be handed to :func:`impact` as ``startup_block_size``.

Every value here is frozen all the way down (tuples, read-only mappings), so a figure handed
to one caller can be shared with the next; ``to_dict()`` gives the JSON the run document
and the audit store keep, key for key and in the same order.
"""

from __future__ import annotations

import dataclasses
import math
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import attrs

from enginecfg.pipeline.hf import ContentMemo, memoised
from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import kv_specs
from enginecfg.pipeline.models.engine_defaults import max_num_batched_tokens
from enginecfg.pipeline.models.gpus import DEFAULT_GPU, Gpu, custom_gpu, find_gpu, selected_backend_error
from enginecfg.pipeline.models.memory import MemoryPart, budget_range, parts_019
from enginecfg.pipeline.models.weights import WeightsEstimate, estimate_weights

__all__ = [
    "H200_GIB", "DEFAULT_UTILIZATION", "DEFAULT_CONTEXTS", "FIGURES", "ImpactOptions", "WeightsFigures",
    "MemoryBudget", "GroupFigures", "MambaPadding", "Padding", "BlockRounding", "KVRange", "Impact",
    "ImpactUnavailable", "memory_budget", "budget_from_parts", "impact", "concurrency_curve", "start_messages",
    "with_start_failure",
]

#: the figures of configs seen before in this process: the arithmetic is pure, and an engine
#: resolving the same model under the same arguments again pays it once (the values are
#: immutable, so every run is handed the same one)
FIGURES = ContentMemo(maxsize=256)

#: the default GPU's memory in GiB as its driver reports it (an H200: 139.80 GiB, see gpus.py)
H200_GIB = DEFAULT_GPU.memory_gib
#: vLLM 0.19.0's default ``gpu_memory_utilization``
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
    """What the figures assume about the GPU and vLLM's memory flags: the card (a preset of
    :mod:`.gpus`, ``--gpu``) and its memory (``--gpu-memory``: None, the preset's own), vLLM's
    share of it (``--gpu-memory-utilization``), or the KV-cache bytes outright
    (``--kv-cache-memory-bytes``: no memory estimate; 0 reads as unset, as in vLLM), the block
    count that replaces the one the memory gives (``--num-gpu-blocks-override``), and the
    context lengths the concurrency is given at."""

    gpu_memory_gib: float | None = None
    gpu_memory_utilization: float = DEFAULT_UTILIZATION
    kv_cache_memory: int | None = None
    contexts: tuple[int, ...] = attrs.field(default=DEFAULT_CONTEXTS, converter=tuple)
    gpu: str = DEFAULT_GPU.name
    num_gpu_blocks_override: int | None = None
    #: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``: subtract vLLM's CUDA graph estimate (None:
    #: the release's default, off in 0.19.0 and on in 0.34.0)
    estimate_cudagraphs: bool | None = None
    #: ``--enforce-eager``: no CUDA graphs are captured (and none estimated)
    enforce_eager: bool = False

    @property
    def card(self) -> Gpu:
        """The GPU the figures assume: the preset, with ``gpu_memory_gib`` when given."""
        preset = find_gpu(self.gpu)
        return preset if self.gpu_memory_gib is None else custom_gpu(self.gpu_memory_gib, preset)

    @property
    def gpu_memory_bytes(self) -> int:
        return self.card.memory_bytes

    def to_dict(self) -> dict[str, Any]:
        """The memory options as ``plan --json`` states them (the contexts apart)."""
        card = self.card
        return {"gpu": self.gpu, "gpu_memory_gib": card.memory_gib, "gpu_memory_bytes": card.memory_bytes,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "kv_cache_memory": self.kv_cache_memory,
                "num_gpu_blocks_override": self.num_gpu_blocks_override,
                "estimate_cudagraphs": self.estimate_cudagraphs, "enforce_eager": self.enforce_eager}


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


def _same(field: str):
    return attrs.Factory(lambda self: getattr(self, field), takes_self=True)


@attrs.frozen
class MemoryBudget(_Immutable):
    """The KV-cache bytes of one GPU and how they were arrived at: ``source`` is
    ``"estimate"`` (the memory vLLM requests, ``ceil(GPU memory x utilization)``, minus the
    parts its worker subtracts: the weights, the profiling run's activation peak, the memory
    outside torch and, where the release subtracts it, the CUDA graph estimate) or
    ``"--kv-cache-memory"`` (``--kv-cache-memory-bytes`` given; ``weights`` is then None and
    there are no parts).  It also says what else the figures assumed: the GPU preset, the
    flag's own value and the block-count override (None: not given).

    ``parts`` are the :class:`~enginecfg.pipeline.models.memory.MemoryPart` s, each with its
    basis and range; ``kv_cache_memory_low`` / ``kv_cache_memory_high`` the range the KV-cache
    bytes lie in (equal to ``kv_cache_memory`` when every part is exact), ``uncertain`` the
    parts that make it a range.  ``available_kv_cache_memory`` (and its range) is what vLLM
    logs as "Available KV cache memory"; it is ``kv_cache_memory`` except where the release
    sizes the KV cache again after warmup (0.34.0's extensible KV cache)."""

    gpu_memory_bytes: int
    gpu_memory_utilization: float
    kv_cache_memory: int
    source: str
    weights: WeightsFigures | None
    gpu: str = DEFAULT_GPU.name
    requested_memory: int = 0
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    parts: tuple[MemoryPart, ...] = attrs.field(default=(), converter=tuple)
    kv_cache_memory_low: int = _same("kv_cache_memory")
    kv_cache_memory_high: int = _same("kv_cache_memory")
    available_kv_cache_memory: int = _same("kv_cache_memory")
    available_kv_cache_memory_low: int = _same("kv_cache_memory_low")
    available_kv_cache_memory_high: int = _same("kv_cache_memory_high")

    @property
    def uncertain(self) -> tuple[str, ...]:
        """The subtracted parts that are ranges (they make the KV-cache bytes a range)."""
        return tuple(p.name for p in self.parts if p.subtracted and not p.exact)

    @property
    def is_range(self) -> bool:
        return self.kv_cache_memory_low != self.kv_cache_memory_high

    def part(self, name: str) -> MemoryPart | None:
        return next((p for p in self.parts if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "gpu_memory_bytes": self.gpu_memory_bytes,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "requested_memory": self.requested_memory,
                "kv_cache_memory": self.kv_cache_memory, "source": self.source,
                "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
                "num_gpu_blocks_override": self.num_gpu_blocks_override,
                "weights": self.weights.to_dict() if self.weights is not None else None,
                "kv_cache_memory_low": self.kv_cache_memory_low,
                "kv_cache_memory_high": self.kv_cache_memory_high,
                "available_kv_cache_memory": self.available_kv_cache_memory,
                "available_kv_cache_memory_low": self.available_kv_cache_memory_low,
                "available_kv_cache_memory_high": self.available_kv_cache_memory_high,
                "parts": [p.to_dict() for p in self.parts], "uncertain": list(self.uncertain)}


def budget_from_parts(card: Gpu, utilization: float, requested: int, parts: tuple[MemoryPart, ...],
                      weights: WeightsEstimate, **common: Any) -> MemoryBudget:
    """The budget of an estimate: what *requested* leaves after the subtracted *parts*, the
    logged "Available KV cache memory" after the profiling step, the KV cache's bytes after
    every step (see :func:`enginecfg.pipeline.models.memory.budget_range`)."""
    kv, kv_low, kv_high = budget_range(requested, parts, step="warmup")
    av, av_low, av_high = budget_range(requested, parts, step="profile")
    common.setdefault("gpu", card.name)
    return MemoryBudget(card.memory_bytes, utilization, kv, "estimate", WeightsFigures.from_estimate(weights),
                        requested_memory=requested, parts=parts, kv_cache_memory_low=kv_low,
                        kv_cache_memory_high=kv_high, available_kv_cache_memory=av,
                        available_kv_cache_memory_low=av_low, available_kv_cache_memory_high=av_high, **common)


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
class KVRange(_Immutable):
    """The KV figures over the range the KV-cache memory lies in (its low end and its high
    end, :attr:`MemoryBudget.kv_cache_memory_low` / ``_high``): each a ``(low, high)`` pair,
    the concurrency per context length (None above max_model_len), and whether vLLM would
    start at each end."""

    memory: tuple[int, int]
    num_blocks: tuple[int, int]
    kv_tokens: tuple[int, int]
    max_concurrency: tuple[float | None, float | None]
    concurrency: Mapping[int, tuple[float, float] | None] = attrs.field(converter=_read_only)
    max_model_len_fits: tuple[int, int] = (0, 0)
    starts: tuple[bool, bool] = (True, True)

    def to_dict(self) -> dict[str, Any]:
        return {"kv_cache_memory": list(self.memory), "num_blocks": list(self.num_blocks),
                "kv_tokens": list(self.kv_tokens), "max_concurrency": list(self.max_concurrency),
                "concurrency": {str(n): (list(x) if x is not None else None) for n, x in self.concurrency.items()},
                "max_model_len_fits": list(self.max_model_len_fits), "starts": list(self.starts)}


@attrs.frozen
class Impact(_Immutable):
    """The KV-cache figures of a resolved config on one GPU.

    ``kv_tokens`` is vLLM's "GPU KV cache size"; ``max_concurrency`` its "Maximum
    concurrency for max_model_len tokens per request"; ``concurrency`` the same at other
    context lengths (None above max_model_len); ``fits`` the message of vLLM's start-up
    KV-cache check when the KV cache has no memory or one request of max_model_len does not
    fit (None when it does), and ``max_model_len_fits`` the largest that would.  ``starts``
    says whether vLLM 0.19.0 would get through its start-up checks (the KV-cache check, the
    auto-fit of ``max_model_len=-1``, the free memory the utilization requests);
    ``start_error`` is then the error it stops with, as it prints it (``ValueError: ...``).
    With ``--num-gpu-blocks-override`` the block count is the override's and
    ``blocks_from_memory`` the one the memory gave; ``auto_fit`` marks a max_model_len that
    vLLM's auto-fit chose.  vLLM logs "GPU KV cache size" only when it starts.  A model with
    no KV-cache layer has no groups and a ``note``.
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
    starts: bool = True
    start_error: str | None = None
    blocks_from_memory: int | None = None
    auto_fit: bool = False
    #: the figures over the KV-cache memory's range, where the memory is a range (None: exact)
    kv_range: KVRange | None = None
    #: with ``--num-gpu-blocks-override``, where the start-up check measures the memory and not
    #: the blocks (vLLM 0.19.0): the longest request the override's blocks hold (None otherwise)
    override_max_model_len: int | None = None

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
        out.update(starts=self.starts, start_error=self.start_error)
        if self.blocks_from_memory is not None:
            out["blocks_from_memory"] = self.blocks_from_memory
        if self.auto_fit:
            out["auto_fit"] = True
        if self.kv_range is not None:
            out["kv_range"] = self.kv_range.to_dict()
        if self.override_max_model_len is not None:
            out["override_max_model_len"] = self.override_max_model_len
        return out


@attrs.frozen
class ImpactUnavailable(_Immutable):
    """The figures could not be worked out (a layer pattern enginecfg does not know, a
    config field they need that the stages do not): why, and the field when one is to blame.
    ``starts`` is the start verdict all the same where one is known (False, with vLLM's
    ``start_error``: the engine start fails before any figure), else None: not worked out."""

    error: str
    field: str | None = None
    starts: bool | None = None
    start_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.error, "field": self.field}
        if self.starts is not None:
            out.update(starts=self.starts, start_error=self.start_error)
        return out


def with_start_failure(figures: Impact | ImpactUnavailable, error: str, card: Gpu | None = None, *,
                       after_kv_check: bool = False) -> Impact | ImpactUnavailable:
    """*figures* with the verdict of an engine start that fails with *error* (vLLM's exception
    as it prints it): they do not start, and the error is the first vLLM meets, in its order:
    the worker's memory request on *card*, then building the model and the start-up step, then
    the KV-cache check, then what follows the KV planning (*after_kv_check*)."""
    last = _LAST_FAILURE[0]
    if last[0] is figures and last[1] == error and last[2] is card and last[3] is after_kv_check:
        return last[4]  # the same frozen figures failing the same way: the same answer
    if isinstance(figures, ImpactUnavailable):
        out = attrs.evolve(figures, starts=False, start_error=error)
    else:
        first = start_messages(card, figures.memory) if card is not None else None
        if first is None and after_kv_check:
            first = figures.start_error
        out = attrs.evolve(figures, starts=False, start_error=first or error)
    _LAST_FAILURE[0] = (figures, error, card, after_kv_check, out)
    return out


#: the last answer of :func:`with_start_failure` with what it was asked (figures and card are
#: frozen values compared by identity, as the memo of the figures hands the same object to
#: every run of a config): a run of the same config again fails the same way; one slot,
#: replaced whole
_LAST_FAILURE: list[tuple] = [(None, None, None, None, None)]


def format_gib(n: int) -> str:
    """Bytes in GiB as vLLM writes them in its messages: rounded to two places, no zeros
    added (``0.25``, ``139.8``)."""
    return f"{round(n / 2**30, 2)}"


def _card(gpu: str | Gpu, gpu_memory_gib: float | None) -> Gpu:
    preset = gpu if isinstance(gpu, Gpu) else find_gpu(gpu)
    return preset if gpu_memory_gib is None else custom_gpu(gpu_memory_gib, preset)


def requested_memory(total_bytes: int, utilization: float) -> int:
    """What vLLM's worker requests of a card: ``ceil(total x utilization)`` bytes."""
    return math.ceil(total_bytes * utilization)


def memory_budget(cfg, *, gpu_memory_gib: float | None = None,
                  gpu_memory_utilization: float = DEFAULT_UTILIZATION,
                  kv_cache_memory: int | None = None, specs: dict | None = None,
                  gpu: str | Gpu = DEFAULT_GPU.name, num_gpu_blocks_override: int | None = None,
                  estimate_cudagraphs: bool | None = None, enforce_eager: bool = False) -> MemoryBudget:
    """The KV-cache bytes of one GPU under vLLM 0.19.0, and how they were arrived at (see the
    module doc and :mod:`enginecfg.pipeline.models.memory`).  The estimate may leave nothing
    (0 bytes: the parts alone take more); a negative ``kv_cache_memory`` is kept as given
    (vLLM takes it, and stops at start-up)."""
    card = _card(gpu, gpu_memory_gib)
    total = card.memory_bytes
    requested = requested_memory(total, gpu_memory_utilization)
    common = {"gpu": card.name, "requested_memory": requested, "kv_cache_memory_bytes": kv_cache_memory,
              "num_gpu_blocks_override": num_gpu_blocks_override}
    if kv_cache_memory:  # vLLM: 0 and None both mean "profile the memory instead"
        return MemoryBudget(total, gpu_memory_utilization, int(kv_cache_memory), "--kv-cache-memory", None,
                            **common)
    if specs is None:
        specs = kv_specs.layer_specs(cfg)
    weights = estimate_weights(cfg, specs)
    parts = parts_019(cfg, card, weights, specs, estimate_cudagraphs=estimate_cudagraphs, enforce_eager=enforce_eager)
    common.pop("requested_memory")
    return budget_from_parts(card, gpu_memory_utilization, requested, parts, weights, **common)


def start_messages(card: Gpu, budget: MemoryBudget) -> str | None:
    """vLLM's refusal at worker start when the card's free memory is below what the
    utilization requests (``request_memory``), or None.  Only a card whose free memory at
    start was measured (:attr:`Gpu.free_at_start_bytes`) is checked."""
    free = card.free_at_start_bytes
    if free is None or free >= budget.requested_memory:
        return None
    gib = format_gib
    return (f"ValueError: Free memory on device cuda:0 ({gib(free)}/{gib(card.memory_bytes)} GiB) on "
            f"startup is less than desired GPU memory utilization ({budget.gpu_memory_utilization}, "
            f"{gib(budget.requested_memory)} GiB). Decrease GPU memory utilization or reduce GPU memory "
            f"used by other processes.")


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


_NO_AUTO_FIT = ("ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even "
                "a single token. Try increasing `gpu_memory_utilization`.")


def _backend_error(cfg, specs: dict) -> str | None:
    """vLLM's refusal of a chosen attention backend that cannot serve a layer's head size
    (the first such layer, in the order the model builds them)."""
    backend = cfg.attention_config.backend
    if backend is None:
        return None
    for spec in specs.values():
        if isinstance(spec, (kc.FullAttentionSpec, kc.SlidingWindowSpec)) \
                and not isinstance(spec, kc.MLAAttentionSpec):
            error = selected_backend_error(backend, spec.head_size)
            if error is not None:
                return error
    return None


def _overridden(kcfg: kc.KVCacheConfig, blocks: int) -> kc.KVCacheConfig:
    """``may_override_num_blocks``: the block count replaced, each tensor sized to it."""
    if not kcfg.groups:
        return kcfg
    per_block = [size // kcfg.num_blocks if kcfg.num_blocks else 0 for size in kcfg.tensor_sizes]
    if not kcfg.num_blocks:  # no whole block fitted: the tensors' page sizes from the groups
        spec = kcfg.groups[0].spec
        if isinstance(spec, kc.UniformTypeSpecs):
            per_block = [s.page_size_bytes for _, s in spec.specs]
        else:
            per_block = [spec.page_size_bytes] * max(len(g.layer_names) for g in kcfg.groups)
    return kc.KVCacheConfig(num_blocks=blocks, tensor_sizes=[p * blocks for p in per_block],
                            groups=list(kcfg.groups))


@memoised(FIGURES)
def impact(cfg, *, gpu_memory_gib: float | None = None,
           gpu_memory_utilization: float = DEFAULT_UTILIZATION, kv_cache_memory: int | None = None,
           contexts: Sequence[int] = DEFAULT_CONTEXTS,
           disable_hybrid_kv_cache_manager: bool = False, gpu: str = DEFAULT_GPU.name,
           num_gpu_blocks_override: int | None = None, auto_fit_max_model_len: bool = False,
           startup_block_size: int | None = None, estimate_cudagraphs: bool | None = None,
           enforce_eager: bool = False) -> Impact:
    """The KV-cache figures of a resolved config on one GPU (see the module doc).

    ``auto_fit_max_model_len``: the caller asked for ``--max-model-len -1`` (auto), which vLLM
    fits to the memory at start-up.  ``startup_block_size``: the attention block size the
    engine start picks (its attention backend's preference), when a start-up step decided
    one; None keeps the block size the config resolved."""
    mc, cc = cfg.model_config, cfg.cache_config
    card = _card(gpu, gpu_memory_gib)
    specs = kv_specs.layer_specs(cfg, block_size=startup_block_size)
    budget = memory_budget(cfg, gpu_memory_gib=gpu_memory_gib, gpu=gpu,
                           gpu_memory_utilization=gpu_memory_utilization,
                           kv_cache_memory=kv_cache_memory, specs=specs,
                           num_gpu_blocks_override=num_gpu_blocks_override,
                           estimate_cudagraphs=estimate_cudagraphs, enforce_eager=enforce_eager)
    available = budget.kv_cache_memory
    # vLLM's order at start-up: the worker's memory request, the model's layers (a backend
    # the caller chose must serve every attention layer), then the KV cache
    worker_error = start_messages(card, budget) or _backend_error(cfg, specs)
    groups = kc.get_kv_cache_groups(specs, disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)
    limits = _limits(cfg)
    kcfg = kc.kv_cache_config_from_groups(groups, max(available, 0))
    if not groups:
        # attention-free (or encoder-only): vLLM checks no KV memory and needs no block
        return Impact(memory=budget, max_model_len=mc.max_model_len,
                      max_num_batched_tokens=limits.max_num_batched_tokens, groups=(),
                      num_blocks=kcfg.num_blocks, kv_tokens=0, max_concurrency=None, concurrency={},
                      max_model_len_fits=mc.max_model_len, fits=None, bytes_per_token=0,
                      min_request_bytes=0, request_bytes=None, padding=None, block_rounding=None,
                      prefix_cache_granularity=None,
                      note="no layer keeps KV cache (attention-free or encoder-only)",
                      starts=worker_error is None, start_error=worker_error)
    max_len = mc.max_model_len
    auto_fit_error = None
    if auto_fit_max_model_len:
        fitted = kc.group_estimate_max_model_len(groups, limits, available)
        if fitted <= 0:
            auto_fit_error = _NO_AUTO_FIT
        elif fitted < max_len:
            max_len = fitted
            limits = dataclasses.replace(limits, max_model_len=max_len)
    fits = kc.check_groups_fit(groups, limits, available) if auto_fit_error is None else None
    start_error = worker_error or auto_fit_error or (f"ValueError: {fits}" if fits else None)
    blocks_from_memory = None
    used = sum(kcfg.tensor_sizes)
    override_len = None
    if num_gpu_blocks_override is not None:
        blocks_from_memory = kcfg.num_blocks
        kcfg = _overridden(kcfg, num_gpu_blocks_override)
        override_len = kc.group_estimate_max_model_len(groups, limits, sum(kcfg.tensor_sizes))
    group_size = max(len(g.layer_names) for g in groups)
    rows = [_group_figures(g, group_size, limits) for g in groups]
    mamba_pages = [s for s in specs.values() if isinstance(s, kc.MambaSpec)]
    mamba_pad = None
    if mamba_pages:
        m = mamba_pages[0]
        extra = m.page_size_bytes - m.real_page_size_bytes
        mamba_pad = MambaPadding(m.real_page_size_bytes, m.page_size_bytes, extra,
                                 _pct(extra, m.real_page_size_bytes))
    pad_layers = kc.padding_layers(groups)
    concurrency = {n: kc.max_concurrency(kcfg, _limits(cfg, n)) if n <= max_len else None
                   for n in contexts}
    granularity = None
    if cc.enable_prefix_caching:
        attention = [g.spec.block_size for g in groups if not isinstance(g.spec, kc.MambaSpec)]
        granularity = min(attention) if attention else cc.mamba_block_size
    kv_range = None
    if budget.is_range:
        def at(memory: int) -> tuple:
            k = kc.kv_cache_config_from_groups(groups, max(memory, 0))
            if num_gpu_blocks_override is not None:
                k = _overridden(k, num_gpu_blocks_override)
            conc = {n: kc.max_concurrency(k, _limits(cfg, n)) if n <= max_len else None for n in contexts}
            ok = worker_error is None and auto_fit_error is None and kc.check_groups_fit(groups, limits, memory) is None
            return (k.num_blocks, kc.kv_tokens(k), kc.max_concurrency(k, limits), conc,
                    kc.group_estimate_max_model_len(groups, limits, memory), ok)
        lo, hi = at(budget.kv_cache_memory_low), at(budget.kv_cache_memory_high)
        kv_range = KVRange((budget.kv_cache_memory_low, budget.kv_cache_memory_high), (lo[0], hi[0]), (lo[1], hi[1]),
                           (lo[2], hi[2]), {n: (None if lo[3][n] is None else (lo[3][n], hi[3][n])) for n in contexts},
                           (lo[4], hi[4]), (lo[5], hi[5]))
    return Impact(
        memory=budget,
        max_model_len=max_len,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        groups=rows,
        num_blocks=kcfg.num_blocks,
        kv_tokens=kc.kv_tokens(kcfg),
        max_concurrency=kc.max_concurrency(kcfg, limits),
        concurrency=concurrency,
        max_model_len_fits=kc.group_estimate_max_model_len(groups, limits, available),
        fits=fits,
        bytes_per_token=sum(r.bytes_per_token or 0 for r in rows),
        min_request_bytes=kc.group_memory_usage_bytes(groups, _limits(cfg, 1)),
        request_bytes=kc.group_memory_usage_bytes(groups, limits),
        padding=Padding(mamba_pad, pad_layers, _pct(pad_layers, sum(len(g.layer_names) for g in groups))),
        block_rounding=BlockRounding(available - used, _pct(available - used, available)),
        prefix_cache_granularity=granularity,
        starts=start_error is None,
        start_error=start_error,
        blocks_from_memory=blocks_from_memory,
        auto_fit=auto_fit_max_model_len and max_len != mc.max_model_len,
        kv_range=kv_range,
        override_max_model_len=override_len,
    )


def concurrency_curve(cfg, options: "ImpactOptions", contexts: Sequence[int], *,
                      auto_fit_max_model_len: bool = False, startup_block_size: int | None = None,
                      disable_hybrid_kv_cache_manager: bool = False) -> tuple[tuple[int, float, int], ...]:
    """``(context, requests that fit, KV-cache blocks one request takes)`` at each of
    *contexts* up to max_model_len, on the memory *options* describe: the curve
    ``explain --plot`` and ``plan --plot`` draw (the same arithmetic as :func:`impact`)."""
    fig = impact(cfg, gpu_memory_gib=options.gpu_memory_gib, gpu=options.gpu,
                 gpu_memory_utilization=options.gpu_memory_utilization,
                 kv_cache_memory=options.kv_cache_memory,
                 num_gpu_blocks_override=options.num_gpu_blocks_override, contexts=(),
                 auto_fit_max_model_len=auto_fit_max_model_len, startup_block_size=startup_block_size,
                 disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
                 estimate_cudagraphs=options.estimate_cudagraphs, enforce_eager=options.enforce_eager)
    if not fig.groups:
        return ()
    specs = kv_specs.layer_specs(cfg, block_size=startup_block_size)
    groups = kc.get_kv_cache_groups(specs, disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)
    kcfg = kc.kv_cache_config_from_groups(groups, max(fig.memory.kv_cache_memory, 0))
    if options.num_gpu_blocks_override is not None:
        kcfg = _overridden(kcfg, options.num_gpu_blocks_override)
    page = groups[0].spec.page_size_bytes * max(len(g.layer_names) for g in groups)
    out = []
    for n in contexts:
        if n > fig.max_model_len:
            break
        limits = _limits(cfg, n)
        pages = kc.group_memory_usage_bytes(groups, limits) // page
        out.append((n, kc.max_concurrency(kcfg, limits), pages))
    return tuple(out)
