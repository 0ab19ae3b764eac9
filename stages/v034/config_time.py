"""vLLM 0.34.0's config-time stages where they differ from 0.19.0's (RULES.md C2-C9).

Each keeps the name of the 0.19.0 stage that makes the same decision (plugins order against
names): ``pooling`` (C2: a checkpoint that names no pooling fails vLLM's assertion),
``engine-defaults`` (C3: generative hybrids default to prefix caching), ``scheduler`` (C3.5:
0.19.0's checks against 0.34.0's budget defaults, which depend on the GPU), ``gemma4-backend``
(C4: FlashAttention 4 where the GPU has it, per-layer FA3/FA4 for an FP8 KV cache on Hopper,
TRITON_ATTN only without FA4), ``ssm-dtype`` (C5: NemotronH falls back to float32),
``mamba-cache-mode`` (C7: 'align' exactly when prefix caching is on) and ``vllm-checks`` (C9:
the float KV-dtype check first).  0.19.0's ``hybrid-kv-scales`` has no counterpart (C6), and
its ``hybrid-alignment`` moved to the start-up step (C8, :mod:`.startup`).
"""

from __future__ import annotations

import functools

from enginecfg.pipeline.errors import ConfigRejectedError
from enginecfg.pipeline.hf import HFConfigView, typed
from enginecfg.pipeline.models.gpus import DEFAULT_GPU
from enginecfg.pipeline.models.v034 import config_time as ct
from enginecfg.stages._common import config_hook
from enginecfg.stages.engine_defaults import EngineDefaultsStage
from enginecfg.stages.gemma4_backend import Gemma4BackendStage
from enginecfg.stages.mamba_cache_mode import MambaCacheModeStage
from enginecfg.stages.pooling import PoolingStage
from enginecfg.stages.scheduler import SchedulerStage
from enginecfg.stages.ssm_dtype import SsmDtypeStage
from enginecfg.stages.vllm_checks import VllmChecksStage
from enginecfg.pipeline.stage import Stage
from enginecfg.pipeline.releases import in_force



class Pooling034Stage(PoolingStage):
    """C2: as 0.19.0, but a LlamaNemotronVL checkpoint with no pooling name at all (and no
    ``llm_config``) fails vLLM's ``assert isinstance(pooling, str)``; a LlamaBidirectional one
    whose pooling name is absent or null is refused with vLLM 0.34.0's message
    (``tests/issue29_oracle/bidir_config_time_034.json``)."""

    def _llama_nemotron_vl(self, cfg, ctx) -> None:
        hf = cfg.model_config.hf_config
        llm = typed.attr(hf, "llm_config", typed.ANY)
        c2 = in_force(ctx.release, "C2")  # before C2 (0.28.0): 0.19.0's "pool_type None"
        if c2 and typed.attr(hf, "pooling", typed.ANY) is None and not isinstance(llm, HFConfigView):
            raise ConfigRejectedError(
                "1 validation error for ModelConfig: Assertion failed: the LlamaNemotronVL checkpoint names no "
                f"pooling (hf_config.pooling, hf_config.llm_config.pooling), which vLLM"
                f"{'' if ctx.release is None else f' {ctx.release}'} asserts is a string",
                field="hf_config.pooling", vllm_type="AssertionError")
        super()._llama_nemotron_vl(cfg, ctx)

    def _bidirectional_pooling(self, hf):
        pooling = typed.attr(hf, "pooling", typed.ANY)  # absent reads as None, as vLLM 0.34.0 reads it
        if pooling is None:
            raise ConfigRejectedError(ct.BIDIRECTIONAL_NO_POOLING, field="hf_config.pooling", vllm_type="ValueError")
        return pooling


class EngineDefaults034Stage(EngineDefaultsStage):
    """C3.1-C3.2: chunked prefill as 0.19.0 (without its warnings); prefix caching on for
    generative hybrids since C3.2b."""

    def warnings(self, cfg) -> list[str]:
        return []

    def kind(self, cfg) -> str:
        return ct.attn_type(cfg)

    def chunked_default(self, cfg) -> bool:
        return ct.chunked_prefill_supported(cfg)

    def prefix_default(self, cfg, ctx, kind: str) -> tuple[bool, str]:
        hybrids = in_force(ctx.release, "C3.2b")  # the hybrids' default since C3.2b
        on = ct.prefix_caching_supported(cfg) and (hybrids or kind != "hybrid")
        return on, (f"for {'decoder and generative hybrid models' if hybrids else 'decoder models, not hybrids'} "
                    f"(a pooling one must pool LAST or ALL)")

    def who(self, ctx) -> str:
        return f"vLLM {ctx.release}"


