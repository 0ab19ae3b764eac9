"""``plan``: the KV-cache figures of many settings side by side, the best ones marked.

Every setting of a grid (tensor-parallel sizes, KV dtypes, block sizes, Mamba cache modes, or
any other engine argument) is resolved through the same path as ``run`` and ``explain``: the
model's source is opened once (a folder, a ``config.json``, a Hugging Face repo id, with the
safetensors headers and sentence-transformers settings vLLM reads), and each setting is one
run of one pipeline over it.  A setting vLLM refuses is a row with its error, not a failure of
the plan.  Three objectives are marked: the most concurrent requests at ``context`` tokens,
the largest context that fits, and the finest prefix-cache granularity (the smallest block);
a setting vLLM would not start with is never marked best.

Beside engine arguments a grid takes the memory the figures assume as axes: ``gpu`` (the GPU
presets of :mod:`enginecfg.pipeline.models.gpus`), ``gpu_memory_gib``,
``gpu_memory_utilization``, ``kv_cache_memory`` and ``num_gpu_blocks_override``.  Each row says
what vLLM resolved for every axis (``resolved``: the Mamba cache mode it uses, the block size
it ends up with), which may differ from the setting asked.

A plan speaks for one vLLM release (``vllm_version=``, else ``$ENGINECFG_VLLM_VERSION``, else
0.19.0), or for several: ``vllm_version`` is also an axis of the grid
(``{"vllm_version": ["0.19.0", "0.34.0"]}``), each row resolved, started and planned by its
release's rules, and saying which release it speaks for.
"""

from __future__ import annotations

import itertools
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import attrs

from enginecfg.commands._memory import (MemoryLike, curve, figures_pipeline, memory_options, release_of, split_memory,
                                       used_memory, utilization_given)
from enginecfg.commands.findings import Finding, findings, start_decision
from enginecfg.pipeline.engine_args import ENGINE_ARGS
from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError
from enginecfg.pipeline.models.capacity import DEFAULT_CONTEXTS, Impact, ImpactOptions
from enginecfg.pipeline.document import RunResult
from enginecfg.pipeline.hf import open_source
from enginecfg.pipeline.models.gpus import find_gpu
from enginecfg.pipeline import releases
from enginecfg.pipeline.releases import version_key
from enginecfg.pipeline.suggest import did_you_mean

__all__ = ["OBJECTIVES", "DEFAULT_CONTEXT", "MEMORY_AXES", "RELEASE_AXIS", "PlanRow", "Plan", "plan"]

