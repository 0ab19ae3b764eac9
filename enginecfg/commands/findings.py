"""Findings: what in a run's KV-cache figures deserves a sentence, and which change caused it.

Each finding names its figures and its cause: the stage's change (stage, field, old and new
value, vLLM's reason) or, when no stage changed the field, the engine argument the caller gave.
The thresholds are enginecfg's judgement, not vLLM's: a hybrid attention block above
:data:`LARGE_BLOCK` tokens, Mamba page padding above :data:`PADDING_PCT` percent of the state.

Each finding says which vLLM releases it holds for (:data:`RULE_OF`: the dated rule it follows;
``()``: every release), and a run is given only the findings of the release it speaks for: the
Gemma 4 decode-speed report was measured on the forced Triton backend, which rule C4a replaces by
FlashAttention 4 where the GPU has it; a release that decides at engine start (C8) aligns hybrid
blocks there, to the attention backend's kernel block, and its start-up decisions (the
``startup`` fact) are the cause a finding names there.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

import attrs

from enginecfg.pipeline.models.capacity import Impact, ImpactUnavailable
from enginecfg.pipeline import releases
from enginecfg.pipeline.document import RunResult

__all__ = ["LARGE_BLOCK", "PADDING_PCT", "SLOW_TRITON_ISSUE", "SLOW_TRITON_URL", "RULE_OF", "holds", "start_decision",
           "ChangeCause", "ArgumentCause", "Finding", "findings"]

_GIB = 2**30
#: a hybrid block larger than this pins a large fixed footprint per request
LARGE_BLOCK = 1024
#: Mamba page padding above this share of the state is worth a sentence
PADDING_PCT = 5.0
#: the vLLM issue that measured Gemma 4's decode speed under the forced Triton backend
SLOW_TRITON_ISSUE = 38887
SLOW_TRITON_URL = "https://github.com/vllm-project/vllm/issues/38887"
#: the dated rule each release-bound finding follows: finding -> (rule id, whether the finding
#: holds where the rule is in force); a finding not named here holds for every release
RULE_OF: Mapping[str, tuple[str, bool]] = MappingProxyType({
    "forced-triton-attn": ("C4a", False),      # the decode-speed report: Gemma 4 forced to TRITON_ATTN
    "blocks-override": ("K5a", False),         # its log line is the one before K5a's
    "triton-attn-without-fa4": ("C4a", True),  # C4a's Gemma 4 rule: TRITON_ATTN only without FA4
    "mamba-cache-mode-ignored": ("C7f", True),  # the flag lost its effect
})


def holds(finding_id: str, release: releases.Release) -> bool:
    """Whether the finding *finding_id* holds for *release* (see :data:`RULE_OF`)."""
    rule = RULE_OF.get(finding_id)
    return rule is None or release.has(rule[0]) == rule[1]
#: the stage that makes each start-up decision, by the rule the decision names
_STARTUP_STAGES = {"S1": "startup-block-size", "K6": "engine-start"}


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

    @property
    def releases(self) -> tuple[str, ...]:
        """The vLLM releases this finding holds for (``()``: every release)."""
        if self.id not in RULE_OF:
            return ()
        return tuple(r.name for r in releases.all_releases() if holds(self.id, r))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "message": self.message, "figures": dict(self.figures),
                "caused_by": self.caused_by.to_dict() if self.caused_by is not None else None,
                "releases": list(self.releases)}


def _change(result: RunResult, field: str) -> ChangeCause | None:
    found = result.changes_for(field)
    if not found:
        return None
    c = found[-1]
    return ChangeCause(c.stage, c.field, c.old, c.new, c.reason)


def _startup_change(result: RunResult, field: str) -> ChangeCause | None:
    """The last start-up decision on ``cache_config.<name>`` of a release that decides it when
    the engine starts (the ``startup`` fact of the run's own release), as a change."""
    startup = start_decision(result)
    if startup is None:
        return None
    name = field.split(".", 1)[1]
    found = [d for d in getattr(startup, "decisions", ()) if d.field == name]
    if not found:
        return None
    d = found[-1]
    stage = _STARTUP_STAGES.get(d.rule or "", "hybrid-alignment")
    return ChangeCause(stage, field, d.old, d.new, d.reason)


def _release(result: RunResult) -> releases.Release:
    """The release the run spoke for (a pack registered without a release of its own: the first)."""
    name = result.vllm_version
    return releases.get(name) if releases.known(name) else releases.first()


def start_decision(result: RunResult) -> Any:
    """The run's ``startup`` fact when its release decides the block size at engine start (the
    fact of a run whose start-up step ran: it carries decisions); None otherwise."""
    startup = result.facts.get("startup")
    if not _release(result).decides_at_engine_start or not hasattr(startup, "decisions"):
        return None
    return startup


def _cause(result: RunResult, field: str, arg: str, flag: str) -> ChangeCause | ArgumentCause | None:
    """The change that set ``field`` (a start-up decision, where the release makes one), else
    the engine argument that did."""
    change = _startup_change(result, field) or _change(result, field)
    if change is not None:
        return change
    given = result.config.engine_args.get(arg)
    if given is not None:
        return ArgumentCause(flag, given)
    return None


def _mib(n: int) -> str:
    """Bytes in MiB, in KiB below one MiB, in GiB from 10 GiB on."""
    if n < 2**20:
        return f"{n / 2**10:,.1f} KiB"
    if n >= 10 * _GIB:
        return f"{n / _GIB:,.2f} GiB"
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
                    f"vLLM {_release(result)} resolves this config but would fail to {what} "
                    f"({text}, in {failure.where}): {failure.reason}.", failure.to_dict())]


