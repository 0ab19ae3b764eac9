"""``check-log``: a real vLLM start-up log set beside what enginecfg works out for it.

:func:`check_log` reads a log as pasted (:mod:`enginecfg.pipeline.logs`), resolves the same
deployment (the logged model, its non-default arguments or command line, the logged release
and GPU, or what the caller supplies where a pasted excerpt does not say) and puts every line
that states a decision or a figure beside enginecfg's answer: :class:`LogLineCheck` says whether
they agree, and why not.

The KV-cache figures are checked given the logged memory.  vLLM prints memory rounded to two
decimals of a GiB, so "Available KV cache memory: 44.59 GiB" stands for an interval of bytes
(:func:`~enginecfg.pipeline.logs.gib_range`); the figures are worked out over that interval
(the block count is a step function of the bytes) and a logged figure agrees when some byte
count in it gives exactly that figure; the check then names the bytes it implies.  A log that
states no memory still states its figures: the block counts that give them, and so the bytes,
are found the same way.

The observation is a fact of the run (``startup_log``, recorded by :class:`ObservedStart`), so
an attached audit store keeps it in the run's hashed document, beside the ``impact`` fact that
holds what enginecfg predicts from the config, the flags and the GPU alone.

A release enginecfg does not speak is compared under the nearest one it does, and said so.
"""

from __future__ import annotations

import math
import re
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

import attrs

from enginecfg.commands._memory import memory_options, planning_of
from enginecfg.pipeline import releases, rulepacks
from enginecfg.pipeline.document import RunResult
from enginecfg.pipeline.engine_args import ENGINE_ARGS, parse_flag_text
from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError
from enginecfg.pipeline.logs import Logged, Start, StartupLog, gib_range, read
from enginecfg.pipeline.models import capacity
from enginecfg.pipeline.models.capacity import Impact, ImpactOptions
from enginecfg.pipeline.models.gpus import GPUS, find_gpu
from enginecfg.pipeline.models.startup import Startup
from enginecfg.pipeline.stage import Stage

__all__ = ["LogCheck", "LogLineCheck", "ObservedStart", "check_log", "nearest_release"]

_GIB = 2**30
#: vLLM's memory flags, by the names its non-default arguments use
_MEMORY = {"gpu_memory_utilization": "gpu_memory_utilization", "kv_cache_memory_bytes": "kv_cache_memory",
           "kv_cache_memory": "kv_cache_memory", "num_gpu_blocks_override": "num_gpu_blocks_override"}
_MEMORY_FLAGS = {"--gpu-memory-utilization": ("gpu_memory_utilization", float),
                 "--kv-cache-memory-bytes": ("kv_cache_memory", None), "--kv-cache-memory": ("kv_cache_memory", None),
                 "--num-gpu-blocks-override": ("num_gpu_blocks_override", int)}
#: arguments enginecfg does not take that change the KV-cache figures of the start, and how
_CHANGES_THE_FIGURES = {
    "speculative_config": "speculative decoding adds the drafter's layers to the KV cache and blocks to every "
                          "request, which enginecfg does not model",
    "kv_offloading_size": "it moves KV-cache blocks to CPU memory",
    "cpu_offload_gb": "it moves weights to CPU memory",
}
#: how far an estimate may be from the logged figure and still agree (the issue's bar)
ESTIMATE_TOLERANCE = 0.05
#: the lines whose answer depends on the GPU (its compute capability picks the backends)
_GPU_BOUND = frozenset({"attention_backend", "flash_attention_version", "block_size", "mamba_padding"})


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


# --------------------------------------------------------------------------- values
@attrs.frozen
class LogLineCheck:
    """One logged line beside enginecfg's answer.

    ``name`` is the line in the log's own words ("GPU KV cache size"); ``line`` where it
    stands (from 1); ``logged`` what it says and ``expected`` what enginecfg works out (a value,
    or ``{"low": .., "high": ..}`` over the logged memory's interval); ``agrees`` True or
    False, None where nothing here can say (``why`` tells which part is unknown); ``why`` the
    arithmetic or the rule behind the answer; ``exact``: False for an estimate (the memory a
    start leaves the KV cache), which agrees within :data:`ESTIMATE_TOLERANCE` or its range."""

    name: str
    line: int
    logged: Any
    expected: Any
    agrees: bool | None
    why: str
    exact: bool = True
    implied: Mapping[str, Any] | None = attrs.field(default=None, converter=lambda v: None if v is None
                                                    else _read_only(v))

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "line": self.line, "logged": self.logged, "expected": self.expected,
               "agrees": self.agrees, "exact": self.exact, "why": self.why}
        if self.implied is not None:
            out["implied"] = dict(self.implied)
        return out


@attrs.frozen
class Observation:
    """What a start logged and how it compares: the run's ``startup_log`` fact."""

    source: str
    logged_release: str | None
    release: str
    release_note: str | None
    start_lines: tuple[int, int]
    checks: tuple[LogLineCheck, ...] = attrs.field(converter=tuple)
    memory: Mapping[str, Any] = attrs.field(converter=_read_only)
    explanations: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "logged_release": self.logged_release, "release": self.release,
                "release_note": self.release_note, "lines": list(self.start_lines),
                "checks": [c.to_dict() for c in self.checks], "memory": _plain(self.memory),
                "explanations": list(self.explanations)}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@attrs.frozen
