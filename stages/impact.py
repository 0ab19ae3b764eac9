"""``impact``: what the resolved settings cost in KV cache, before anything is loaded.

It changes nothing.  After ``hybrid-alignment`` has fixed the block and page sizes it works
out, with vLLM 0.19.0's own arithmetic (:mod:`enginecfg.pipeline.models.capacity`), the
KV-cache groups, page sizes, tokens of KV cache, concurrency at several context lengths
and the largest max_model_len that fits one GPU, and records them as the ``impact`` fact
of the run, so the run document, the audit store, ``diff`` and ``history`` carry them.

Options (``Pipeline(impact=...)``: a dict of them, or an
:class:`~enginecfg.pipeline.models.capacity.ImpactOptions`), vLLM 0.19.0's memory flags with
their meaning: ``gpu`` (a preset of :mod:`enginecfg.pipeline.models.gpus`, default the H200),
``gpu_memory_gib`` (the card's memory instead of the preset's), ``gpu_memory_utilization``
(0.9), ``kv_cache_memory`` or vLLM's spelling ``kv_cache_memory_bytes`` (bytes per GPU;
skips the memory budget's estimate; 0 reads as unset), ``num_gpu_blocks_override`` (the block count),
``contexts`` (context lengths for the concurrency figures), ``estimate_cudagraphs`` (vLLM's
``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``: subtract its CUDA graph estimate; None, the
release's default), ``enforce_eager`` (``--enforce-eager``: no CUDA graphs).  A ``--max-model-len -1`` run
gets the start-up auto-fit.  The fact is an
:class:`~enginecfg.pipeline.models.capacity.Impact`; a model whose per-layer pattern
enginecfg does not know, or a config field the figures need but the stages do not, records an
:class:`~enginecfg.pipeline.models.capacity.ImpactUnavailable` instead of failing the run.
The run document holds their ``to_dict()``.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError
from enginecfg.pipeline.models import capacity
from enginecfg.pipeline.models.capacity import Impact, ImpactOptions, ImpactUnavailable
from enginecfg.pipeline.models.gpus import Gpu, find_gpu, preset_of
from enginecfg.pipeline.models.startup import Startup, StartupUnavailable
from enginecfg.pipeline.stage import Stage

_NAMES = tuple(a.name for a in attrs.fields(ImpactOptions))
#: other spellings of an option (vLLM's own)
_ALIASES = {"kv_cache_memory_bytes": "kv_cache_memory"}


#: the most GiB a card's memory may be: its bytes are stored as 64-bit integers (2**63 bytes)
MAX_GPU_MEMORY_GIB = 2**33


def _number(name: str, value: Any, *, low: float, high: float | None, flag: str, below: bool = False) -> float:
    """*value* if it is a finite number > *low* and <= *high* (< *high*: *below*), else bad input
    naming the option, the value and what is allowed (an infinity, a NaN, or a number too large
    for the arithmetic, never an exception text)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value > low and (high is None or (value < high if below else value <= high))
    if not ok:
        top = f"{int(high):,}" if high is not None and high == int(high) and high > 1 else f"{high:g}"
        allowed = f"a number > {low:g}" + (f" and {'<' if below else '<='} {top}" if high is not None else "")
        raise InvalidInputError.for_value(name, value, allowed, flag=flag)
    return value


def _utilization(value: Any) -> None:
    """``--gpu-memory-utilization``: a finite number > 0 and <= 1; a number outside is refused
    in the words of vLLM's CacheConfig (pydantic's), as both releases refuse it."""
    try:
        _number("gpu_memory_utilization", value, low=0, high=1, flag="--gpu-memory-utilization")
    except InvalidInputError as exc:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
            words = "Input should be greater than 0" if value <= 0 else "Input should be less than or equal to 1"
            exc.message = exc.message.replace("allowed: ", f"{words} (allowed: ", 1) + ")"
            exc.args = (exc.message,)
        raise


#: the options of a pipeline that gives none, by its GPU (frozen values: shared)
_NO_OPTIONS: dict[Gpu | None, ImpactOptions] = {}


def parse_options(options: Any, card: Gpu | None = None) -> ImpactOptions:
    """The stage's options, checked; bad input names the option, the value and what is allowed.
    *card*: the pipeline's GPU (``Pipeline(gpu=...)``), which the figures assume unless the
    options name one; naming another is refused (one run, one GPU)."""
    if options is None:
        try:
            return _NO_OPTIONS[card]
        except (KeyError, TypeError):  # TypeError: a card that cannot be a key (worked out each time)
            pass
        parsed = _parse_options({}, card)
        try:
            if len(_NO_OPTIONS) < 64:
                _NO_OPTIONS[card] = parsed
        except TypeError:
            pass
        return parsed
    return _parse_options(options, card)