#: what ``best`` marks: the most requests at the context, the largest context, the finest reuse
OBJECTIVES = ("concurrency", "context", "granularity")
#: the context length of the concurrency objective when none is given
DEFAULT_CONTEXT = 8192
#: the grid axes that are not engine arguments but the memory the figures assume
MEMORY_AXES = ("gpu", "gpu_memory_gib", "gpu_memory_utilization", "kv_cache_memory", "num_gpu_blocks_override")
#: the grid axis of the vLLM releases (``vllm_version``): each row runs its release's rules
RELEASE_AXIS = "vllm_version"


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class PlanRow:
    """One setting of the grid (only the grid's engine arguments; a ``None`` value is left
    out): its error, or its figures.  ``block_size`` is the attention block vLLM ends up with
    (which is also the prefix-cache ``granularity``), ``concurrency`` the requests of the
    plan's context length that fit at once; ``result`` and ``impact`` hold the whole run."""

    setting: Mapping[str, Any] = attrs.field(converter=_read_only)
    error: str | None = None
    result: RunResult | None = None
    findings: tuple[Finding, ...] = attrs.field(default=(), converter=tuple)
    block_size: int | None = None
    concurrency: float | None = None
    resolved: Mapping[str, Any] = attrs.field(factory=dict, converter=_read_only)
    memory: ImpactOptions | None = None
    vllm_version: str = attrs.field(factory=lambda: releases.first().name)
    #: an error row's exit status as ``run`` maps it (1 rejected, 2 bad input); 0 for a row with figures
    exit_code: int = 0

    @property
    def starts(self) -> bool | None:
        """Whether the row's vLLM release would start with this setting (None: an error row)."""
        imp = self.impact
        return imp.starts if imp is not None else None

    def curve(self, contexts=None) -> tuple[tuple[int, float, int], ...]:
        """This setting's concurrency curve (see :meth:`enginecfg.commands.Explanation.curve`);
        empty for an error row."""
        if not self.ok or self.result is None:
            return ()
        return curve(self.result, self.memory, contexts)

    @property
    def differs(self) -> tuple[str, ...]:
        """The axes whose resolved value is not the setting asked."""
        return tuple(n for n, v in self.setting.items() if n in self.resolved and self.resolved[n] != v)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def impact(self) -> Impact | None:
        return self.result.facts.get("impact") if self.result is not None and self.ok else None

    @property
    def granularity(self) -> int | None:
        return self.block_size

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"setting": dict(self.setting), "vllm_version": self.vllm_version}
        if self.error is not None:
            out["error"] = self.error
            return out
        imp = self.impact
        mem = imp.memory
        out.update(resolved=dict(self.resolved), starts=imp.starts, start_error=imp.start_error, gpu=mem.gpu,
                   block_size=self.block_size, kv_tokens=imp.kv_tokens, concurrency=self.concurrency,
                   max_concurrency=imp.max_concurrency, max_model_len=imp.max_model_len,
                   max_model_len_fits=imp.max_model_len_fits, kv_cache_memory=mem.kv_cache_memory,
                   weights_per_gpu=mem.weights.bytes_per_gpu if mem.weights is not None else None,
                   granularity=self.granularity, findings=[f.id for f in self.findings])
        return out


@attrs.frozen
class Plan:
    """A grid of settings and their rows, in the grid's order (the last axis fastest), with
    the index of the best row per objective (None where no row qualifies).  ``vllm_versions``:
    the releases the rows speak for (one, unless ``vllm_version`` is an axis).  ``to_dict()``
    is ``enginecfg plan --json``."""

    model: str
    engine_args: Mapping[str, Any] = attrs.field(converter=_read_only)
    grid: Mapping[str, tuple[Any, ...]] = attrs.field(converter=_read_only)
    context: int
    memory: ImpactOptions
    rows: tuple[PlanRow, ...] = attrs.field(converter=tuple)
    best: Mapping[str, int | None] = attrs.field(converter=_read_only)
    vllm_versions: tuple[str, ...] = attrs.field(factory=lambda: (releases.first().name,), converter=tuple)

    def best_row(self, objective: str) -> PlanRow | None:
        """The best row for *objective* (one of :data:`OBJECTIVES`), None if none qualifies."""
        if objective not in OBJECTIVES:
            raise InvalidInputError.for_value("objective", objective, ", ".join(OBJECTIVES))
        i = self.best[objective]
        return None if i is None else self.rows[i]

    @property
    def exit_code(self) -> int:
        """0 when some row has figures; when none has, the highest of the rows' refusals
        (2: every setting is bad input), as ``run`` maps them."""
        if any(r.ok for r in self.rows):
            return 0
        return max((r.exit_code for r in self.rows), default=0)

    @property
    def capacity_rules(self) -> tuple[Any, ...]:
        """Where the rows speak for several releases: the rules that change what their KV
        figures mean between them (rule K6a changed the formula of the logged ``GPU KV cache
        size``), so that the columns are not read as one measure."""
        from enginecfg.commands.upgrade import rule_for

        out: list[Any] = []
        for old, new in itertools.combinations(_in_order(self.vllm_versions), 2):
            found = (rule_for(k, old, new) for k in ("kv_tokens.meaning", "concurrency.groups"))
            out += [r for r in found if r is not None and r not in out]
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "vllm_versions": list(self.vllm_versions),
                "engine_args": dict(self.engine_args),
                "grid": {name: list(values) for name, values in self.grid.items()},
                "context": self.context, "memory": self.memory.to_dict(),
                "rows": [r.to_dict() for r in self.rows], "best": dict(self.best),
                "capacity_rules": [r.to_dict() for r in self.capacity_rules]}


