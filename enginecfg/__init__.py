"""enginecfg: resolve, explain and validate LLM inference-engine configs (vLLM 0.19.0 semantics).

The public API is what this module exports, plus :mod:`enginecfg.testing` (a kit for stage
and listener authors) and the ``enginecfg`` command; everything else is internal and may
change between releases::

    from enginecfg import EngineConfig, Pipeline
    result = Pipeline().run(EngineConfig.from_pretrained("path/to/model", block_size=16))
    result.to_dict()          # the run document

Listeners subscribe to the signals of :mod:`enginecfg.events` (``events.config_changed``,
...); plugin stages subclass :class:`Stage` and order themselves against the names in
:data:`BUILTIN_STAGES`; :func:`describe_stages` lists the stages a pipeline would run.

This module is the application layer: it runs before any ``enginecfg.*`` module and puts
the rooms together.  The engine (:mod:`enginecfg.pipeline`) runs whatever rules it is
given; here the rule packs of the releases enginecfg speaks for are registered
(:mod:`enginecfg.releases`: vLLM 0.19.0's, the default, and 0.34.0's), and a pipeline picks
one with ``Pipeline(vllm_version=...)`` or ``ENGINECFG_VLLM_VERSION``.
"""

from typing import Any

from enginecfg import _layout

_layout.join_checkout(__path__, __file__)  # a checkout's top-level rooms are our subpackages

from enginecfg import releases
from enginecfg.pipeline import events, rulepacks
from enginecfg.pipeline.document import Change, Message, RunResult
from enginecfg.pipeline.errors import (
    ConfigRejectedError,
    EngineCfgError,
    FrozenConfigError,
    InvalidInputError,
    RunInterruptedError,
    StageError,
    StageOrderError,
    StageTimeoutError,
)
from enginecfg.pipeline.loading import EngineConfig, load_pretrained, prefetch_pretrained
from enginecfg.pipeline.plugins import describe_stages
from enginecfg.pipeline.run import Pipeline
from enginecfg.pipeline.stage import Stage, StageContext
from enginecfg.stages import BUILTIN_STAGES

#: the release whose rules the built-in stages and the loader implement (the default pack)
VLLM_RELEASE = releases.DEFAULT_RELEASE

releases.register_all()


def __getattr__(name: str) -> Any:
    # the version is read when asked for: the package metadata scan costs milliseconds
    if name == "__version__":
        global __version__
        __version__ = _layout.version()
        return __version__
    raise AttributeError(f"module 'enginecfg' has no attribute {name!r}")


__all__ = [
    "EngineConfig",
    "Pipeline",
    "RunResult",
    "Change",
    "Message",
    "Stage",
    "StageContext",
    "EngineCfgError",
    "InvalidInputError",
    "ConfigRejectedError",
    "FrozenConfigError",
    "StageError",
    "StageTimeoutError",
    "StageOrderError",
    "RunInterruptedError",
    "events",
    "describe_stages",
    "BUILTIN_STAGES",
    "__version__",
]
