"""Findings: what in a run's KV-cache figures deserves a sentence, and which change caused it.

Each finding names its figures and its cause: the stage's change (stage, field, old and new
value, vLLM's reason) or, when no stage changed the field, the engine argument the caller gave.
The thresholds are enginecfg's judgement, not vLLM's: a hybrid attention block above
:data:`LARGE_BLOCK` tokens, Mamba page padding above :data:`PADDING_PCT` percent of the state.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

import attrs

from enginecfg.pipeline.models.capacity import Impact, ImpactUnavailable
from enginecfg.pipeline.document import RunResult

__all__ = ["LARGE_BLOCK", "PADDING_PCT", "ChangeCause", "ArgumentCause", "Finding", "findings"]

_GIB = 2**30
#: a hybrid block larger than this pins a large fixed footprint per request
LARGE_BLOCK = 1024
#: Mamba page padding above this share of the state is worth a sentence
PADDING_PCT = 5.0


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class ChangeCause:
    """A stage's change behind a finding."""

    stage: str
    field: str
    old: Any
    new: Any
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "field": self.field, "old": self.old, "new": self.new,
                "reason": self.reason}


@attrs.frozen
class ArgumentCause:
    """The engine argument behind a finding, by its ``vllm serve`` flag, and its value."""

    engine_argument: str
    value: Any

    def to_dict(self) -> dict[str, Any]:
        return {"engine_argument": self.engine_argument, "value": self.value}


@attrs.frozen
class Finding:
    """One finding: a stable ``id`` (``large-hybrid-block``, ``does-not-fit``, ...), the
    sentence, the figures it quotes, and what caused it (None: nothing the caller chose)."""

    id: str
    message: str
    figures: Mapping[str, Any] = attrs.field(converter=_read_only)
    caused_by: ChangeCause | ArgumentCause | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "message": self.message, "figures": dict(self.figures),
                "caused_by": self.caused_by.to_dict() if self.caused_by is not None else None}


def _change(result: RunResult, field: str) -> ChangeCause | None:
    found = result.changes_for(field)
    if not found:
        return None
    c = found[-1]
    return ChangeCause(c.stage, c.field, c.old, c.new, c.reason)


def _cause(result: RunResult, field: str, arg: str, flag: str) -> ChangeCause | ArgumentCause | None:
    """The change that set ``field``, else the engine argument that did."""
    change = _change(result, field)
    if change is not None:
        return change
    given = result.config.engine_args.get(arg)
    if given is not None:
        return ArgumentCause(flag, given)
    return None


def _mib(n: int) -> str:
    """Bytes in MiB, or in KiB below one MiB."""
    if n < 2**20:
        return f"{n / 2**10:,.1f} KiB"
    return f"{n / 2**20:,.1f} MiB"


def _start_finding(result: RunResult) -> list[Finding]:
    """The engine would not start (the ``startup`` fact's failure): vLLM's reason."""
    startup = result.facts.get("startup")
    failure = getattr(startup, "failure", None)
    if failure is None:
        return []
    what = "build the model class" if failure.step == "build" else "start the engine"
    text = f"{failure.vllm_type}: {failure.message}" if failure.message else failure.vllm_type
    return [Finding("would-not-start",
                    f"vLLM {startup.release} resolves this config but would fail to {what} "
                    f"({text}, in {failure.where}): {failure.reason}.", failure.to_dict())]