class Gemma4Backend034Stage(Stage):
    """C4: Gemma 4 with heterogeneous head sizes: FlashAttention 4 for every layer where the
    GPU has it (per-layer FA3/FA4 with an FP8 KV cache on Hopper), else TRITON_ATTN."""

    name = "gemma4-backend"

    def __init__(self) -> None:
        self.gpu = DEFAULT_GPU

    def configure(self, pipeline) -> None:
        self.gpu = pipeline.gpu

    def applies(self, cfg) -> bool:
        return config_hook(cfg) == "gemma4"

    def run(self, cfg, ctx) -> None:
        if not in_force(ctx.release, "C4a"):
            return Gemma4BackendStage.run(self, cfg, ctx)  # before C4a: 0.19.0's TRITON_ATTN over 256
        release = ctx.release
        # the layers' head sizes, read once: the rule reads them from C4b on, the words always
        dims = ct.gemma4_head_dims(cfg) if in_force(release, "C4b") else None
        rule = ct.gemma4_rule(cfg, self.gpu, release, dims=dims)
        if rule is None:
            return
        message, backend, version = rule
        if dims is None:
            dims = ct.gemma4_head_dims(cfg)
        sizes = " and ".join(f"{k} {v}" for k, v in dims.items())
        if backend is not None:
            ctx.set("attention_config", "backend", backend, log=True, reason=message,
                    explanation=f"The layers' head sizes differ ({sizes}). FlashAttention 4 is not available on "
                                f"the {self.gpu.name} (compute capability {self.gpu.capability_text}), so every "
                                f"layer uses TRITON_ATTN.")
        elif version is not None:
            ctx.set("attention_config", "flash_attn_version", version, log=True, reason=message,
                    explanation=f"The layers' head sizes differ ({sizes}); FlashAttention 4 takes both on the "
                                f"{self.gpu.name}, so every layer runs it, rather than FA3 for some and FA4 for "
                                f"the others.")
        else:
            ctx.info(message)


#: the text-only Qwen3.5 classes: no hook under their own name until C5c, but from C5d (0.26.0) the
#: hook lookup retries under the normalised name, Qwen3.5's multimodal class, whose hook they share
_QWEN3_5_TEXT = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")


class SsmDtype034Stage(SsmDtypeStage):
    """C5: as 0.19.0, with NemotronH's fallback float32; the text-only Qwen3.5 classes take the
    Qwen3.5 SSM dtype from C5d."""

    nemotron_h_default = ct.NEMOTRON_H_SSM_DTYPE

    def configure(self, pipeline) -> None:
        self.release = getattr(pipeline, "release", None)

    def applies(self, cfg) -> bool:
        release = getattr(self, "release", None)
        return super().applies(cfg) or (cfg.model_config.architecture in _QWEN3_5_TEXT
                                        and in_force(release, "C5d"))


def _chunked_prefill_required(c7f: bool) -> ConfigRejectedError:
    """The assertion of prefix caching without chunked prefill, in C7f's words or before them."""
    return ConfigRejectedError("Chunked prefill is required for Mamba prefix caching." if c7f
                               else "Chunked prefill is required for mamba cache mode 'align'.",
                               field="scheduler_config.enable_chunked_prefill", vllm_type="AssertionError")


