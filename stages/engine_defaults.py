"""``engine-defaults``: chunked prefill and prefix caching the caller left unset.

vLLM fills these in after the model config (and its pooling decision) exists: chunked
prefill defaults to on unless the model is encoder-decoder; prefix caching to on only for
plain decoder models.  Hybrid and attention-free generative models therefore start with
prefix caching off, and a MEAN- or CLS-pooling (or bidirectional) model with both off.
The rules are vLLM's knowledge (:mod:`enginecfg.pipeline.models.engine_defaults`); this
stage applies them and says why.  Where the caller set one against the model's default
(chunked prefill off for a generative model that supports it, chunked prefill or prefix
caching on for a pooling model that does not), it logs vLLM's warning.
"""

from __future__ import annotations

from enginecfg.pipeline.models.engine_defaults import (
    attn_type,
    chunked_prefill_supported,
    prefix_caching_supported,
)
from enginecfg.pipeline.stage import Stage


def _what(cfg, kind: str) -> str:
    """'a hybrid generate model', 'a decoder pooling model pooling MEAN / ALL'."""
    pc = cfg.pooler_config
    pooling = (f" (sequence pooling {pc.seq_pooling_type}, token pooling {pc.tok_pooling_type})"
               if pc is not None else "")
    return f"{_a(kind.replace('_', '-'))} {cfg.model_config.runner_type} model{pooling}"


def _against_the_default(cfg) -> list[str]:
    """vLLM's warnings for a setting given against the model's default, in its order."""
    out = []
    chunked, prefix = cfg.scheduler_config.enable_chunked_prefill, cfg.cache_config.enable_prefix_caching
    runner = cfg.model_config.runner_type
    if chunked is not None:
        if runner == "generate" and not chunked and chunked_prefill_supported(cfg):
            out.append("This model does not officially support disabling chunked prefill. Disabling this "
                       "manually may cause the engine to crash or produce incorrect outputs.")
        elif runner == "pooling" and chunked and not chunked_prefill_supported(cfg):
            out.append("This model does not officially support chunked prefill. Enabling this manually may "
                       "cause the engine to crash or produce incorrect outputs.")
    if prefix is not None and runner == "pooling" and prefix and not prefix_caching_supported(cfg):
        out.append("This model does not officially support prefix caching. Enabling this manually may cause "
                   "the engine to crash or produce incorrect outputs.")
    return out


def _a(word: str) -> str:
    """*word* with its article: "a decoder", "an encoder_only", "an attention_free"."""
    return ("an " if word[:1] in "aeiou" else "a ") + word


class EngineDefaultsStage(Stage):
    name = "engine-defaults"
    vllm_step = "model"

    def applies(self, cfg) -> bool:
        return cfg.scheduler_config.enable_chunked_prefill is None or cfg.cache_config.enable_prefix_caching is None \
            or bool(_against_the_default(cfg))

    # -- what a release decides differently (a later release's stage overrides these) --------
    def warnings(self, cfg) -> list[str]:
        """The warnings vLLM gives a setting against the model's defaults."""
        return _against_the_default(cfg)

    def kind(self, cfg) -> str:
        return attn_type(cfg)

    def chunked_default(self, cfg) -> bool:
        return chunked_prefill_supported(cfg)

    def prefix_default(self, cfg, ctx, kind: str) -> tuple[bool, str]:
        """Prefix caching's default, and the models the release turns it on for, in words."""
        return prefix_caching_supported(cfg), ("only for decoder models (a pooling one must pool LAST or ALL, "
                                               "not MEAN, CLS or STEP)")

    def who(self, ctx) -> str:
        return "vLLM"

    def run(self, cfg, ctx) -> None:
        for warning in self.warnings(cfg):
            ctx.warn(warning)
        kind = self.kind(cfg)
        if cfg.scheduler_config.enable_chunked_prefill is None:
            on = self.chunked_default(cfg)
            ctx.set("scheduler_config", "enable_chunked_prefill", on,
                    reason=f"default: chunked prefill is {'on' if on else 'off'} for {_a(kind)} "
                           f"{cfg.model_config.runner_type} model",
                    explanation=f"--enable-chunked-prefill was not given. {self.who(ctx)} turns it on unless "
                                f"the model is encoder-decoder, or a pooling model that is "
                                f"encoder-only or pools MEAN, CLS or STEP; this one is {_what(cfg, kind)}, "
                                f"so it is {'on' if on else 'off'}.")
        if cfg.cache_config.enable_prefix_caching is None:
            on, models = self.prefix_default(cfg, ctx, kind)
            ctx.set("cache_config", "enable_prefix_caching", on,
                    reason=f"default: prefix caching is {'on' if on else 'off'} for {_a(kind)} "
                           f"{cfg.model_config.runner_type} model",
                    explanation=f"--enable-prefix-caching was not given. {self.who(ctx)} turns it on {models}; "
                                f"this one is {_what(cfg, kind)}, so it is {'on' if on else 'off'}.")