def findings(result: RunResult) -> tuple[Finding, ...]:
    """The findings of one resolved run, each with its figures and the change (or argument)
    behind it."""
    impact = result.facts.get("impact")
    if isinstance(impact, ImpactUnavailable):
        return (*_start_finding(result), Finding("no-impact", f"KV-cache figures unavailable: {impact.error}", {}))
    if not isinstance(impact, Impact):
        impact = None  # the impact stage was left out: only what the config itself shows
    cfg = result.config
    mc, cc = cfg.model_config, cfg.cache_config
    out: list[Finding] = _start_finding(result)
    groups = impact.groups if impact is not None else ()
    attn_layers = sum(g.num_layers for g in groups if not g.is_mamba)

    backend = _change(result, "attention_config.backend")
    if backend is not None and backend.new == "TRITON_ATTN":
        out.append(Finding(
            "forced-triton-attn",
            f"The attention backend is forced to TRITON_ATTN for every one of the "
            f"{attn_layers} attention layers ({backend.reason}). Published reports "
            f"show Gemma 4 decoding at about a tenth of the expected speed this way; "
            f"benchmark before serving, or pass --attention-backend to choose.",
            {"backend": "TRITON_ATTN", "attention_layers": attn_layers}, backend))

    block = impact.attention_block_size if impact is not None else None
    if mc.is_hybrid and block is not None and block > LARGE_BLOCK:
        slots = max(g.num_layers for g in groups)
        page = groups[0].page_size_bytes
        pages = impact.min_request_bytes // page
        figures = {"block_size": block, "min_request_bytes": impact.min_request_bytes,
                   "min_pages_per_request": pages, "groups": len(groups), "layer_slots": slots,
                   "page_size_bytes": page, "prefix_cache_granularity": impact.prefix_cache_granularity}
        text = (f"The hybrid alignment made attention blocks of {block:,} tokens (> {LARGE_BLOCK:,}). "
                f"Every request, however short, pins at least {pages:,} pages of "
                f"{_mib(page)} ({len(groups)} KV-cache groups x {slots} "
                f"layer slots): {_mib(impact.min_request_bytes)}")
        if cc.enable_prefix_caching:
            text += (f"; prefix caching reuses prompts only in whole blocks of {block:,} tokens, "
                     f"so a shared prefix shorter than that is never reused")
        out.append(Finding("large-hybrid-block", text + ".", figures,
                           _cause(result, "cache_config.block_size", "block_size", "--block-size")))

    ssm_dtypes = (result.facts.get("pages") or {}).get("mamba_state_dtypes") or []
    kind = getattr(mc.arch_info, "state_kind", None)
    if len(ssm_dtypes) >= 2 and kind in ("mamba2", "mamba1", "gated_delta_net") \
            and ssm_dtypes[-1] in ("float16", "bfloat16"):
        out.append(Finding(
            "16-bit-ssm-state",
            f"The recurrent (SSM) state is kept in {ssm_dtypes[-1]}. It is updated at "
            f"every token, so rounding errors accumulate over long sequences; "
            f"float32 (--mamba-ssm-cache-dtype float32) is the safe choice.",
            {"ssm_state_dtype": ssm_dtypes[-1]},
            _cause(result, "cache_config.mamba_ssm_cache_dtype", "mamba_ssm_cache_dtype",
                   "--mamba-ssm-cache-dtype")))

    if impact is None:
        return tuple(out)
    padding = impact.padding
    pad = padding.mamba if padding is not None else None
    if pad is not None and pad.percent > PADDING_PCT:
        out.append(Finding(
            "mamba-padding",
            f"Each Mamba state page is padded by {_mib(pad.bytes)} "
            f"({pad.percent:.2f}% of the {_mib(pad.state_bytes)} state) to the "
            f"attention page size: that share of the state memory holds nothing.",
            pad.to_dict(), _change(result, "cache_config.mamba_page_size_padded")))
    layer_pct = (padding.layer_percent if padding is not None else None) or 0.0
    if layer_pct > PADDING_PCT:
        out.append(Finding(
            "layer-padding",
            f"The KV-cache groups are padded by {padding.layers} empty layer "
            f"slots ({layer_pct:.2f}% of the layers): memory reserved for no layer.",
            {"layers": padding.layers, "percent": layer_pct}))
    mem = impact.memory
    if mem.kv_cache_memory == 0 and mem.source == "estimate":
        usable = int(mem.gpu_memory_bytes * mem.gpu_memory_utilization)
        weights = mem.weights.bytes_per_gpu
        out.append(Finding(
            "no-kv-memory",
            f"The weights alone, an estimated {weights / _GIB:,.1f} GiB per GPU, exceed the "
            f"{usable / _GIB:,.1f} GiB vLLM may use ({mem.gpu_memory_bytes / _GIB:g} GiB x "
            f"{mem.gpu_memory_utilization:g}): no memory is left for the KV cache; raise "
            f"--tensor-parallel-size or use a quantised checkpoint.",
            {"weights_per_gpu": weights, "usable_bytes": usable},
            _cause(result, "parallel_config.tensor_parallel_size", "tensor_parallel_size",
                   "--tensor-parallel-size")))
    elif impact.fits:
        out.append(Finding(
            "does-not-fit",
            f"One request of max_model_len {mc.max_model_len:,} tokens does not fit; "
            f"the largest that fits is {impact.max_model_len_fits:,} "
            f"(vLLM would refuse to start: {impact.fits.split('. ')[0]}).",
            {"max_model_len": mc.max_model_len, "max_model_len_fits": impact.max_model_len_fits},
            _cause(result, "model_config.max_model_len", "max_model_len", "--max-model-len")))
    return tuple(out)
