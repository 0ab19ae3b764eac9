"""``engine-start``: what vLLM 0.19.0 decides when the engine starts on the GPU, before loading.

After the checks of config time, vLLM builds the model class (each attention layer gets a
backend from the selector), fits the block size to the backends
(``Platform.update_block_size_for_backend``), declares every layer's KV cache at that size,
groups and plans it, and writes the smallest group block size back.  This stage decides the
same from the resolved config, on the pipeline's GPU (``Pipeline(gpu=...)``, H200 by
default), and records it as the ``startup`` fact
(:class:`~enginecfg.pipeline.models.startup.Startup`): the backend of each kind of layer and
why, the block size the engine starts with and the one it runs with, each decision with
vLLM's log line and the rule behind it, and, where vLLM would not start, why.  It logs what
vLLM logs at that moment (``Setting kv cache block size to 64 for FLASHMLA backend.``, the
``--block-size`` warning).

The config-time fields stay as vLLM resolved them at config time (what the fixtures hold);
the ``impact`` figures read the start-up block size from the fact.
"""

from __future__ import annotations

from enginecfg.pipeline.errors import EngineCfgError
from enginecfg.pipeline.models import engine_start
from enginecfg.pipeline.models.gpus import DEFAULT_GPU
from enginecfg.pipeline.models.startup import StartupUnavailable
from enginecfg.pipeline.stage import Stage


def failure_message(release: str, failure) -> str:
    """The run's message for a start that would fail: vLLM's exception, where, and why."""
    text = f"{failure.vllm_type}: {failure.message}" if failure.message else failure.vllm_type
    if failure.step == "build":
        return (f"vLLM {release} would fail to build the model class: {text} (in {failure.where}): "
                f"{failure.reason}. The capacity figures are what its layers would declare.")
    return f"vLLM {release} would fail to start the engine: {text} (in {failure.where}): {failure.reason}."


class EngineStartStage(Stage):
    name = "engine-start"
    facts = ("startup",)

    def __init__(self) -> None:
        self.gpu = DEFAULT_GPU

    def configure(self, pipeline) -> None:
        self.gpu = pipeline.gpu

    def run(self, cfg, ctx) -> None:
        dhkv = bool(cfg.scheduler_config.disable_hybrid_kv_cache_manager)
        try:
            startup = engine_start.start(cfg, gpu=self.gpu.name, capability=tuple(self.gpu.capability),
                                         disable_hybrid_kv_cache_manager=dhkv,
                                         release=str(ctx.release) if ctx.release is not None else None)
        except EngineCfgError as exc:  # a layer pattern enginecfg does not know: no verdict
            ctx.record("startup", StartupUnavailable(str(exc), exc.field))
            return
        for level, message in startup.messages:
            ctx.warn(message, level=level)
        if startup.failure is not None:
            ctx.warn(failure_message(startup.release, startup.failure))
        ctx.record("startup", startup)
