"""enginecfg: resolve, explain and validate LLM inference-engine configs (vLLM 0.19.0 semantics).

The public API::

    from enginecfg import EngineConfig, Pipeline
    result = Pipeline().run(EngineConfig.from_pretrained("path/to/model", block_size=16))
    result.to_dict()          # the run document
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
from enginecfg.pipeline.run import Change, Message, Pipeline, RunResult
from enginecfg.pipeline.stage import Stage, StageContext

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
    "__version__",
]
