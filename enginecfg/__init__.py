"""enginecfg: resolve, explain and validate LLM inference-engine configs (vLLM 0.19.0 semantics)."""
from enginecfg.pipeline.errors import (
    ConfigRejectedError,
    EngineCfgError,
    FrozenConfigError,
    InvalidInputError,
    StageError,
    StageOrderError,
)

__version__ = "0.1.0"