def findings(result: RunResult) -> tuple[Finding, ...]:
    """The findings of one resolved run that hold for the release it speaks for, each with its
    figures and the change (or argument) behind it."""
    release = _release(result)
    return tuple(f for f in _all_findings(result) if holds(f.id, release))


def _fallback_finding(result: RunResult) -> list[Finding]:
    """The release registers none of the config's architectures: the Transformers backend runs it."""
    fallback = result.config.model_config.arch_fallback
    if fallback is None:
        return []
    return [Finding("transformers-backend", fallback.note() + ".",
                    {"architecture": fallback.architecture, "backend_class": fallback.backend_class,
                     "runs": fallback.runs})]


def _all_findings(result: RunResult) -> tuple[Finding, ...]:
    impact = result.facts.get("impact")
    if isinstance(impact, ImpactUnavailable):
        start = _start_finding(result)  # where it would not start, the missing figures do not matter
        return (*_fallback_finding(result),
                *(start or [Finding("no-impact", f"KV-cache figures unavailable: {impact.error}", {})]))
    if not isinstance(impact, Impact):
        impact = None  # the impact stage was left out: only what the config itself shows
    cfg = result.config
    mc, cc = cfg.model_config, cfg.cache_config
    out: list[Finding] = _fallback_finding(result) + _start_finding(result)
    groups = impact.groups if impact is not None else ()
    attn_layers = sum(g.num_layers for g in groups if not g.is_mamba)

    backend = _change(result, "attention_config.backend")
    if backend is not None and backend.new == "TRITON_ATTN":
        out.append(Finding(
            "forced-triton-attn",
            f"The attention backend is forced to TRITON_ATTN for every one of the "
            f"{attn_layers} attention layers ({backend.reason}). vLLM issue #{SLOW_TRITON_ISSUE} "
            f"({SLOW_TRITON_URL}) reports Gemma 4 E4B on vLLM 0.19.0 decoding at about 9 tokens/s "
            f"this way on an RTX 4090, against 100+ for a Llama model of similar size: benchmark "
            f"before serving. --attention-backend chooses another backend only if it serves every "
            f"head size of the model (FLASH_ATTN and FLASHINFER stop at 256).",
            {"backend": "TRITON_ATTN", "attention_layers": attn_layers, "source": SLOW_TRITON_URL}, backend))
        gpu = (result.gpu or {}).get("name", "GPU")
        capability = (result.gpu or {}).get("capability")
        out.append(Finding(
            "triton-attn-without-fa4",
            f"vLLM {_release(result)} runs every one of the {attn_layers} attention layers on TRITON_ATTN "
            f"({backend.reason}): the layers' head sizes differ, and FlashAttention 4, which takes both, is "
            f"not available on the {gpu}" + (f" (compute capability {capability})" if capability else "")
            + ". On Hopper and Blackwell GPUs it runs FlashAttention 4 instead; the Triton kernels are "
              "the slower path here: benchmark before serving.",
            {"backend": "TRITON_ATTN", "attention_layers": attn_layers, "gpu": gpu}, backend))

    block = impact.attention_block_size if impact is not None else None
    if mc.is_hybrid and block is not None and block > LARGE_BLOCK:
        slots = max(g.num_layers for g in groups)
        page = groups[0].page_size_bytes
        pages = impact.min_request_bytes // page
        figures = {"block_size": block, "min_request_bytes": impact.min_request_bytes,
                   "min_pages_per_request": pages, "groups": len(groups), "layer_slots": slots,
                   "page_size_bytes": page, "prefix_cache_granularity": impact.prefix_cache_granularity}
        if not _release(result).decides_at_engine_start:
            made = f"The hybrid alignment made attention blocks of {block:,} tokens (> {LARGE_BLOCK:,})"
        else:
            made = (f"vLLM {_release(result)} aligns the attention blocks when the engine starts, after the "
                    f"weights are loaded, to {block:,} tokens (> {LARGE_BLOCK:,}): a multiple of the attention "
                    f"backend's kernel block whose page holds one Mamba state")
        text = (f"{made}. "
                f"Every request, however short, pins at least {pages:,} pages of "
                f"{_mib(page)} ({len(groups)} KV-cache group{'' if len(groups) == 1 else 's'} x {slots} "
                f"layer slot{'' if slots == 1 else 's'}): {_mib(impact.min_request_bytes)}")
        if cc.enable_prefix_caching:
            text += (f"; prefix caching reuses prompts only in whole blocks of {block:,} tokens, "
                     f"so a shared prefix shorter than that is never reused")
        out.append(Finding("large-hybrid-block", text + ".", figures,
                           _cause(result, "cache_config.block_size", "block_size", "--block-size")))

    ssm_dtypes = list((result.facts.get("pages") or {}).get("mamba_state_dtypes") 
                     or (_state_dtypes(cfg) if _release(result).decides_at_engine_start else ()))
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

    given_mode = cfg.engine_args.get("mamba_cache_mode")
    if given_mode is not None and "mamba_cache_mode" in _release(result).ignored_arguments:
        out.append(Finding(
            "mamba-cache-mode-ignored",
            f"--mamba-cache-mode {given_mode} has no effect in vLLM {_release(result)} (it warns that the flag "
            f"is deprecated): the Mamba cache mode follows prefix caching, 'align' with it and 'none' without; "
            f"'all' no longer exists (removed in {releases.brought_by('C7e').short}). This run uses '{cc.mamba_cache_mode}'.",
            {"given": given_mode, "mamba_cache_mode": cc.mamba_cache_mode},
            ArgumentCause("--mamba-cache-mode", given_mode)))
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
            pad.to_dict(), _startup_change(result, "cache_config.mamba_page_size_padded")
            or _change(result, "cache_config.mamba_page_size_padded")))
    layer_pct = (padding.layer_percent if padding is not None else None) or 0.0
    if layer_pct > PADDING_PCT:
        out.append(Finding(
            "layer-padding",
            f"The KV-cache groups are padded by {padding.layers} empty layer "
            f"slot{'' if padding.layers == 1 else 's'} ({layer_pct:.2f}% of the layers): memory reserved for "
            f"no layer.",
            {"layers": padding.layers, "percent": layer_pct}))
    out += _start_findings(result, impact)
    override = impact.memory.num_gpu_blocks_override
    if override is not None and impact.blocks_from_memory is not None and impact.starts:
        page = impact.groups[0].page_size_bytes * max(g.num_layers for g in impact.groups) if impact.groups else 0
        wanted = page * override
        text = (f"--num-gpu-blocks-override {override:,} replaces the {impact.blocks_from_memory:,} blocks "
                f"the memory gives (vLLM logs \"Overriding num_gpu_blocks={impact.blocks_from_memory} with "
                f"num_gpu_blocks_override={override}\"): {_mib(wanted)} of KV cache")
        if wanted > impact.memory.kv_cache_memory:
            text += (f", more than the {_mib(impact.memory.kv_cache_memory)} the memory leaves it: vLLM "
                     f"allocates it all the same, and the GPU may run out of memory at start-up")
        out.append(Finding("blocks-override", text + ".",
                           {"num_gpu_blocks_override": override, "blocks_from_memory": impact.blocks_from_memory,
                            "override_bytes": wanted, "kv_cache_memory": impact.memory.kv_cache_memory},
                           ArgumentCause("--num-gpu-blocks-override", override)))
    return tuple(out)