class MambaCacheMode034Stage(MambaCacheModeStage):
    """C7: with prefix caching on, mode 'align' (an INFO line), chunked prefill required and an
    unset Mamba block size the block size; off, mode 'none' and max_model_len."""

    release = None

    def configure(self, pipeline) -> None:
        super().configure(pipeline)
        self.release = getattr(pipeline, "release", None)

    def check(self, cfg) -> None:
        if not in_force(self.release, "C7c"):
            return super().check(cfg)  # before C7c: 0.19.0's check
        cc = cfg.cache_config
        has = functools.partial(in_force, self.release)
        if self.applies(cfg) and cc.enable_prefix_caching and not cfg.scheduler_config.enable_chunked_prefill \
                and (has("C7e") or cc.mamba_cache_mode == "align"):
            raise _chunked_prefill_required(has("C7f"))

    def run(self, cfg, ctx) -> None:
        if not in_force(ctx.release, "C7c"):
            return super().run(cfg, ctx)  # before C7c: 'all' where the model supports it, as 0.19.0
        cc, mc = cfg.cache_config, cfg.model_config
        has = functools.partial(in_force, ctx.release)
        if cc.enable_prefix_caching:
            if cc.mamba_cache_mode == "none":
                ctx.set("cache_config", "mamba_cache_mode", "align", log=True,
                        reason=f"Mamba cache mode is set to 'align' for {mc.architecture} by default when prefix "
                               f"caching is enabled",
                        explanation="Prefix caching is on, so Mamba states are kept at block boundaries: 'align' "
                                    + (f"(vLLM {ctx.release} has no 'all' mode, and ignores --mamba-cache-mode)."
                                       if has("C7f") else "(never 'all' by default)."))
            if cc.mamba_cache_mode == "all" and not has("C7e") and not mc.supports_mamba_prefix_caching:
                # before C7e: an 'all' the architecture cannot keep falls back to 'align' (W2)
                ctx.set("cache_config", "mamba_cache_mode", "align", level="WARNING", log=True,
                        reason="Hybrid or mamba-based model detected without support for prefix caching "
                               "with Mamba cache 'all' mode: falling back to 'align' mode.",
                        explanation=f"'all' mode needs Mamba prefix-caching support, which "
                                    f"{mc.architecture} lacks, so the mode falls back to 'align'.")
            if not cfg.scheduler_config.enable_chunked_prefill and (has("C7e") or cc.mamba_cache_mode == "align"):
                # C7e: asserted whatever the mode (before it, for 'align' only); C7f: the words
                raise _chunked_prefill_required(has("C7f"))
            if cc.mamba_block_size is None:
                ctx.set("cache_config", "mamba_block_size", cc.block_size,
                        reason=f"with prefix caching the Mamba block size follows the block size ({cc.block_size})",
                        explanation=f"Prefix caching is on and no Mamba block size was given, so it starts at the "
                                    f"block size, {cc.block_size:,} tokens (the start-up step may align both).")
        else:
            if cc.mamba_cache_mode != "none":
                ctx.set("cache_config", "mamba_cache_mode", "none", level="WARNING", log=True,
                        reason="Mamba cache mode is set to 'none' when prefix caching is disabled")
            if cc.mamba_block_size is None:
                ctx.set("cache_config", "mamba_block_size", mc.max_model_len,
                        reason=f"without prefix caching one Mamba block spans max_model_len ({mc.max_model_len})",
                        explanation=f"Prefix caching is off and no Mamba block size was given, so one Mamba block "
                                    f"spans the whole context: max_model_len = {mc.max_model_len:,} tokens.")


class VllmChecks034Stage(VllmChecksStage):
    """C9: a float KV-cache dtype that differs from the model dtype is refused first; then
    0.19.0's checks."""


    def run(self, cfg, ctx) -> None:
        self._check_kv_dtype(cfg)
        super().run(cfg, ctx)

    def check(self, cfg) -> None:
        self._check_kv_dtype(cfg)
        super().check(cfg)

    def configure(self, pipeline) -> None:
        super().configure(pipeline)
        self.release = getattr(pipeline, "release", None)

    def _check_kv_dtype(self, cfg) -> None:
        if not in_force(getattr(self, "release", None), "C9.2"):
            return  # the check came with C9.2
        mismatch = ct.float_kv_mismatch(cfg)
        if mismatch is not None:
            raise ConfigRejectedError(mismatch, field="cache_config.cache_dtype", vllm_type="ValueError")


class Scheduler034Stage(SchedulerStage):
    """C3.5: the scheduler config's checks as 0.19.0 makes them (the same words), on vLLM
    0.34.0's budget: the caller's, else the GPU's default (at least max_model_len without
    chunked prefill), so only a budget the caller gives can fall short."""

    def __init__(self) -> None:
        self.gpu = DEFAULT_GPU
        self.release = None

    def configure(self, pipeline) -> None:
        self.gpu = pipeline.gpu
        self.release = getattr(pipeline, "release", None)  # its batch defaults (C3.5b, C3.5c)

    def budget(self, cfg) -> tuple[int, int, bool]:
        return (ct.max_num_batched_tokens(cfg, self.gpu, self.release), ct.max_num_seqs(cfg, self.gpu, self.release),
                ct.chunked_prefill(cfg))