def _in_order(names: Sequence[str]) -> list[str]:
    return sorted(names, key=version_key)


def _check_grid(grid: Any) -> dict[str, tuple[Any, ...]]:
    if not isinstance(grid, Mapping):
        raise InvalidInputError.for_value("grid", grid, "a mapping of engine argument names to lists of values")
    out: dict[str, tuple[Any, ...]] = {}
    known = list(ENGINE_ARGS) + list(MEMORY_AXES) + [RELEASE_AXIS]
    for name, values in grid.items():
        if name not in known:
            raise InvalidInputError(f"invalid grid: {name!r} is neither an engine argument nor a memory axis"
                                    f"{did_you_mean(str(name), known)}; allowed: "
                                    f"{', '.join(known)}", field="grid")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise InvalidInputError(f"invalid grid: {name} got {values!r}; allowed: a non-empty list of "
                                    f"values", field=f"grid.{name}")
        out[name] = tuple(values)
    return out


def _resolved(result: RunResult, options: ImpactOptions, setting: Mapping[str, Any]) -> dict[str, Any]:
    """What vLLM resolved for each axis of *setting*: the config field an engine argument
    sets (the Mamba mode it uses, the block size its attention layers run with, at engine start
    for a release that decides it there), the memory option used."""
    doc = result.to_dict()["config"]
    out: dict[str, Any] = {}
    imp = result.facts.get("impact")
    startup = start_decision(result)
    at_start = startup is not None
    for name in setting:
        if name == "block_size" and isinstance(imp, Impact) and imp.attention_block_size is not None:
            out[name] = imp.attention_block_size  # the block the attention layers run with
        elif name == "mamba_block_size" and at_start:
            out[name] = startup.mamba_block_size  # decided when the engine starts
        elif name in ENGINE_ARGS and not ENGINE_ARGS[name].config_field:
            out[name] = result.config.engine_args.get(name)  # read by the loader, as given
        elif name in ENGINE_ARGS:
            section, field = ENGINE_ARGS[name].config_field.split(".")
            out[name] = (doc.get(section) or {}).get(field)
        elif name == "gpu":
            out[name] = options.card.name if options.gpu_memory_gib is None else options.gpu
        elif name == RELEASE_AXIS:
            out[name] = result.vllm_version
        else:
            out[name] = getattr(options, name)
    return out


def _row(pipeline, options: ImpactOptions, source, base: dict[str, Any], setting: dict[str, Any],
         context: int) -> PlanRow:
    engine = {n: v for n, v in setting.items() if n in ENGINE_ARGS}
    release = pipeline.vllm_version
    try:
        result = pipeline.resolve(source, **base, **engine)
    except EngineCfgError as exc:
        return PlanRow(setting, error=" ".join(str(exc).split()), memory=options, vllm_version=release,
                       exit_code=exc.exit_code)
    imp = result.facts.get("impact")
    if not isinstance(imp, Impact):
        error = getattr(imp, "error", None) or "the impact stage recorded no figures"
        if getattr(imp, "starts", None) is False:
            error = f"does not start: {imp.start_error}"
        return PlanRow(setting, error=error, memory=options, vllm_version=release, exit_code=1)
    block = imp.attention_block_size
    if block is None:
        block = result.config.cache_config.block_size
    options = used_memory(options, result)
    return PlanRow(setting, result=result, findings=findings(result), block_size=block,
                   concurrency=imp.concurrency_at(context), resolved=_resolved(result, options, setting),
                   memory=options, vllm_version=release)


