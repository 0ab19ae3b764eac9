"""``gpu-validation`` for vLLM 0.34.0: not built yet for 0.34.0's page layout.

The kernel checks of :mod:`enginecfg.stages.gpu_validation` lay pages out as 0.19.0 does at
config time; 0.34.0 aligns them at start-up (the ``startup`` fact).  Until the checks read
that layout, a 0.34.0 run records the validation as skipped, saying why, and
``--gpu-validation require-gpu`` is refused for it.
"""

from __future__ import annotations

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.models.v034 import config_time as ct
from enginecfg.stages.gpu_validation import GpuValidationStage


class GpuValidation034Stage(GpuValidationStage):

    def configure(self, pipeline) -> None:
        mode = pipeline.options_for(self.name) or "auto"
        if mode == "require-gpu":
            raise InvalidInputError(f"invalid gpu_validation (--gpu-validation): got 'require-gpu'; GPU validation "
                                    f"of vLLM {ct.RELEASE}'s page layout is not available yet; allowed for "
                                    f"{ct.RELEASE}: auto, interpret, off (recorded as skipped)", field="gpu_validation")
        super().configure(pipeline)

    def run(self, cfg, ctx) -> None:
        reason = ("GPU validation is off (--gpu-validation off)" if self.mode == "off" else
                  f"the kernel checks do not read vLLM {ct.RELEASE}'s start-up page layout yet")
        ctx.record("validation", {"mode": self.mode, "device": None, "status": "skipped", "reason": reason,
                                  "checks": []})
