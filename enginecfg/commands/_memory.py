"""The memory options the commands take: an :class:`ImpactOptions`, a mapping of its fields, or
None (an H200 at vLLM's default utilization), checked as the ``impact`` stage checks them."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from enginecfg.pipeline.models.capacity import ImpactOptions
from enginecfg.pipeline.run import Pipeline
from enginecfg.stages.impact import parse_options

__all__ = ["memory_options", "figures_pipeline", "curve_contexts", "curve", "MEMORY_ARGUMENTS", "split_memory"]

#: vLLM's memory flags (and the GPU) as keyword arguments of the commands, beside the engine
#: arguments: ``explain(model, gpu_memory_utilization=0.5)`` -> the impact option it sets
MEMORY_ARGUMENTS = {"gpu": "gpu", "gpu_memory_gib": "gpu_memory_gib",
                    "gpu_memory_utilization": "gpu_memory_utilization",
                    "kv_cache_memory_bytes": "kv_cache_memory", "kv_cache_memory": "kv_cache_memory",
                    "num_gpu_blocks_override": "num_gpu_blocks_override"}


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


def figures_pipeline(memory: ImpactOptions) -> Pipeline:
    """The pipeline behind ``explain`` and ``plan``: every stage but the kernels' proof."""
    return Pipeline(gpu_validation="off", impact=memory)


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

    imp = result.facts.get("impact")
    if not isinstance(imp, Impact) or not imp.groups:
        return ()
    points = curve_contexts(imp.max_model_len) if contexts is None else tuple(contexts)
    return concurrency_curve(result.config, options, points,
                             auto_fit_max_model_len=result.config.engine_args.get("max_model_len") == -1)