def _best(rows: Sequence[PlanRow]) -> dict[str, int | None]:
    best: dict[str, int | None] = dict.fromkeys(OBJECTIVES)
    ok = [(i, r) for i, r in enumerate(rows) if r.ok and r.starts]
    if not ok:
        return best
    with_conc = [(i, r) for i, r in ok if r.concurrency is not None]
    if with_conc:
        best["concurrency"] = max(with_conc, key=lambda ir: (ir[1].concurrency, ir[1].impact.kv_tokens))[0]
    best["context"] = max(ok, key=lambda ir: (ir[1].impact.max_model_len_fits, ir[1].impact.kv_tokens))[0]
    best["granularity"] = min(ok, key=lambda ir: (ir[1].granularity, -ir[1].impact.kv_tokens))[0]
    return best


def plan(model: Any, grid: Mapping[str, Sequence[Any]], *, memory: MemoryLike = None,
         context: int = DEFAULT_CONTEXT, revision: str | None = None, vllm_version: str | None = None,
         **engine_args: Any) -> Plan:
    """Every setting of *grid* (engine argument name -> values) on top of *engine_args*,
    resolved as ``run`` resolves *model* (a folder, a ``config.json`` or a Hugging Face repo
    id at *revision*), the source opened and read once; the figures assume the GPU *memory*
    describes (see :func:`~enginecfg.commands.explain`), concurrency is also given at
    *context* tokens.  *vllm_version*: the release of every row (default
    ``$ENGINECFG_VLLM_VERSION``, else 0.19.0), unless the grid has a ``vllm_version`` axis.

    Raises :class:`~enginecfg.InvalidInputError` for a bad grid, context or memory option, or
    a model whose ``config.json`` cannot be read; a setting vLLM refuses is a row with its error.
    """
    axes = _check_grid(grid)
    if "gpu" in axes:  # each preset by its own name (H100 is H100-80GB)
        axes["gpu"] = tuple(v if v is None else find_gpu(v).name for v in axes["gpu"])
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise InvalidInputError.for_value("context", context, "a positive token count", flag="--context")
    if RELEASE_AXIS in axes:
        if vllm_version is not None:
            raise InvalidInputError(f"invalid plan: vllm_version {vllm_version!r} given beside a vllm_version axis "
                                    f"{list(axes[RELEASE_AXIS])!r}; give the releases once", field=RELEASE_AXIS)
        axes[RELEASE_AXIS] = tuple(dict.fromkeys(release_of(v) for v in axes[RELEASE_AXIS]))
    release = release_of(vllm_version)
    flags, base = split_memory(engine_args)
    options = memory_options(memory, **flags, contexts=(*DEFAULT_CONTEXTS, context))
    given = utilization_given(memory, flags) or "gpu_memory_utilization" in axes
    # every memory setting of the grid is checked before any model is read
    per_memory: dict[tuple, tuple[ImpactOptions, Any]] = {}
    memory_axes = [n for n in axes if n in MEMORY_AXES]
    for values in itertools.product(*(axes[n] for n in memory_axes)):
        chosen = {n: v for n, v in zip(memory_axes, values) if v is not None}
        if tuple(chosen.items()) not in per_memory:
            row_options = memory_options(options, **chosen)
            per_memory[tuple(chosen.items())] = (row_options, None)
    source = open_source(model, revision)
    source.config_bytes()  # absent, unreadable or not JSON: the model, not a setting, is at fault
    source.read_json("config.json")
    names = list(axes)
    pipelines: dict[tuple, Any] = {}
    rows = []
    for values in itertools.product(*(axes[n] for n in names)):
        setting = {n: v for n, v in zip(names, values) if v is not None}
        key = tuple((n, v) for n, v in setting.items() if n in MEMORY_AXES)
        row_release = setting.get(RELEASE_AXIS, release)
        row_options, _ = per_memory[key]
        pipeline = pipelines.get((key, row_release))
        if pipeline is None:
            pipeline = pipelines[(key, row_release)] = figures_pipeline(row_options, row_release, utilization=given)
        rows.append(_row(pipeline, row_options, source, base, setting, context))
    releases = axes.get(RELEASE_AXIS, (release,))
    return Plan(str(model), base, axes, context, options, rows, _best(rows), releases)
