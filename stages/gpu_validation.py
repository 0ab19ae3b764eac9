"""``gpu-validation``: the last stage; Triton kernels prove the resolved config.

Placeholder wiring: the checks live in :mod:`enginecfg.kernels`; this stage imports torch
and triton only when it runs a check.
"""

from __future__ import annotations

from enginecfg.pipeline.stage import Stage


class GpuValidationStage(Stage):
    name = "gpu-validation"
    after = ("vllm-checks",)

    def __init__(self) -> None:
        self.mode = "auto"

    def configure(self, pipeline) -> None:
        self.mode = pipeline.gpu_validation

    def run(self, cfg, ctx) -> None:
        ctx.record("validation", {"mode": self.mode, "device": None, "status": "skipped",
                                  "reason": "GPU validation is not available in this build", "checks": []})