def _start_findings(result: RunResult, impact: Impact) -> list[Finding]:
    """Why the release's vLLM would stop at start-up, when it would: one finding, named after the
    check that stops it, quoting the error as vLLM prints it."""
    if impact.starts:
        return []
    mc = result.config.model_config
    mem = impact.memory
    error = impact.start_error or ""
    figures: dict[str, Any] = {"start_error": error, "max_model_len": impact.max_model_len,
                               "max_model_len_fits": impact.max_model_len_fits}
    quote = f"vLLM {_release(result)} would stop at start-up with {error}"
    if error.startswith("ValueError: Free memory on device"):
        figures.update(requested_memory=mem.requested_memory, gpu=mem.gpu,
                       gpu_memory_utilization=mem.gpu_memory_utilization)
        return [Finding(
            "free-memory-at-start",
            f"--gpu-memory-utilization {mem.gpu_memory_utilization:g} asks for {mem.requested_memory / _GIB:,.2f} "
            f"GiB of the {mem.gpu}'s {mem.gpu_memory_bytes / _GIB:,.2f} GiB, more than is free once a process "
            f"has created its CUDA context (as measured on an idle card; other processes on the GPU leave "
            f"less): {quote}", figures,
            ArgumentCause("--gpu-memory-utilization", mem.gpu_memory_utilization))]
    if error.startswith("ValueError: Selected backend"):
        backend = result.config.attention_config.backend
        bad = sorted({g.head_size for g in impact.attention_groups
                      if g.head_size is not None and f"AttentionBackendEnum.{backend} " in error
                      and _unserved(backend, g.head_size)})
        layers = sum(g.num_layers for g in impact.attention_groups if g.head_size in bad)
        figures.update(backend=backend, head_sizes=bad, layers=layers)
        return [Finding(
            "backend-head-size",
            f"The attention backend {backend} cannot serve attention layers of head size "
            f"{', '.join(map(str, bad))} ({layers} layers of this model): {quote}",
            figures, _cause(result, "attention_config.backend", "attention_backend", "--attention-backend"))]
    if mem.kv_cache_memory <= 0 or error.startswith("ValueError: Cannot auto-fit"):
        if mem.source == "estimate":
            weights = mem.weights.bytes_per_gpu
            taken = sum(p.bytes for p in mem.parts if p.subtracted)
            figures.update(weights_per_gpu=weights, usable_bytes=mem.requested_memory, taken_bytes=taken)
            where = (f"{mem.requested_memory / _GIB:,.1f} GiB vLLM may use ({mem.gpu}: "
                     f"{mem.gpu_memory_bytes / _GIB:,.2f} GiB x {mem.gpu_memory_utilization:g})")
            if weights >= mem.requested_memory or taken <= weights:
                head = f"The weights alone, an estimated {weights / _GIB:,.1f} GiB per GPU, exceed the {where}"
            else:
                others = ", ".join(f"{p.title} {p.bytes / _GIB:,.2f} GiB" for p in mem.parts
                                   if p.subtracted and p.name != "weights" and p.bytes)
                head = (f"The weights, an estimated {weights / _GIB:,.1f} GiB per GPU, and what vLLM's worker takes "
                        f"besides ({others}) exceed the {where}")
            text = (f"{head}: no memory is left for the KV cache (raise --tensor-parallel-size, use a larger GPU "
                    f"or a quantised checkpoint); {quote}")
            cause = _cause(result, "parallel_config.tensor_parallel_size", "tensor_parallel_size",
                           "--tensor-parallel-size")
        else:
            figures.update(kv_cache_memory_bytes=mem.kv_cache_memory_bytes)
            text = (f"--kv-cache-memory-bytes {mem.kv_cache_memory_bytes:,} leaves no memory for the KV "
                    f"cache: {quote}")
            cause = ArgumentCause("--kv-cache-memory-bytes", mem.kv_cache_memory_bytes)
        return [Finding("no-kv-memory", text, figures, cause)]
    if impact.fits is None:  # the engine start fails before the KV-cache check: would-not-start says why
        return []
    fits = impact.max_model_len_fits
    return [Finding(
        "does-not-fit",
        f"One request of max_model_len {impact.max_model_len:,} tokens does not fit in the "
        f"{mem.kv_cache_memory / _GIB:,.2f} GiB of KV cache; the largest that fits is {fits:,} "
        f"(--max-model-len {fits}): {quote}", figures,
        _cause(result, "model_config.max_model_len", "max_model_len", "--max-model-len"))]


def _state_dtypes(cfg) -> tuple[str, ...]:
    """The Mamba state's dtypes where no ``pages`` fact states them (a release that lays pages
    out at engine start)."""
    from enginecfg.pipeline.models import mamba_state

    mc, cc = cfg.model_config, cfg.cache_config
    info = mc.arch_info
    if info is None or info.state_kind is None:
        return ()
    return tuple(mamba_state.state_dtypes(info, mc.dtype, cc.mamba_cache_dtype, cc.mamba_ssm_cache_dtype))


def _unserved(backend: str, head_size: int) -> bool:
    from enginecfg.pipeline.models.gpus import backend_serves

    return backend_serves(backend, head_size) is False
