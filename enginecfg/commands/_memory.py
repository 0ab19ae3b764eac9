"""The memory options the commands take: an :class:`ImpactOptions`, a mapping of its fields, or
None (an H200 at vLLM's default utilization), checked as the ``impact`` stage checks them."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from enginecfg.pipeline.models.capacity import ImpactOptions
from enginecfg.pipeline.run import Pipeline
from enginecfg.stages.impact import parse_options

__all__ = ["memory_options", "figures_pipeline"]

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
