"""``hybrid-kv-scales``: no KV-scale calibration for hybrid models.

The calibration pass measures KV scales while the recurrent (GDN / Mamba / SSM) state is
still uninitialised, so the scales come out wrong; vLLM turns ``calculate_kv_scales`` off
for hybrid models and uses a scale of 1.0.  This is the first step of vLLM's hybrid
alignment, kept as its own stage so that its warning precedes the Mamba cache-mode ones.
"""

from __future__ import annotations

from enginecfg.pipeline.stage import Stage


class HybridKvScalesStage(Stage):
    name = "hybrid-kv-scales"

    def applies(self, cfg) -> bool:
        return cfg.model_config.is_hybrid and cfg.cache_config.calculate_kv_scales

    def run(self, cfg, ctx) -> None:
        ctx.set("cache_config", "calculate_kv_scales", False, level="WARNING", log=True,
                reason=f"Disabling calculate_kv_scales for hybrid model '{cfg.model}'. Hybrid models with "
                       f"recurrent layers (GDN, Mamba, SSM) produce unreliable KV cache scales during the "
                       f"calibration pass because recurrent state is uninitialized. Using default scale "
                       f"of 1.0 instead.")
