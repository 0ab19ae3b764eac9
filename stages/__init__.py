"""The built-in verification stages, in vLLM 0.19.0's order.

:data:`BUILTIN_STAGES` is the one statement of that order: each built-in runs after the one
before it in the tuple (its ``after`` is set from it here). A new built-in stage is its
module and its entry in the tuple. Stage names are a public contract: plugins order
themselves against them.
"""

if __name__ == "stages":  # imported by its bare name from a checkout root on sys.path
    from enginecfg._layout import hand_over_bare_import

    hand_over_bare_import(__name__, __file__)

from enginecfg.stages.engine_defaults import EngineDefaultsStage
from enginecfg.stages.engine_start import EngineStartStage
from enginecfg.stages.gemma4_backend import Gemma4BackendStage
from enginecfg.stages.gpu_validation import GpuValidationStage
from enginecfg.stages.hybrid_alignment import HybridAlignmentStage
from enginecfg.stages.hybrid_kv_scales import HybridKvScalesStage
from enginecfg.stages.impact import ImpactStage
from enginecfg.stages.mamba_cache_mode import MambaCacheModeStage
from enginecfg.stages.pooling import PoolingStage
from enginecfg.stages.scheduler import SchedulerStage
from enginecfg.stages.ssm_dtype import SsmDtypeStage
from enginecfg.stages.vllm_checks import VllmChecksStage

BUILTIN_STAGES = (
    PoolingStage,
    EngineDefaultsStage,
    SchedulerStage,
    Gemma4BackendStage,
    SsmDtypeStage,
    HybridKvScalesStage,
    MambaCacheModeStage,
    HybridAlignmentStage,
    VllmChecksStage,
    EngineStartStage,
    ImpactStage,
    GpuValidationStage,
)

for _previous, _stage in zip(BUILTIN_STAGES, BUILTIN_STAGES[1:]):
    _stage.after = (_previous.name,)
del _previous, _stage

__all__ = ["BUILTIN_STAGES"] + [cls.__name__ for cls in BUILTIN_STAGES]
