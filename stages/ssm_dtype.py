"""``ssm-dtype``: the SSM-state dtype that NemotronH and Qwen3.5 checkpoints ask for.

NemotronH: an ``auto`` state dtype becomes the top-level config's ``mamba_ssm_cache_dtype``
(float16 where the config has none).  Qwen3.5: ``auto`` becomes the text config's
``mamba_ssm_dtype`` when it has one; a different explicit value from the caller is kept,
with vLLM's warning.  Runs before the hybrid alignment, whose Mamba page size depends on it.
"""

from __future__ import annotations

from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.stage import Stage
from enginecfg.stages._common import config_hook


class SsmDtypeStage(Stage):
    name = "ssm-dtype"
    #: NemotronH's SSM-state dtype when its config names none (vLLM 0.34.0: float32)
    nemotron_h_default = "float16"

    def applies(self, cfg) -> bool:
        return config_hook(cfg) in ("nemotron_h", "qwen3_5")

    def run(self, cfg, ctx) -> None:
        cc = cfg.cache_config
        if config_hook(cfg) == "nemotron_h":
            if cc.mamba_ssm_cache_dtype == "auto":
                given = typed.attr(cfg.model_config.hf_config, "mamba_ssm_cache_dtype", typed.STR)
                value = self.nemotron_h_default if given is None else given
                ctx.set("cache_config", "mamba_ssm_cache_dtype", value, log=True,
                        reason=f"Updating mamba_ssm_cache_dtype to '{value}' for NemotronH model",
                        explanation="--mamba-ssm-cache-dtype was left at 'auto', so a NemotronH model "
                                    "takes the SSM-state dtype from its config: "
                                    + (f"mamba_ssm_cache_dtype = {value!r}." if given is not None else
                                       f"it names none, so {self.nemotron_h_default!r}."))
            return
        wanted = typed.attr(cfg.model_config.hf_text_config, "mamba_ssm_dtype", typed.STR)
        if cc.mamba_ssm_cache_dtype == "auto":
            if wanted is not None:
                ctx.set("cache_config", "mamba_ssm_cache_dtype", wanted,
                        reason=f"Qwen3.5 checkpoint sets mamba_ssm_dtype={wanted!r}",
                        explanation=f"--mamba-ssm-cache-dtype was left at 'auto', so a Qwen3.5 model "
                                    f"takes its text config's mamba_ssm_dtype = {wanted!r}.")
        elif wanted is not None and cc.mamba_ssm_cache_dtype != wanted:
            ctx.warn(f"Qwen3.5 model specifies mamba_ssm_dtype='{wanted}' in its config, but "
                     f"--mamba-ssm-cache-dtype='{cc.mamba_ssm_cache_dtype}' was passed. "
                     f"Using the user-specified value.")