class LogCheck:
    """``enginecfg check-log``'s result: the log read back (``log``, the start compared:
    ``start``), the deployment resolved for it (``model``, ``engine_args``, the memory
    ``options``, what was set aside and why, the release and GPU with a note where they were
    not the log's own), the run (``result``; None when the model could not be resolved, and
    ``error`` says why) and its observation (``observation``: the checks and the memory).
    ``to_dict()`` is ``check-log --json``."""

    source: str
    log: StartupLog
    start: Start
    logged_release: str | None
    vllm_version: str
    release_note: str | None
    model: str | None
    engine_args: Mapping[str, Any] = attrs.field(converter=_read_only)
    options: ImpactOptions | None
    set_aside: Mapping[str, Any] = attrs.field(converter=_read_only)
    gpu: str
    gpu_note: str | None
    arguments_from: str = ""
    result: RunResult | None = None
    error: EngineCfgError | None = None

    @property
    def observation(self) -> Observation | None:
        return self.result.facts.get("startup_log") if self.result is not None else None

    @property
    def checks(self) -> tuple[LogLineCheck, ...]:
        obs = self.observation
        return obs.checks if obs is not None else ()

    @property
    def run_id(self) -> str | None:
        return self.result.run_id if self.result is not None else None

    @property
    def differs(self) -> tuple[LogLineCheck, ...]:
        return tuple(c for c in self.checks if c.agrees is False)

    def to_dict(self) -> dict[str, Any]:
        obs = self.observation
        return {
            "source": self.source, "vllm_version": self.logged_release, "compared_under": self.vllm_version,
            "release_note": self.release_note, "model": self.model, "engine_args": dict(self.engine_args),
            "memory_flags": self.options.to_dict() if self.options is not None else None,
            "arguments_from": self.arguments_from, "set_aside": dict(self.set_aside), "gpu": self.gpu,
            "gpu_note": self.gpu_note,
            "run_id": self.run_id, "starts": len(self.log.starts),
            "start": {"index": self.start.index, "lines": [self.start.first_line, self.start.last_line]},
            "logged": [f.to_dict() for f in self.start.logged],
            "checks": [c.to_dict() for c in self.checks],
            "memory": _plain(obs.memory) if obs is not None else None,
            "explanations": list(obs.explanations) if obs is not None else [],
            "error": self.error.to_dict() if self.error is not None else None,
        }


# --------------------------------------------------------------------------- release, GPU, arguments
def _version_key(text: str) -> tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        raise InvalidInputError.for_value("vllm_version", text, "a vLLM version such as X.Y.Z", flag="--vllm-version")
    return tuple(int(g or 0) for g in m.groups())


def nearest_release(version: str) -> str:
    """The release spoken for nearest to *version* (:func:`enginecfg.pipeline.releases.nearest`:
    the deepest shared prefix, then the nearest number, a tie going to the older): what a log of
    a release enginecfg does not speak is compared under."""
    _version_key(version)
    return releases.nearest(".".join(str(n) for n in _version_key(version))).name


def _release(start: Start, asked: str | None) -> tuple[str | None, str, str | None]:
    """``(the log's release, the release compared under, a note or None)``.  The release asked
    for, else the logged one, when enginecfg speaks it exactly (its every decision follows its
    own dated rules, :attr:`Release.exact`); any other is compared under the nearest release
    spoken for exactly, and the note says so."""
    logged = start.release
    wanted = asked or logged
    if wanted is None:
        default = rulepacks.default_release()
        return None, default, (f"the log does not name its vLLM release; compared under {default}, the default "
                               "(--vllm-version names it)")
    if wanted in rulepacks.releases() and (not releases.known(wanted) or releases.get(wanted).exact):
        note = None
        if asked and logged and _version_key(logged) != _version_key(asked):
            note = f"the log is of vLLM {logged}; compared under {asked} as asked"
        return logged, wanted, note
    base = ".".join(str(n) for n in _version_key(wanted))
    if base != wanted and base in rulepacks.releases() and releases.get(base).exact:
        return logged, base, (f"vLLM {wanted} is a build of {base}; compared under {base}")
    near = releases.nearest(base, exact=True).name
    if releases.known(base):
        unwired = releases.get(base).unwired
        return logged, near, (f"vLLM {base} is not a release enginecfg speaks exactly yet (its dated rules are "
                              f"composed, but {len(unwired)} of them are not wired into the decisions: "
                              f"{', '.join(unwired[:6])}{', ...' if len(unwired) > 6 else ''}); compared under "
                              f"{near}, the nearest it speaks exactly, so a line whose rule changed between them "
                              f"can differ for that reason alone")
    return logged, near, (f"vLLM {wanted} is not a release enginecfg speaks (it speaks "
                          f"{', '.join(rulepacks.releases())}); compared under {near}, the nearest, so a line "
                          f"whose rule changed between them can differ for that reason alone")


def _gpu(start: Start, asked: str | None) -> tuple[str, str | None]:
    if asked:
        return find_gpu(asked).name, None
    for f in start.all("gpu"):
        if isinstance(f.value, str):
            try:
                return find_gpu(f.value).name, f"the GPU named on line {f.line} ({f.value})"
            except InvalidInputError:
                continue
    default = next(iter(GPUS))
    return default, (f"the log does not name a GPU enginecfg knows; the {default} is assumed (--gpu names it: "
                     "it decides the attention backend and what the estimate starts from)")


def _flag_table() -> dict[str, tuple[str, Any]]:
    table: dict[str, tuple[str, Any]] = {}
    for arg in ENGINE_ARGS.values():
        for flag in arg.flags:
            table[flag] = (arg.name, arg)
    return table