def _parse_options(options: Any, card: Gpu | None) -> ImpactOptions:
    if isinstance(options, ImpactOptions):
        options = attrs.asdict(options, recurse=False)
    if not isinstance(options, dict):
        raise InvalidInputError.for_value("impact", options, "a dict of impact options")
    options = dict(options)
    for alias, name in _ALIASES.items():
        if alias in options:
            if name in options and options[name] != options[alias]:
                raise InvalidInputError(f"invalid impact options: {alias} ({options[alias]!r}) and {name} "
                                        f"({options[name]!r}) are one option given twice", field=name)
            options[name] = options.pop(alias)
    unknown = set(options) - set(_NAMES)
    if unknown:
        raise InvalidInputError(f"unknown impact option(s) {sorted(unknown)}; known: "
                                f"{', '.join(_NAMES)} (kv_cache_memory_bytes: kv_cache_memory)", field="impact")
    given = {name: options[name] for name in _NAMES if name in options}
    if card is not None:
        preset, memory = preset_of(card)
        if "gpu" not in given or given["gpu"] is None:
            given["gpu"] = preset
            if memory is not None and given.get("gpu_memory_gib") is None:
                given["gpu_memory_gib"] = memory
        elif find_gpu(given["gpu"].name if isinstance(given["gpu"], Gpu) else given["gpu"]).name != preset:
            raise InvalidInputError(
                f"invalid impact options: gpu {given['gpu']!r} is not the pipeline's GPU {card.name!r}; "
                "give the GPU once (Pipeline(gpu=...))", field="gpu")
    out = attrs.asdict(ImpactOptions(), recurse=False) | given
    if out["gpu"] is None:
        out["gpu"] = ImpactOptions().gpu
    if isinstance(out["gpu"], Gpu):
        out["gpu"] = out["gpu"].name
    out["gpu"] = find_gpu(out["gpu"]).name
    if out["gpu_memory_gib"] is not None:
        _number("gpu_memory_gib", out["gpu_memory_gib"], low=0, high=MAX_GPU_MEMORY_GIB, below=True,
                flag="--gpu-memory")
    # vLLM 0.19.0 and 0.34.0: gt=0, le=1 (CacheConfig), refused in pydantic's words
    _utilization(out["gpu_memory_utilization"])
    kv = out["kv_cache_memory"]
    if kv is not None and (isinstance(kv, bool) or not isinstance(kv, int)):
        # vLLM takes any integer: 0 reads as unset, a negative one leaves no memory at start-up
        raise InvalidInputError.for_value("kv_cache_memory", kv, "a number of bytes (an integer)",
                                          flag="--kv-cache-memory-bytes")
    blocks = out["num_gpu_blocks_override"]
    if blocks is not None and (isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1):
        raise InvalidInputError.for_value(
            "num_gpu_blocks_override", blocks, "a positive number of blocks (vLLM accepts fewer "
            "but cannot start an engine without one)", flag="--num-gpu-blocks-override")
    for name, flag in (("estimate_cudagraphs", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"),
                       ("enforce_eager", "--enforce-eager")):
        value = out[name]
        if not (isinstance(value, bool) or (value is None and name == "estimate_cudagraphs")):
            raise InvalidInputError.for_value(name, value, "true or false" + (" (or null: the release's default)"
                                                                            if name == "estimate_cudagraphs" else ""),
                                              flag=flag)
    ctxs = out["contexts"]
    if not isinstance(ctxs, (list, tuple)) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in ctxs):
        raise InvalidInputError.for_value("contexts", ctxs, "a list of positive token counts")
    return ImpactOptions(**out)


def with_start_verdict(figures: Impact | ImpactUnavailable, startup: Any,
                       card: Gpu | None = None) -> Impact | ImpactUnavailable:
    """The figures carrying the run's one start verdict: an engine start that fails (the
    ``startup`` fact's failure) does not start, whatever the memory says (*card*: the GPU whose
    worker memory request vLLM checks before it builds the model; None: the release checks none);
    a start-up step that was not worked out gives no verdict (so no start gate passes it), even
    beside figures."""
    failure = getattr(startup, "failure", None)
    if failure is not None:
        # vLLM checks the block size against the scheduler after its KV planning (0.34.0 C9.6)
        return capacity.with_start_failure(figures, failure.text, card, after_kv_check=failure.rule == "C9.6")
    if isinstance(startup, StartupUnavailable) and isinstance(figures, Impact):
        return ImpactUnavailable(f"the start-up step was not worked out: {startup.error}", startup.field)
    return figures


class ImpactStage(Stage):
    name = "impact"
    facts = ("impact",)

    def __init__(self) -> None:
        self.options = ImpactOptions()

    def configure(self, pipeline) -> None:
        self.options = parse_options(pipeline.options_for(self.name), pipeline.gpu)

    def run(self, cfg, ctx) -> None:
        startup = ctx.fact("startup")
        ctx.record("impact", with_start_verdict(self._figures(cfg, self.options, startup), startup,
                                                self.options.card))

    @staticmethod
    def _figures(cfg, opts: ImpactOptions, startup=None) -> Impact | ImpactUnavailable:
        # the engine start's block size and hybrid-manager flag (the ``startup`` fact), when
        # the start-up step ran and decided
        start = {"startup_block_size": startup.block_size,
                 "disable_hybrid_kv_cache_manager": startup.disable_hybrid_kv_cache_manager} \
            if isinstance(startup, Startup) else {}
        try:
            return capacity.impact(cfg, gpu_memory_gib=opts.gpu_memory_gib, gpu=opts.gpu,
                                   gpu_memory_utilization=opts.gpu_memory_utilization,
                                   kv_cache_memory=opts.kv_cache_memory, contexts=opts.contexts,
                                   num_gpu_blocks_override=opts.num_gpu_blocks_override,
                                   auto_fit_max_model_len=cfg.engine_args.get("max_model_len") == -1,
                                   estimate_cudagraphs=opts.estimate_cudagraphs, enforce_eager=opts.enforce_eager,
                                   **start)
        except EngineCfgError as exc:
            return ImpactUnavailable(str(exc), exc.field)
        except (ArithmeticError, TypeError, ValueError, KeyError, IndexError) as exc:
            # the figures inform, they do not decide: a config the stages accepted is not
            # rejected because its cost could not be worked out
            return ImpactUnavailable(f"the KV-cache figures could not be computed: "
                                     f"{type(exc).__name__}: {exc}")
