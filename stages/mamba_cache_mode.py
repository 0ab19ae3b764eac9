"""``mamba-cache-mode``: how Mamba state is kept, given prefix caching.

With prefix caching on, the ``none`` mode becomes ``all`` for architectures that support
Mamba prefix caching and ``align`` otherwise; an explicit ``all`` falls back to ``align``
where it is unsupported; ``align`` requires chunked prefill; and an unset Mamba block size
follows the attention block size.  With prefix caching off the mode is ``none`` and an unset
Mamba block size is max_model_len.  Applies to hybrid models and to the attention-free
Mamba / Mamba2 / FalconMamba architectures.
"""

from __future__ import annotations

from enginecfg.pipeline.errors import ConfigRejectedError
from enginecfg.pipeline.stage import Stage
from enginecfg.stages._common import config_hook


class MambaCacheModeStage(Stage):
    name = "mamba-cache-mode"

    def applies(self, cfg) -> bool:
        return cfg.model_config.is_hybrid or config_hook(cfg) == "mamba"

    def check(self, cfg) -> None:
        cc = cfg.cache_config
        if self.applies(cfg) and cc.enable_prefix_caching and cc.mamba_cache_mode == "align" \
                and not cfg.scheduler_config.enable_chunked_prefill:
            raise ConfigRejectedError("Chunked prefill is required for mamba cache mode 'align'.",
                                      field="scheduler_config.enable_chunked_prefill",
                                      vllm_type="AssertionError")

    def run(self, cfg, ctx) -> None:
        cc, mc = cfg.cache_config, cfg.model_config
        if cc.enable_prefix_caching:
            if cc.mamba_cache_mode == "none":
                mode = "all" if mc.supports_mamba_prefix_caching else "align"
                ctx.set("cache_config", "mamba_cache_mode", mode, level="WARNING", log=True,
                        reason=f"Mamba cache mode is set to '{mode}' for {mc.architecture} by default "
                               f"when prefix caching is enabled",
                        explanation=f"Prefix caching is on and the mode was left at 'none'; "
                                    f"{mc.architecture} {'supports' if mode == 'all' else 'does not support'} "
                                    f"Mamba prefix caching, so the mode becomes '{mode}'.")
            if cc.mamba_cache_mode == "all" and not mc.supports_mamba_prefix_caching:
                ctx.set("cache_config", "mamba_cache_mode", "align", level="WARNING", log=True,
                        reason="Hybrid or mamba-based model detected without support for prefix caching "
                               "with Mamba cache 'all' mode: falling back to 'align' mode.",
                        explanation=f"'all' mode needs Mamba prefix-caching support, which "
                                    f"{mc.architecture} lacks, so the mode falls back to 'align'.")
            if cc.mamba_cache_mode == "align" and not cfg.scheduler_config.enable_chunked_prefill:
                raise ConfigRejectedError("Chunked prefill is required for mamba cache mode 'align'.",
                                          field="scheduler_config.enable_chunked_prefill",
                                          vllm_type="AssertionError")
            ctx.info(f"Warning: Prefix caching in Mamba cache '{cc.mamba_cache_mode}' mode is currently "
                     f"enabled. Its support for Mamba layers is experimental. Please report any issues "
                     f"you may observe.")
            if cc.mamba_block_size is None:
                ctx.set("cache_config", "mamba_block_size", cc.block_size,
                        reason=f"with prefix caching the Mamba block size follows the block size "
                               f"({cc.block_size})",
                        explanation=f"Prefix caching is on and no Mamba block size was given, so it "
                                    f"starts at the block size, {cc.block_size:,} tokens.")
        else:
            if cc.mamba_cache_mode != "none":
                ctx.set("cache_config", "mamba_cache_mode", "none", level="WARNING", log=True,
                        reason="Mamba cache mode is set to 'none' when prefix caching is disabled",
                        explanation=f"Prefix caching is off, so no Mamba states are cached: the mode "
                                    f"'{cc.mamba_cache_mode}' becomes 'none'.")
            if cc.mamba_block_size is None:
                ctx.set("cache_config", "mamba_block_size", mc.max_model_len,
                        reason=f"without prefix caching one Mamba block spans max_model_len "
                               f"({mc.max_model_len})",
                        explanation=f"Prefix caching is off and no Mamba block size was given, so one "
                                    f"Mamba block spans the whole context: max_model_len = "
                                    f"{mc.max_model_len:,} tokens.")
