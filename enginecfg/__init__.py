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
"""

from enginecfg import _layout

_layout.join_checkout(__path__, __file__)  # a checkout's top-level rooms are our subpackages

from enginecfg.pipeline.config import EngineConfig
from enginecfg.pipeline.errors import (
    ConfigRejectedError,
    EngineCfgError,
    FrozenConfigError,
    InvalidInputError,
    StageError,
    StageOrderError,
)
from enginecfg.pipeline import events
from enginecfg.pipeline.plugins import describe_stages
from enginecfg.pipeline.run import Change, Message, Pipeline, RunResult
from enginecfg.pipeline.stage import Stage, StageContext
from enginecfg.stages import BUILTIN_STAGES

__version__ = "0.1.0"

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
    "StageOrderError",
    "events",
    "describe_stages",
    "BUILTIN_STAGES",
    "__version__",
]