def _from_command(words: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(engine args, memory options, set aside)`` of a pasted command line's words, read as
    ``vllm serve`` reads them (a unique prefix of a long option is that option)."""
    table = _flag_table()
    longs = sorted(set(table) | set(_MEMORY_FLAGS))
    args: dict[str, Any] = {}
    memory: dict[str, Any] = {}
    aside: dict[str, Any] = {}
    words = list(words)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-"):
            continue
        name, _, inline = word.partition("=")
        negated = name.startswith("--no-")
        candidates = [f for f in longs if f == name or (name.startswith("--") and f.startswith(name))]
        flag = name if name in longs else (candidates[0] if len(candidates) == 1 else None)
        if flag is None and negated:
            flag = "--" + name[5:] if "--" + name[5:] in table else None
        value = inline or None
        takes_value = True
        if flag in table and table[flag][1].kind == "bool":
            takes_value = False
        if value is None and takes_value and i < len(words) and not words[i].startswith("--"):
            value = words[i]
            i += 1
        if flag in _MEMORY_FLAGS:
            key, kind = _MEMORY_FLAGS[flag]
            try:
                memory[key] = kind(value) if kind is not None else _bytes(value)
            except (TypeError, ValueError):
                aside[name] = value
        elif flag in table:
            arg = table[flag][1]
            if arg.kind == "bool":
                args[arg.name] = not negated
            else:
                try:
                    args[arg.name] = parse_flag_text(arg, value) if value is not None else None
                except ValueError:
                    aside[name] = value
        else:
            aside[name.lstrip("-").replace("-", "_")] = value if value is not None else True
    return args, memory, aside


def _bytes(text: str) -> int:
    from enginecfg.pipeline.engine_args import human_readable_int

    return human_readable_int(str(text))


def _arguments(start: Start, log: StartupLog) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str]:
    """``(engine args, memory options, set aside, where they come from)`` of a start."""
    logged = start.first("engine_args")
    if logged is not None and logged.value:
        args: dict[str, Any] = {}
        memory: dict[str, Any] = {}
        aside: dict[str, Any] = {}
        for key, value in logged.value.items():
            if key in ENGINE_ARGS:
                args[key] = value
            elif key in _MEMORY:
                memory[_MEMORY[key]] = value
            elif key not in ("model", "model_tag"):
                aside[key] = value
        return args, memory, aside, f"the non-default args on line {logged.line}"
    if log.command is not None:
        args, memory, aside = _from_command(log.command.words)
        return args, memory, aside, f"the command line on line {log.command.line}"
    config = start.first("engine_config")
    args = {}
    if config is not None:
        cfg = config.value
        for key, name in (("tensor_parallel_size", "tensor_parallel_size"),
                          ("pipeline_parallel_size", "pipeline_parallel_size"), ("max_seq_len", "max_model_len")):
            if isinstance(cfg.get(key), int):
                args[name] = cfg[key]
        if isinstance(cfg.get("kv_cache_dtype"), str) and cfg["kv_cache_dtype"] != "auto":
            args["kv_cache_dtype"] = cfg["kv_cache_dtype"]
        return args, {}, {}, f"the engine's config line on line {config.line}"
    # no arguments logged: the context length the start states is still its max_model_len
    stated = start.first("max_model_len")
    if stated is not None:
        return {"max_model_len": stated.value}, {}, {}, f"the max model len on line {stated.line}; no arguments logged"
    conc = start.first("max_concurrency")
    if conc is not None and isinstance(conc.parts.get("max_model_len"), int):
        return ({"max_model_len": conc.parts["max_model_len"]}, {}, {},
                f"the concurrency's tokens per request on line {conc.line}, its max_model_len; no arguments "
                "logged")
    return {}, {}, {}, "nothing in the log (its defaults)"


# --------------------------------------------------------------------------- the figures
def _figures_at(result_cfg: Any, startup: Any, release: str, opts: ImpactOptions
                ) -> Callable[[int, int | None], Impact]:
    """``figures(memory bytes, blocks or None)``: the run's KV-cache figures with the memory
    (and, given, the block count) replaced, by the release's own arithmetic."""
    planning = planning_of(release)
    if planning is not None:
        start_key, gpu_key = planning.startup_key(startup), planning.gpu_key(opts.card)

        def at(memory: int, blocks: int | None = None) -> Impact:
            return planning.impact(result_cfg, startup=start_key, gpu=gpu_key, gpu_memory_gib=opts.card.memory_gib,
                                   gpu_memory_utilization=1.0, kv_cache_memory=max(memory, 1), contexts=(),
                                   extensible=False, num_gpu_blocks_override=blocks)
        return at
    start = {"startup_block_size": startup.block_size,
             "disable_hybrid_kv_cache_manager": startup.disable_hybrid_kv_cache_manager} \
        if isinstance(startup, Startup) else {}

    def at(memory: int, blocks: int | None = None) -> Impact:
        return capacity.impact(result_cfg, gpu_memory_gib=opts.gpu_memory_gib, gpu=opts.gpu,
                               gpu_memory_utilization=opts.gpu_memory_utilization, kv_cache_memory=max(memory, 1),
                               contexts=(), num_gpu_blocks_override=blocks,
                               auto_fit_max_model_len=result_cfg.engine_args.get("max_model_len") == -1, **start)
    return at


def _bytes_per_block(imp: Impact) -> int | None:
    used = imp.memory.kv_cache_memory - (imp.block_rounding.bytes if imp.block_rounding is not None else 0)
    return used // imp.num_blocks if imp.num_blocks else None


def _span(f: Callable[[int], float], target: float, low: int, high: int) -> tuple[int, int] | None:
    """The block counts in [low, high] where the non-decreasing *f* equals *target*."""
    if low > high:
        return None
    lo, hi = low, high + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if f(mid) >= target:
            hi = mid
        else:
            lo = mid + 1
    first = lo
    if first > high or f(first) != target:
        return None
    lo, hi = first, high
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if f(mid) <= target:
            lo = mid
        else:
            hi = mid - 1
    return first, lo


def _upper(f: Callable[[int], float], target: float) -> int:
    n = 1
    while f(n) <= target and n < 2**40:
        n *= 2
    return n


def _conc_text(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _gib_text(n: int) -> str:
    return f"{n / _GIB:.2f} GiB"


# --------------------------------------------------------------------------- the comparison
class _Compare:
    """The checks of one start against one resolved run (see the module doc)."""

    def __init__(self, start: Start, log: StartupLog, release: str, cfg: Any, startup: Any, imp: Any,
                 opts: ImpactOptions, changes: Iterable, aside: Mapping[str, Any],
                 release_note: str | None = None, gpu_note: str | None = None):
        self.start, self.log, self.release = start, log, release
        self.release_note, self.gpu_note = release_note, gpu_note
        self.gpu_assumed = bool(gpu_note) and gpu_note.startswith("the log does not name")
        self.joint: tuple[int, int] | None = None
        self.cfg, self.startup, self.imp, self.opts = cfg, startup, imp, opts
        self.changes = list(changes)
        self.aside = aside
        self.checks: list[LogLineCheck] = []
        self.explanations: list[str] = []
        self.memory: dict[str, Any] = {}
        self.at = _figures_at(cfg, startup, release, opts) if isinstance(imp, Impact) and imp.groups else None

    # -- helpers
    def add(self, f: Logged, logged: Any, expected: Any, agrees: bool | None, why: str, **kw: Any) -> None:
        if agrees is False and kw.get("exact", True):
            notes = [n for n in (self.release_note, self.gpu_note if f.kind in _GPU_BOUND and self.gpu_assumed
                                 else None) if n]
            if notes:
                why += ". Note: " + "; ".join(notes)
        self.checks.append(LogLineCheck(f.name, f.line, logged, expected, agrees, why, **kw))

    def why_not(self) -> str:
        causes = [f"the start had {k} ({v})" for k, v in self.aside.items() if k in _CHANGES_THE_FIGURES]
        causes = [f"{c}: {_CHANGES_THE_FIGURES[k]}" for c, k in
                  zip(causes, [k for k in self.aside if k in _CHANGES_THE_FIGURES])]
        return "; ".join(causes)

    # -- the decisions
    def decisions(self) -> None:
        cfg, st = self.cfg, self.startup
        mc, cc = cfg.model_config, cfg.cache_config
        f = self.start.first("max_model_len")
        if f is not None:
            self.add(f, f.value, mc.max_model_len, f.value == mc.max_model_len,
                     "the model's context length, or --max-model-len")
        f = self.start.first("max_num_batched_tokens")
        if f is not None and isinstance(self.imp, Impact):
            exp = self.imp.max_num_batched_tokens
            self.add(f, f.value, exp, f.value == exp, "the scheduler's token budget a step (--max-num-batched-tokens "
                     "or the release's default for the usage)")
        f = self.start.first("kv_cache_dtype")
        if f is not None:
            exp = cc.cache_dtype
            agrees = f.value == exp or (exp == "auto" and f.value == mc.dtype) or exp.startswith(f.value)
            self.add(f, f.value, exp, agrees, "the KV cache's data type (--kv-cache-dtype)")
        f = self.start.first("mamba_cache_mode")
        if f is not None:
            self.add(f, f.value, cc.mamba_cache_mode, f.value == cc.mamba_cache_mode,
                     "the Mamba prefix-cache mode the release picks for the model and the flags")
        f = self.start.first("forced_backend")
        if f is not None:
            exp = cfg.attention_config.backend
            self.add(f, f.value, exp, f.value == exp, self._change_why("attention_config.backend")
                     or "the release's rule for Gemma 4's head sizes")
        self._backends()
        self._block_size()
        self._padding()

    def _change_why(self, field: str) -> str | None:
        found = [c for c in self.changes if c.field == field]
        if not found:
            return None
        c = found[-1]
        return f"{c.reason}" + (f" {c.explanation}" if c.explanation else "")

    def _said(self, words: str) -> str | None:
        """The explanation of the change or start-up decision that logs the line starting with
        *words* (the stages give vLLM's line as the reason), the last one if several."""
        records = [*self.changes, *(self.startup.decisions if isinstance(self.startup, Startup) else ())]
        found = [r for r in records if str(r.reason).startswith(words) and r.explanation]
        return found[-1].explanation if found else None

    def _decision_why(self, field: str) -> str | None:
        if not isinstance(self.startup, Startup):
            return None
        found = [d for d in self.startup.decisions if d.field == field]
        return found[-1].explanation if found else None

    def _backends(self) -> None:
        st = self.startup
        kinds = [b for b in st.backends if b.layer.kind not in ("mamba",) and b.backend] if isinstance(st, Startup) else []
        names = sorted({b.backend for b in kinds})
        for f in self.start.all("attention_backend")[:1]:
            if not names:
                self.add(f, f.value, None, None, "the start-up step was not decided for this model")
                continue
            self.add(f, f.value, names[0] if len(names) == 1 else names, f.value in names,
                     f"vLLM {self.release}'s backend priority on the {st.gpu} (sm {st.capability}) for the model's "
                     "attention layers")
        f = self.start.first("flash_attention_version")
        if f is not None:
            versions = sorted({b.fa_version for b in kinds if b.fa_version is not None})
            if versions:
                self.add(f, f.value, versions[0] if len(versions) == 1 else versions, f.value in versions,
                         f"the FlashAttention version the {st.gpu} (sm {st.capability}) gets")
            else:
                self.add(f, f.value, None, None, "enginecfg's start-up step chose no FlashAttention backend here")

    def _block_size(self) -> None:
        f = self.start.first("block_size")
        if f is None:
            return
        st = self.startup
        exp = None
        if isinstance(st, Startup):
            exp = st.engine_block_size or st.block_size
        if exp is None:
            exp = self.cfg.cache_config.block_size
        why = self._said("Setting attention block size") or self._decision_why("block_size") or \
            self._change_why("cache_config.block_size") or "the block size the model's layers need"
        if exp != f.value and self.why_not():
            why += f". Differs: {self.why_not()}"
        self.add(f, f.value, exp, f.value == exp, why)
        if f.value == exp and "Mamba" in why:
            self.explanations.append(f"Why {f.value:,} tokens a block: {why}")

    def _padding(self) -> None:
        imp = self.imp
        f = self.start.first("mamba_padding")
        if f is not None and isinstance(imp, Impact):
            m = imp.padding.mamba if imp.padding is not None else None
            if m is None:
                self.add(f, f.digits, None, False, "enginecfg pads no Mamba page for this setting")
            else:
                exp = f"{100.0 * m.bytes / m.state_bytes:.2f}"
                self.add(f, f.digits, exp, exp == f.digits, self._said("Padding mamba page size") or
                         f"the attention page is {m.page_bytes:,} bytes and a Mamba state {m.state_bytes:,}: "
                         f"{m.bytes:,} bytes of padding, {exp}% of the state")
        f = self.start.first("padding_layers")
        if f is not None and isinstance(imp, Impact) and imp.padding is not None:
            exp = imp.padding.layers
            why = "layer slots the grouping leaves empty (groups of unequal size)"
            if exp != f.value and self.why_not():
                why += f". Differs: {self.why_not()}"
            self.add(f, f.value, exp, f.value == exp, why)

    # -- the KV-cache figures given the logged memory
    def kv(self) -> None:
        size = self.start.first("kv_cache_size")
        conc = self.start.first("max_concurrency")
        blocks_line = self.start.first("gpu_blocks")
        memory_line = self.start.first("available_kv_cache_memory") or self.start.first("kv_cache_memory_reserved")
        error = self.start.first("start_error")
        if conc is not None:
            length = conc.parts.get("max_model_len")
            if length is not None and length != self.cfg.model_config.max_model_len:
                self.add(conc, length, self.cfg.model_config.max_model_len, False,
                         "the tokens per request the concurrency is given for is max_model_len")
        if self.at is None:
            for f in (size, conc, blocks_line):
                if f is not None:
                    reason = self.imp.error if hasattr(self.imp, "error") else "the model keeps no KV cache"
                    self.add(f, f.digits or f.value, None, None, f"no KV-cache figures here: {reason}")
            return
        rng = None
        if memory_line is not None:
            low, high = gib_range(memory_line.digits)
            rng = (low, high)
            self.memory["logged"] = {"available_kv_cache_memory": {"gib": memory_line.value, "low": low,
                                                                   "high": high, "line": memory_line.line}}
        elif error is not None:
            m = re.search(r"available KV cache memory \((-?[\d.]+) GiB\)", error.value)
            if m:
                rng = gib_range(m.group(1))
        at = self.at
        ref = rng[0] if rng else max(self.imp.memory.kv_cache_memory, 1)
        memo: dict[int, Impact] = {}

        def fig(n: int) -> Impact:
            if n not in memo:
                memo[n] = at(ref, n)
            return memo[n]

        def tokens(n: int) -> float:
            return fig(n).kv_tokens

        def concurrency(n: int) -> float:
            x = fig(n).max_concurrency
            return float(_conc_text(x)) if x is not None else -1.0

        if rng is not None:
            lo_fig, hi_fig = at(rng[0]), at(rng[1])
            b_lo, b_hi = lo_fig.num_blocks, hi_fig.num_blocks
        else:
            b_lo, b_hi = 0, None
        per_block = _bytes_per_block(at(ref))
        found: dict[str, tuple[int, int] | None] = {}
        for f, fn, target in ((size, tokens, size.value if size else None),
                              (conc, concurrency, float(conc.digits) if conc is not None and conc.digits else None),
                              (blocks_line, lambda n: float(n), float(blocks_line.value) if blocks_line else None)):
            if f is None or target is None:
                continue
            high = b_hi if b_hi is not None else _upper(fn, target)
            found[f.kind] = _span(fn, target, b_lo, high)
        spans = [s for s in found.values() if s is not None]
        both = (max(s[0] for s in spans), min(s[1] for s in spans)) if spans else None
        self.joint = both if both is not None and both[0] <= both[1] else None
        self._kv_checks(size, conc, blocks_line, rng, b_lo, b_hi, found, per_block, tokens, concurrency, fig)
        implied = self._implied(self.joint, per_block, rng)
        if implied is not None:
            self.memory["implied"] = implied
        if error is not None:
            self._error_check(error, rng)

    def _implied(self, span: tuple[int, int] | None, per_block: int | None, rng) -> dict[str, Any] | None:
        if span is None or per_block is None:
            return None
        low, high = span[0] * per_block, (span[1] + 1) * per_block - 1
        if rng is not None:
            low, high = max(low, rng[0]), min(high, rng[1])
        return {"blocks": {"low": span[0], "high": span[1]}, "kv_cache_memory": {"low": low, "high": high}}

    def _kv_checks(self, size, conc, blocks_line, rng, b_lo, b_hi, found, per_block, tokens, concurrency, fig):
        release = self.release
        cause = self.why_not()
        given = (f"over the logged memory's bytes ({rng[0]:,} to {rng[1]:,}: {b_lo:,} to {b_hi:,} blocks of "
                 f"{per_block:,} bytes)" if rng is not None and per_block else "the log states no memory: the block "
                 "counts that give the logged figure")
        if size is not None:
            span = found.get("kv_cache_size")
            if b_hi is not None:
                lo_t, hi_t = tokens(b_lo), tokens(b_hi)
                expected: Any = lo_t if lo_t == hi_t else {"low": lo_t, "high": hi_t}
            else:
                expected = tokens(span[0]) if span else None
            n = (self.joint or span or (b_lo, b_lo))[0]
            why = f"{given}; {self._tokens_formula(fig(n), n)}"
            if span is None and cause:
                why += f". Differs: {cause}"
            self.add(size, size.value, expected, span is not None, why, implied=self._implied(span, per_block, rng))
        if conc is not None and conc.digits:
            span = found.get("max_concurrency")
            if b_hi is not None:
                lo_c, hi_c = concurrency(b_lo), concurrency(b_hi)
                expected = _conc_text(lo_c) if lo_c == hi_c else {"low": _conc_text(lo_c), "high": _conc_text(hi_c)}
            else:
                expected = _conc_text(concurrency(span[0])) if span else None
            n = (self.joint or span or (b_lo, b_lo))[0]
            x = fig(n)
            per_request = round(n / x.max_concurrency) if x.max_concurrency else None
            why = (f"{given}; a request of {x.max_model_len:,} tokens takes {per_request} blocks across the "
                   f"{len(x.groups)} KV-cache group(s), so {n:,} blocks serve {n:,} / {per_request} = "
                   f"{_conc_text(x.max_concurrency)} requests" if per_request else given)
            if span is None and cause:
                why += f". Differs: {cause}"
            self.add(conc, conc.digits, expected, span is not None, why,
                     implied=self._implied(span, per_block, rng))
            if size is not None and per_request and self.joint is not None:
                self._multiply_out(size, conc, x, n, per_request)
        if blocks_line is not None:
            span = found.get("gpu_blocks")
            if b_hi is not None:
                expected = b_lo if b_hi == b_lo else {"low": b_lo, "high": b_hi}
            else:  # no memory logged: the count the other figures allow
                joint = self.joint or span
                expected = None if joint is None else joint[0] if joint[0] == joint[1] else \
                    {"low": joint[0], "high": joint[1]}
            self.add(blocks_line, blocks_line.value, expected, span is not None and (
                self.joint is None or self.joint[0] <= blocks_line.value <= self.joint[1]), given)

    def _tokens_formula(self, x: Impact, n: int) -> str:
        if planning_of(self.release) is not None:
            return (f"vLLM {self.release} logs int(concurrency x max_model_len) = int({n:,} / "
                    f"{round(n / x.max_concurrency) if x.max_concurrency else '-'} x {x.max_model_len:,}) = {x.kv_tokens:,}")
        groups = len(x.groups)
        smallest = min(g.block_size for g in x.groups)
        return (f"vLLM {self.release} logs num_blocks // KV-cache groups x the smallest block = {n:,} // {groups} x "
                f"{smallest:,} = {x.kv_tokens:,}")

    def _multiply_out(self, size: Logged, conc: Logged, x: Impact, n: int, per_request: int) -> None:
        product = float(conc.digits) * x.max_model_len
        if abs(product - size.value) <= x.max_model_len * 0.01:
            return
        attention = [g for g in x.groups if g.kind == "full_attention"]
        others = len(x.groups) - len(attention)
        parts = ""
        if attention and all(g.block_size == attention[0].block_size for g in attention):
            each = math.ceil(x.max_model_len / attention[0].block_size)
            rest = per_request - each * len(attention)
            parts = (f" ({len(attention)} attention group(s) x cdiv({x.max_model_len:,}, {attention[0].block_size:,}) "
                     f"= {each * len(attention)}, and {rest} for the {others} other group(s): a Mamba state takes its "
                     "blocks whatever the context)") if others else ""
        if planning_of(self.release) is not None:
            return
        self.explanations.append(
            f"Why \"GPU KV cache size: {size.value:,} tokens\" and \"Maximum concurrency for {x.max_model_len:,} tokens "
            f"per request: {conc.digits}x\" do not multiply out ({conc.digits} x {x.max_model_len:,} = {product:,.0f}): "
            f"vLLM {self.release} logs the size as num_blocks // groups x the smallest block = {n:,} // "
            f"{len(x.groups)} x {min(g.block_size for g in x.groups):,} = {x.kv_tokens:,}, as if the blocks were shared "
            f"out evenly between the groups; the concurrency counts the blocks one request really takes, "
            f"{per_request}{parts}: {n:,} / {per_request} = {_conc_text(x.max_concurrency)}. The concurrency is the "
            f"figure to plan with; vLLM {releases.brought_by('K6a')} and later log the size as "
            f"int(concurrency x max_model_len).")

    def _error_check(self, error: Logged, rng) -> None:
        if error.value.startswith("Free memory on device"):
            self.add(error, error.value, None, None, "the card's free memory at start depends on what other processes "
                     "held on it, which the log's figures do not tell")
            return
        if rng is None or self.at is None:
            self.add(error, error.value, None, None, "the log states no KV-cache memory to check the refusal at")
            return
        said = error.value.rstrip()
        per_block = _bytes_per_block(self.at(rng[0]))
        # the message states the memory it had; a release may state it less the null block
        candidates = [rng[0], rng[1]] + ([rng[0] + per_block, rng[1] + per_block] if per_block else [])
        expected = None
        for memory in candidates:
            exp = self.at(memory).start_error
            exp = exp.split(": ", 1)[1] if exp is not None and ": " in exp else exp
            if expected is None:
                expected = exp
            if exp is not None and exp.startswith(said):
                self.add(error, said, exp, True, f"at {memory:,} bytes of KV cache vLLM {self.release} stops with this "
                         "error, word for word (as far as the log has it)")
                return
        self.add(error, said, expected, False, f"at the memory the message states ({rng[0]:,} to {rng[1]:,} bytes) "
                 f"vLLM {self.release} " + ("stops with another text" if expected else "would start"))

    def _card_too_small(self, budget: Any) -> None:
        """Say so when the logged figures imply more KV cache than the assumed card can hold
        beside the weights: the card the log ran on had more memory than its preset."""
        implied = (self.memory.get("implied") or {}).get("kv_cache_memory")
        if not implied or budget.weights is None or budget.source != "estimate":
            return
        room = budget.requested_memory - min(budget.weights.bytes_per_gpu, *(
            p.low for p in budget.parts if p.name == "weights"))
        if implied["low"] <= room:
            return
        self.explanations.append(
            f"The logged figures imply {implied['low'] / _GIB:.2f} GiB of KV cache or more, but the {budget.gpu} "
            f"({budget.gpu_memory_bytes / _GIB:.2f} GiB) requests {budget.requested_memory / _GIB:.2f} GiB at "
            f"utilization {budget.gpu_memory_utilization} and the weights alone take "
            f"{(budget.requested_memory - room) / _GIB:.2f} GiB of it: the card this start ran on had more memory "
            f"than that preset (or other flags); --gpu or --gpu-memory names it.")

    # -- the memory
    def memory_budget(self, predicted: Any) -> None:
        """The logged memory lines beside the estimate of the run (``predicted``: the impact
        from the config, the flags and the GPU alone)."""
        logged = self.memory.setdefault("logged", {})
        for kind, key in (("model_loading", "model_loading_gib"), ("cuda_graph_memory", "cuda_graph_memory_gib"),
                          ("kv_cache_memory_reserved", "kv_cache_memory_reserved_gib")):
            f = self.start.first(kind)
            if f is not None:
                logged[key] = f.value
        prof = self.start.first("profiling")
        if prof is not None:
            logged["profiling"] = dict(prof.parts)
        if not isinstance(predicted, Impact):
            self.memory["predicted"] = None
            return
        budget = predicted.memory
        # what vLLM logs as "Available KV cache memory" (under 0.34.0's extensible KV cache the
        # blocks then get a share of it sized after warm-up: ``kv_cache_memory``)
        kv: dict[str, Any] = {"bytes": budget.available_kv_cache_memory}
        pred: dict[str, Any] = {"available_kv_cache_memory": budget.available_kv_cache_memory}
        if budget.is_range:
            kv["low"] = pred["low"] = budget.available_kv_cache_memory_low
            kv["high"] = pred["high"] = budget.available_kv_cache_memory_high
        if budget.kv_cache_memory != budget.available_kv_cache_memory:
            pred["kv_cache_memory"] = budget.kv_cache_memory
        pred.update(source=budget.source, gpu=budget.gpu, gpu_memory_bytes=budget.gpu_memory_bytes,
                    gpu_memory_utilization=budget.gpu_memory_utilization, requested_memory=budget.requested_memory)
        if budget.weights is not None:
            pred["weights_per_gpu"] = budget.weights.bytes_per_gpu
        parts = budget.parts
        if parts:
            pred["parts"] = [p.to_dict() if hasattr(p, "to_dict") else p for p in parts]
        self.memory["predicted"] = pred
        self._card_too_small(budget)
        avail = self.start.first("available_kv_cache_memory")
        if avail is not None and budget.source == "estimate":
            low, high = gib_range(avail.digits)
            lo_p, hi_p = kv.get("low", kv["bytes"]), kv.get("high", kv["bytes"])
            error = (kv["bytes"] - (low + high) / 2) / ((low + high) / 2) if low + high > 0 else None
            within = lo_p <= high and hi_p >= low
            agrees = within or (error is not None and abs(error) <= ESTIMATE_TOLERANCE)
            self.memory["error"] = error
            expected: Any = _gib_text(kv["bytes"]) if lo_p == hi_p else {"low": _gib_text(lo_p), "high": _gib_text(hi_p)}
            basis = "; ".join(budget.weights.basis) if budget.weights is not None else budget.source
            said = ("the logged figure lies inside the estimate's range" if within and lo_p != hi_p
                    else f"{(error or 0) * 100:+.1f}% from the logged")
            self.add(avail, avail.digits, expected, agrees,
                     f"estimated before loading: the memory vLLM requests less what the start takes "
                     f"({said}; the point estimate is {(error or 0) * 100:+.1f}% from it); {basis}", exact=False)
        load = self.start.first("model_loading")
        if load is not None and budget.weights is not None:
            w = budget.weights.bytes_per_gpu
            low, high = gib_range(load.digits)
            error = (w - (low + high) / 2) / ((low + high) / 2) if low + high else None
            self.add(load, load.digits, f"{w / _GIB:.2f}", error is not None and abs(error) <= ESTIMATE_TOLERANCE,
                     f"the weights one GPU holds, estimated from the config's shapes ({(error or 0) * 100:+.1f}%); "
                     + "; ".join(budget.weights.basis), exact=False)
        cg = self.start.first("cuda_graph_memory")
        if cg is not None:
            part = next((p for p in parts if p.name == "cuda_graphs"), None)
            if part is None:
                self.add(cg, cg.digits, None, None, "enginecfg's estimate has no CUDA-graph part", exact=False)
            else:
                low, high = gib_range(cg.digits)
                expected = _gib_text(part.bytes) if part.exact else {"low": _gib_text(part.low),
                                                                      "high": _gib_text(part.high)}
                self.add(cg, cg.digits, expected, part.low <= high and part.high >= low,
                         "the CUDA-graph part of enginecfg's estimate (" + "; ".join(part.basis) + ")"
                         + ("" if part.subtracted else "; this release does not subtract it"), exact=False)


class ObservedStart(Stage):
    """Records a start-up log's observation beside the run's own figures: the fact
    ``startup_log`` (an :class:`Observation`), after ``impact``.  Its option is the log (a
    :class:`~enginecfg.pipeline.logs.Start` with its log and what the comparison needs);
    ``check_log`` gives it.  It changes nothing."""

    name = "startup-log"
    after = ("impact",)
    facts = ("startup_log",)

    def __init__(self) -> None:
        self.given: Mapping[str, Any] | None = None
        self.release = ""

    def configure(self, pipeline) -> None:
        self.given = pipeline.options_for(self.name)
        self.release = pipeline.rules.release

    def run(self, cfg, ctx) -> None:
        given = self.given
        if not isinstance(given, Mapping) or "start" not in given:
            return  # no log given: nothing observed
        start, log = given["start"], given["log"]
        opts: ImpactOptions = given["options"]
        imp = ctx.fact("impact")
        opts = attrs.evolve(opts, gpu_memory_utilization=imp.memory.gpu_memory_utilization) \
            if isinstance(imp, Impact) else opts
        cmp = _Compare(start, log, self.release, cfg, ctx.fact("startup"), imp, opts, ctx.changes,
                       given.get("aside", {}), given.get("release_note"), given.get("gpu_note"))
        cmp.decisions()
        cmp.kv()
        cmp.memory_budget(imp)
        ctx.record("startup_log", Observation(given.get("source", "-"), given.get("logged_release"), self.release,
                                              given.get("release_note"), (start.first_line, start.last_line),
                                              sorted(cmp.checks, key=lambda c: c.line), cmp.memory,
                                              cmp.explanations))


# --------------------------------------------------------------------------- the command
def check_log(log: str | StartupLog, *, model: Any = None, vllm_version: str | None = None, gpu: str | None = None,
              source: str = "-", revision: str | None = None) -> LogCheck:
    """Read *log* (the text as pasted, or a :class:`~enginecfg.pipeline.logs.StartupLog`) and
    set its last start beside the same deployment resolved here (see the module doc).

    *model*: where the config is when the logged one is not here (a folder, a ``config.json``,
    a repo id); *vllm_version* and *gpu*: what the log does not say (they win over the log's
    own).  A log with no line of a vLLM start, or an unknown release or GPU asked for, raises
    :class:`~enginecfg.InvalidInputError`; a model that cannot be resolved is the result's
    ``error`` (the log is still read back)."""
    parsed = read(log) if isinstance(log, str) else log
    if not isinstance(parsed, StartupLog):
        raise InvalidInputError.for_value("log", log, "the text of a vLLM start-up log")
    if parsed.last is None:
        raise InvalidInputError(f"invalid log ({source}): none of its {parsed.lines:,} lines is a line of a vLLM start-up "
                                "log (no release, arguments, memory, block size or KV-cache figure was found); "
                                "paste the log from `vllm serve` (or the engine's own output)", field="log")
    if vllm_version is not None and not isinstance(vllm_version, str):
        raise InvalidInputError.for_value("vllm_version", vllm_version, "a vLLM version such as X.Y.Z",
                                          flag="--vllm-version")
    start = parsed.last
    logged_release, release, release_note = _release(start, vllm_version)
    gpu_name, gpu_note = _gpu(start, gpu)
    args, memory, aside, where = _arguments(start, parsed)
    chosen = model if model is not None else (start.model or (parsed.command.model if parsed.command else None))
    options = memory_options({**memory, "gpu": gpu_name})
    common = dict(source=source, log=parsed, start=start, logged_release=logged_release, vllm_version=release,
                  release_note=release_note, engine_args=args, options=options, set_aside=aside, gpu=gpu_name,
                  gpu_note=gpu_note, arguments_from=where)
    if chosen is None:
        err = InvalidInputError("the log names no model; give --model PATH|REPO_ID (the folder or repo id of its "
                                "config.json)", field="model")
        return LogCheck(model=None, error=err, **common)
    observed = {"start": start, "log": parsed, "options": options, "aside": aside, "source": source,
                "logged_release": logged_release, "release_note": release_note, "gpu_note": gpu_note}
    try:
        from enginecfg.pipeline.plugins import discover_stages
        from enginecfg.pipeline.run import Pipeline

        impact: Any = options
        if "gpu_memory_utilization" not in memory:  # the release's own default
            impact = {k: v for k, v in attrs.asdict(options, recurse=False).items() if k != "gpu_memory_utilization"}
        pipeline = Pipeline([*discover_stages(release=release), ObservedStart()], vllm_version=release,
                            gpu_validation="off", impact=impact, startup_log=observed)
        result = pipeline.resolve(chosen, revision=revision, **args)
    except EngineCfgError as exc:
        if model is None and isinstance(exc, InvalidInputError):
            exc = InvalidInputError(f"{' '.join(str(exc).split())} (the log's model {chosen!r} is not here: give "
                                    "--model PATH|REPO_ID)", field="model")
        return LogCheck(model=str(chosen), error=exc, **common)
    return LogCheck(model=str(chosen), result=result, **common)
