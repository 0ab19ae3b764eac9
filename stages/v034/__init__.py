"""vLLM 0.34.0's built-in stages, in its order (RULES.md C0 and §3).

:data:`STAGES` is the one statement of the 0.34.0 order, as :data:`enginecfg.stages.BUILTIN_STAGES`
is 0.19.0's.  Decisions 0.34.0 makes as 0.19.0 does keep the same stage (``pooling`` ... share
the 0.19.0 names; where the rule differs the class is 0.34.0's own, :mod:`.config_time`); the
start-up step is :mod:`.startup`; ``impact`` is :mod:`.impact`.  0.19.0's ``hybrid-kv-scales``
has no counterpart (0.34.0 removed ``calculate_kv_scales``), and ``hybrid-alignment`` moved
from config time to the start-up step.
"""

from enginecfg.stages.v034.config_time import (EngineDefaults034Stage, Gemma4Backend034Stage,
                                               MambaCacheMode034Stage, Pooling034Stage, Scheduler034Stage,
                                               SsmDtype034Stage, VllmChecks034Stage)
from enginecfg.stages.v034.gpu_validation import GpuValidation034Stage
from enginecfg.stages.v034.impact import Impact034Stage
from enginecfg.stages.v034.startup import (AttentionBackend034Stage, EngineStart034Stage, HybridAlignment034Stage,
                                           StartupBlockSize034Stage)

STAGES = (
    Pooling034Stage,
    EngineDefaults034Stage,
    Scheduler034Stage,
    Gemma4Backend034Stage,
    SsmDtype034Stage,
    MambaCacheMode034Stage,
    VllmChecks034Stage,
    AttentionBackend034Stage,
    StartupBlockSize034Stage,
    HybridAlignment034Stage,
    EngineStart034Stage,
    Impact034Stage,
    GpuValidation034Stage,
)

__all__ = ["STAGES"] + [cls.__name__ for cls in STAGES]
