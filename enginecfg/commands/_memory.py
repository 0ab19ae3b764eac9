"""The memory options the commands take: an :class:`ImpactOptions`, a mapping of its fields, or
None (an H200 at vLLM's default utilization), checked as the ``impact`` stage checks them."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from enginecfg.pipeline.models.capacity import ImpactOptions
from enginecfg.pipeline.run import Pipeline
from enginecfg.stages.impact import parse_options

__all__ = ["memory_options", "figures_pipeline", "curve_contexts", "curve", "MEMORY_ARGUMENTS", "split_memory",
           "utilization_given", "release_of", "used_memory"]

#: vLLM's memory flags (and the GPU) as keyword arguments of the commands, beside the engine
#: arguments: ``explain(model, gpu_memory_utilization=0.5)`` -> the impact option it sets
MEMORY_ARGUMENTS = {"gpu": "gpu", "gpu_memory_gib": "gpu_memory_gib",
                    "gpu_memory_utilization": "gpu_memory_utilization",
                    "kv_cache_memory_bytes": "kv_cache_memory", "kv_cache_memory": "kv_cache_memory",
                    "num_gpu_blocks_override": "num_gpu_blocks_override", "enforce_eager": "enforce_eager",
                    "estimate_cudagraphs": "estimate_cudagraphs"}


def split_memory(arguments: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(memory options, engine arguments)`` of a command's keyword arguments: vLLM's memory
    flags go to the figures, the rest to the pipeline."""
    memory = {MEMORY_ARGUMENTS[k]: v for k, v in arguments.items() if k in MEMORY_ARGUMENTS}
    return memory, {k: v for k, v in arguments.items() if k not in MEMORY_ARGUMENTS}

MemoryLike = ImpactOptions | Mapping[str, Any] | None


def memory_options(memory: MemoryLike, **override: Any) -> ImpactOptions:
    """*memory* as checked options (bad input names the option, the value and what is allowed)."""
    if memory is None:
        given: dict[str, Any] = {}
    elif isinstance(memory, ImpactOptions):
        given = attrs.asdict(memory, recurse=False)
    elif isinstance(memory, Mapping):
        given = dict(memory)
    else:
        given = memory  # parse_options names what it is not
    if isinstance(given, dict):
        given.update(override)
    return parse_options(given)


def utilization_given(memory: MemoryLike, flags: Mapping[str, Any]) -> bool:
    """Did the caller state vLLM's share of the GPU memory?  (An :class:`ImpactOptions` states
    every field; a mapping or the keyword flags only those they hold.)  A release whose default
    utilization is not 0.19.0's (0.34.0: 1.0 with the extensible KV cache) applies its own
    default when it was not."""
    if isinstance(memory, ImpactOptions):
        return True
    if isinstance(memory, Mapping) and memory.get("gpu_memory_utilization") is not None:
        return True
    return flags.get("gpu_memory_utilization") is not None


def release_of(vllm_version: str | None) -> str:
    """The release a command speaks for: *vllm_version*, else ``$ENGINECFG_VLLM_VERSION``, else
    the default release (an unknown one is refused, naming those there are)."""
    from enginecfg.pipeline import rulepacks
    from enginecfg.pipeline.run import release_from_env

    if vllm_version is None:
        vllm_version = release_from_env()
    return rulepacks.get(vllm_version).release


def figures_pipeline(memory: ImpactOptions, vllm_version: str | None = None, *,
                     utilization: bool = True) -> Pipeline:
    """The pipeline behind ``explain`` and ``plan``: every stage of *vllm_version*'s rules but
    the kernels' proof.  *utilization*: whether the caller gave ``gpu_memory_utilization``
    (when not, the impact stage takes its release's default)."""
    impact: Any = memory
    if not utilization:
        impact = {k: v for k, v in attrs.asdict(memory, recurse=False).items() if k != "gpu_memory_utilization"}
    return Pipeline(gpu_validation="off", impact=impact, vllm_version=vllm_version)


def used_memory(options: ImpactOptions, result) -> ImpactOptions:
    """*options* with the utilization the figures took (a release's own default where the
    caller gave none)."""
    imp = result.facts.get("impact")
    used = getattr(getattr(imp, "memory", None), "gpu_memory_utilization", None)
    if used is None or used == options.gpu_memory_utilization:
        return options
    return attrs.evolve(options, gpu_memory_utilization=used)


def curve_contexts(max_model_len: int, *, start: int = 128) -> tuple[int, ...]:
    """Context lengths for a concurrency curve: from *start* tokens to max_model_len, four
    points per doubling, and max_model_len itself."""
    out: list[int] = []
    n = float(start)
    while n < max_model_len / 1.1:
        out.append(int(n))
        n *= 2 ** 0.25
    out.append(max_model_len)
    return tuple(dict.fromkeys(out))


def curve(result, options: ImpactOptions, contexts=None) -> tuple[tuple[int, float, int], ...]:
    """``(context, requests that fit, KV-cache blocks one request takes)`` of a resolved run
    on the memory *options* describe (the figures' own arithmetic; empty without KV cache)."""
    from enginecfg.pipeline.models.capacity import Impact, concurrency_curve
    from enginecfg.pipeline.models.startup import Startup

    imp = result.facts.get("impact")
    if not isinstance(imp, Impact) or not imp.groups:
        return ()
    points = curve_contexts(imp.max_model_len) if contexts is None else tuple(contexts)
    startup = result.facts.get("startup")
    from enginecfg.commands.findings import start_decision

    if start_decision(result) is not None:
        return _planned_curve(result, imp, startup, options, points)
    # the start-up decisions the figures were made at (the block size, the hybrid-manager flag)
    start = {"startup_block_size": startup.block_size,
             "disable_hybrid_kv_cache_manager": startup.disable_hybrid_kv_cache_manager} \
        if isinstance(startup, Startup) else {}
    return concurrency_curve(result.config, options, points,
                             auto_fit_max_model_len=result.config.engine_args.get("max_model_len") == -1, **start)


def planning_of(release: str | None) -> Any:
    """The module that plans the KV cache of *release* where it is not the first release's
    planning (a release that decides at engine start); None otherwise."""
    import importlib

    from enginecfg.pipeline import releases

    if not releases.known(release) or not releases.get(release).decides_at_engine_start:
        return None
    return importlib.import_module("enginecfg.pipeline.models.v034.kv_planning")


def _planned_curve(result, imp, startup, options: ImpactOptions, points) -> tuple[tuple[int, float, int], ...]:
    """The curve with a later release's KV planning at its start-up decisions: the blocks the
    figures found, over the blocks a request of each context takes."""
    planning = planning_of(result.vllm_version)
    _, _, per_request = planning.plan(result.config, startup, options.card)
    out = []
    for n in points:
        if n > imp.max_model_len:
            break
        need = per_request(n)
        out.append((n, imp.num_blocks / need if need else 0.0, need))
    return tuple(out)
