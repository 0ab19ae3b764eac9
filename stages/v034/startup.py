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

from typing import Any

import attrs

from enginecfg.pipeline.errors import ConfigRejectedError, EngineCfgError
from enginecfg.pipeline.hf import ContentMemo, Unkeyable, content_key
from enginecfg.pipeline.models.gpus import DEFAULT_GPU
from enginecfg.pipeline.models.startup import Decision, StartFailure, Startup, StartupUnavailable
from enginecfg.pipeline.models.v034 import config_time as ct
from enginecfg.pipeline.models.v034 import kv_planning
from enginecfg.pipeline.models.v034 import startup as rules
from enginecfg.pipeline.stage import Stage
from enginecfg.stages.engine_start import failure_message



#: the whole start-up step of a config, by its content, the GPU and the release's rules
#: (:func:`_plan`): the four stages of one run take it from one working out
PLANS = ContentMemo(maxsize=256)


@attrs.frozen
class _Step:
    """What one start-up stage does: the ``startup`` fact it records (None: none) and the
    messages it logs before, ``(level, text)`` in order."""

    fact: Any
    warnings: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class _Plan:
    """The four stages' steps for one config (``hybrid-alignment``'s None where it does not
    apply), each with the ``startup`` fact it found."""

    found: tuple[Any, ...]
    steps: tuple[_Step | None, ...]


def _added(startup: Startup, decisions=(), messages=(), **changes) -> _Step:
    """The fact with these decisions and messages added, logged where vLLM logs them (a class
    that cannot be built reaches no start-up step)."""
    logged = () if startup.failure is not None and startup.failure.step == "build" else tuple(messages)
    return _Step(attrs.evolve(startup, decisions=startup.decisions + tuple(decisions),
                              messages=startup.messages + tuple(messages), **changes), logged)


def _backends(cfg, gpu, release) -> _Step:
    cc = cfg.cache_config
    try:
        layers, messages, failure = rules.select_backends(cfg, gpu, release)
    except ConfigRejectedError as exc:
        # vLLM's own assertion stopped the working out (a dimension of the Mamba state the
        # tensor-parallel size does not divide): no decisions, but the engine does not start
        return _Step(StartupUnavailable(str(exc), exc.field, failure=rules.unbuildable(cfg, exc)))
    except EngineCfgError as exc:
        return _Step(StartupUnavailable(str(exc), exc.field, failure=rules.state_crash(cfg, exc)))
    return _Step(Startup(str(release), gpu.name, gpu.capability_text, layers, cc.block_size, cc.mamba_block_size,
                         cc.mamba_page_size_padded, messages=messages, failure=failure,
                         disable_hybrid_kv_cache_manager=bool(cfg.scheduler_config.disable_hybrid_kv_cache_manager)),
                 tuple(messages))  # logged while the layers are built


def _block(cfg, gpu, release, startup) -> _Step:
    if not isinstance(startup, Startup):
        return _Step(None)
    try:
        block, decisions, messages = rules.preferred_block(cfg, list(startup.backends), gpu, release)
    except ValueError as exc:
        return _Step(attrs.evolve(startup, failure=startup.failure or StartFailure(
            "start", "ValueError", str(exc), "platforms/interface.py in update_block_size_for_backend",
            "the attention backends share no block size", "S1")))
    return _added(startup, decisions, messages, block_size=block)


def _align(cfg, gpu, release, startup) -> _Step:
    if not isinstance(startup, Startup):
        return _Step(None)
    try:
        block, mbs, padded, decisions, messages = rules.align_hybrid(
            cfg, list(startup.backends), gpu, startup.block_size, release=release)
    except (ValueError, AssertionError) as exc:
        return _Step(attrs.evolve(startup, failure=startup.failure or StartFailure(
            "start", type(exc).__name__, str(exc), "platforms/interface.py in update_block_size_for_backend",
            "the hybrid alignment's block size is one the attention backends cannot run", "S8")))
    return _added(startup, decisions, messages, block_size=block, mamba_block_size=mbs, mamba_page_size_padded=padded)


def _engine(cfg, gpu, release, startup) -> _Step:
    if not isinstance(startup, Startup):
        return _Step(None)
    failure = startup.failure
    engine_block = None
    decisions: list[Decision] = []
    messages: list[tuple[str, str]] = []
    try:
        plan = kv_planning.groups(cfg, startup, gpu)
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
        failure = rules.validate_block_size(cfg, startup.mamba_page_size_padded, engine_block, gpu, release)
    step = _added(attrs.evolve(startup, failure=failure), decisions, messages, engine_block_size=engine_block)
    if failure is not None:
        step = _Step(step.fact, step.warnings + (("WARNING", failure_message(release, failure)),))
    return step


_STEPS = ("attention-backend", "startup-block-size", "hybrid-alignment", "engine-start")


