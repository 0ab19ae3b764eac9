"""vLLM 0.34.0's start-up step as stages, decided before loading (RULES.md B, S, F, K6).

vLLM 0.34.0 decides these after ``load_model()``; here they are stages like the others, each
adding its decisions (with vLLM's log line as the reason and the rule with its numbers as the
explanation) to the run's ``startup`` fact
(:class:`~enginecfg.pipeline.models.startup.Startup`), on the pipeline's GPU:

- ``attention-backend``: the backend of every kind of layer (B1-B6: FlashAttention 3 or 4,
  FlashInfer, the Triton composites, by compute capability), and the model classes that
  cannot be built (F1-F3, F5, F7, a named backend that refuses);
- ``startup-block-size``: the block size the backends prefer when the user gave none (S0-S1);
- ``hybrid-alignment``: for hybrid models, the attention block aligned to the first backend's
  kernel block, the lcm across backends and the Mamba prefill-checkpoint alignment, the Mamba
  block size and the Mamba page padding (S2-S6, S8) — the 0.19.0 stage of that name, moved;
- ``engine-start``: the KV-cache groups, the block size the engine writes back, and the checks
  after the planning (C9.6, the real Mamba state against its padded page, F6).

The config-time fields stay as vLLM 0.34.0 resolves them at config time (what ``final``
holds in the oracle's answers); ``impact`` reads the start-up decisions from the fact.
"""

from __future__ import annotations

import attrs

from enginecfg.pipeline.errors import ConfigRejectedError, EngineCfgError
from enginecfg.pipeline.models.gpus import DEFAULT_GPU
from enginecfg.pipeline.models.startup import Decision, StartFailure, Startup, StartupUnavailable
from enginecfg.pipeline.models.v034 import config_time as ct
from enginecfg.pipeline.models.v034 import kv_planning
from enginecfg.pipeline.models.v034 import startup as rules
from enginecfg.pipeline.stage import Stage
from enginecfg.stages.engine_start import failure_message



class _StartupStage(Stage):
    facts = ("startup",)

    def __init__(self) -> None:
        self.gpu = DEFAULT_GPU

    def configure(self, pipeline) -> None:
        self.gpu = pipeline.gpu

    @staticmethod
    def _add(ctx, startup: Startup, decisions=(), messages=(), **changes) -> Startup:
        """The fact with these decisions and messages added (messages logged where vLLM would:
        a class that cannot be built reaches no start-up step)."""
        if startup.failure is None or startup.failure.step != "build":
            for level, message in messages:
                ctx.warn(message, level=level)
        return attrs.evolve(startup, decisions=startup.decisions + tuple(decisions),
                            messages=startup.messages + tuple(messages), **changes)


class AttentionBackend034Stage(_StartupStage):
    name = "attention-backend"

    def run(self, cfg, ctx) -> None:
        cc = cfg.cache_config
        try:
            layers, messages, failure = rules.select_backends(cfg, self.gpu, ctx.release)
        except ConfigRejectedError as exc:
            # vLLM's own assertion stopped the working out (a dimension of the Mamba state the
            # tensor-parallel size does not divide): no decisions, but the engine does not start
            ctx.record("startup", StartupUnavailable(str(exc), exc.field, failure=rules.unbuildable(cfg, exc)))
            return
        except EngineCfgError as exc:
            ctx.record("startup", StartupUnavailable(str(exc), exc.field))
            return
        for level, message in messages:  # logged while the layers are built
            ctx.warn(message, level=level)
        ctx.record("startup", Startup(
            str(ctx.release), self.gpu.name, self.gpu.capability_text, layers, cc.block_size, cc.mamba_block_size,
            cc.mamba_page_size_padded, messages=messages, failure=failure,
            disable_hybrid_kv_cache_manager=bool(cfg.scheduler_config.disable_hybrid_kv_cache_manager)))


class StartupBlockSize034Stage(_StartupStage):
    name = "startup-block-size"

    def run(self, cfg, ctx) -> None:
        startup = ctx.fact("startup")
        if not isinstance(startup, Startup):
            return
        try:
            block, decisions, messages = rules.preferred_block(cfg, list(startup.backends), self.gpu)
        except ValueError as exc:
            ctx.record("startup", attrs.evolve(startup, failure=startup.failure or StartFailure(
                "start", "ValueError", str(exc), "platforms/interface.py in update_block_size_for_backend",
                "the attention backends share no block size", "S1")))
            return
        ctx.record("startup", self._add(ctx, startup, decisions, messages, block_size=block))


class HybridAlignment034Stage(_StartupStage):
    name = "hybrid-alignment"

    def applies(self, cfg) -> bool:
        return cfg.model_config.is_hybrid

    def run(self, cfg, ctx) -> None:
        startup = ctx.fact("startup")
        if not isinstance(startup, Startup):
            return
        try:
            block, mbs, padded, decisions, messages = rules.align_hybrid(
                cfg, list(startup.backends), self.gpu, startup.block_size,
                checkpoints=ctx.release is None or ctx.release.has("S3e"))  # B6b/S3e
        except (ValueError, AssertionError) as exc:
            ctx.record("startup", attrs.evolve(startup, failure=startup.failure or StartFailure(
                "start", type(exc).__name__, str(exc), "platforms/interface.py in update_block_size_for_backend",
                "the hybrid alignment's block size is one the attention backends cannot run", "S8")))
            return
        ctx.record("startup", self._add(ctx, startup, decisions, messages, block_size=block,
                                        mamba_block_size=mbs, mamba_page_size_padded=padded))


class EngineStart034Stage(_StartupStage):
    name = "engine-start"

    def run(self, cfg, ctx) -> None:
        startup = ctx.fact("startup")
        if not isinstance(startup, Startup):
            return
        failure = startup.failure
        engine_block = None
        decisions: list[Decision] = []
        messages: list[tuple[str, str]] = []
        try:
            plan = kv_planning.groups(cfg, startup, self.gpu)
            messages += plan.messages
            if plan.groups:
                engine_block = min(g.block_size for g in plan.groups)
                if engine_block != startup.block_size:
                    sizes = ", ".join(f"{g.block_size:,}" for g in plan.groups)
                    decisions.append(Decision(
                        "engine_block_size", startup.block_size, engine_block,
                        f"the engine writes the smallest KV-cache group block size ({engine_block}) back",
                        f"The KV-cache groups have blocks of {sizes} tokens (a Mamba group keeps the Mamba "
                        f"block size; a group whose page was unified grew its block); the engine sets the block "
                        f"size to the smallest, {engine_block:,}.", "K6"))
        except ConfigRejectedError as exc:
            failure = failure or StartFailure("start", exc.vllm_type or "ValueError", str(exc),
                                              "v1/core/kv_cache_planning.py in get_kv_cache_groups",
                                              "the engine core cannot group the layers' KV-cache specs", "K2")
        if failure is None:
            failure = rules.validate_block_size(cfg, startup.mamba_page_size_padded)
        startup = self._add(ctx, attrs.evolve(startup, failure=failure), decisions, messages,
                            engine_block_size=engine_block)
        if failure is not None:
            ctx.warn(failure_message(ctx.release, failure))
        ctx.record("startup", startup)