def _plan(cfg, gpu, release) -> _Plan:
    """Every step of the four stages, each from the fact the one before recorded."""
    found: list[Any] = []
    steps: list[_Step | None] = []
    fact = None
    for name in _STEPS:
        found.append(fact)
        if name == "attention-backend":
            step = _backends(cfg, gpu, release)
        elif name == "startup-block-size":
            step = _block(cfg, gpu, release, fact)
        elif name == "hybrid-alignment":
            if not HybridAlignment034Stage.applies_to_config(cfg):
                steps.append(None)
                continue
            step = _align(cfg, gpu, release, fact)
        else:
            step = _engine(cfg, gpu, release, fact)
        steps.append(step)
        if step.fact is not None:
            fact = step.fact
    return _Plan(tuple(found), tuple(steps))


#: the plan the last start-up stage took, with what it was taken for: ``(config, state,
#: transformers configs, gpu, release, plan)``.  The four stages of one run find the same
#: config in the same state (a stage that changes nothing leaves the state object as it
#: was) over the same transformers configs, so the three after the first take the plan from
#: here, without keying :data:`PLANS` again; one slot, replaced whole (a run in another
#: thread replaces it, and this run keys the memo again)
_LAST: list[tuple[Any, ...]] = [(None,) * 6]


class _StartupStage(Stage):
    facts = ("startup",)

    def __init__(self) -> None:
        self.gpu = DEFAULT_GPU
        self._gpu_key: Any = None

    def configure(self, pipeline) -> None:
        self.gpu = pipeline.gpu
        self._gpu_key = None

    def _direct(self, cfg, ctx, found) -> _Step:
        raise NotImplementedError

    def run(self, cfg, ctx) -> None:
        index = _STEPS.index(self.name)
        found = ctx.fact("startup")
        plan = self._planned(cfg, ctx)
        if plan is not None and plan.found[index] is found and plan.steps[index] is not None:
            step = plan.steps[index]
        else:  # the fact before it is not the plan's (a plugin's stage between): worked out here
            step = self._direct(cfg, ctx, found)
        for level, message in step.warnings:
            ctx.warn(message, level=level)
        if step.fact is not None:
            ctx.record("startup", step.fact)

    def _planned(self, cfg, ctx) -> _Plan | None:
        """The plan of this config on this GPU under this release: the one the stage before
        took when it found this config in the very same state (:data:`_LAST`), else from
        :data:`PLANS` when it was worked out before (None where the working out raised: each
        stage then raises what it raises by itself)."""
        release = ctx.release
        state = ctx.opening_state()
        mc = cfg.model_config
        hf = (mc.hf_config, mc.hf_text_config)
        last_cfg, last_state, last_hf, last_gpu, last_release, plan = _LAST[0]
        if (last_cfg is cfg and last_state is state and last_gpu is self.gpu and last_release is release
                and last_hf[0] is hf[0] and last_hf[1] is hf[1]):
            return plan
        plan = self._keyed(cfg, state, release)
        _LAST[0] = (cfg, state, hf, self.gpu, release, plan)
        return plan

    def _keyed(self, cfg, state, release) -> _Plan | None:
        try:
            anchors, key = state.content_key()
            if self._gpu_key is None:  # a frozen value: its key does not change
                self._gpu_key = content_key(self.gpu)
            key = (key, self._gpu_key, str(release), release.rules if release is not None else None)
        except Unkeyable:
            anchors = key = None
        if key is not None:
            plan = PLANS.get(key, anchors, None)
            if plan is not None:
                return plan
        try:
            plan = _plan(cfg, self.gpu, release)
        except Exception:  # noqa: BLE001 - raised again by the stage that meets it
            return None
        if key is not None:
            PLANS.put(key, anchors, plan)
        return plan


class AttentionBackend034Stage(_StartupStage):
    name = "attention-backend"

    def _direct(self, cfg, ctx, found) -> _Step:
        return _backends(cfg, self.gpu, ctx.release)


class StartupBlockSize034Stage(_StartupStage):
    name = "startup-block-size"

    def _direct(self, cfg, ctx, found) -> _Step:
        return _block(cfg, self.gpu, ctx.release, found)


class HybridAlignment034Stage(_StartupStage):
    name = "hybrid-alignment"

    @staticmethod
    def applies_to_config(cfg) -> bool:
        return cfg.model_config.is_hybrid

    def applies(self, cfg) -> bool:
        return self.applies_to_config(cfg)

    def _direct(self, cfg, ctx, found) -> _Step:
        return _align(cfg, self.gpu, ctx.release, found)


class EngineStart034Stage(_StartupStage):
    name = "engine-start"

    def _direct(self, cfg, ctx, found) -> _Step:
        return _engine(cfg, self.gpu, ctx.release, found)
