"""``pooling``: LlamaNemotronVL embedding and reranking models (vLLM's model-level hook).

These checkpoints are a causal language model used bidirectionally: attention is made
non-causal on the config and its ``llm_config``, the vision tower's ``patch_size`` is lifted
to the top level, and the checkpoint's ``pooling`` name (``avg`` / ``cls`` / ``last``, from
the top level or else ``llm_config``, where it defaults to ``avg``) picks the sequence
pooling.  Any other name, ``None`` included, is refused with vLLM's message.
"""

from __future__ import annotations

from collections.abc import Mapping

from enginecfg.pipeline.errors import ConfigRejectedError, InvalidInputError
from enginecfg.pipeline.hf import HFConfigView, typed
from enginecfg.pipeline.stage import Stage
from enginecfg.stages._common import config_hook

_POOLING_TYPES = {"avg": "MEAN", "cls": "CLS", "last": "LAST"}


class PoolingStage(Stage):
    name = "pooling"
    vllm_step = "model"

    def applies(self, cfg) -> bool:
        return config_hook(cfg) == "llama_nemotron_vl"

    def run(self, cfg, ctx) -> None:
        hf = cfg.model_config.hf_config
        ctx.set("hf_config", "is_causal", False,
                reason="LlamaNemotronVL pooling model: bidirectional attention (is_causal off)")
        llm = typed.attr(hf, "llm_config", typed.ANY)  # a sub-config, checked just below
        if typed.has(hf, "llm_config"):
            if not isinstance(llm, HFConfigView):
                raise InvalidInputError.for_value("hf_config.llm_config", llm, "a language-model sub-config")
            ctx.set("hf_config", "llm_config.is_causal", False,
                    reason="LlamaNemotronVL pooling model: bidirectional attention on llm_config")
        if typed.has(hf, "vision_config"):
            vision = typed.attr(hf, "vision_config", typed.ANY)
            if not isinstance(vision, HFConfigView) or not typed.has(vision, "patch_size"):
                raise InvalidInputError(
                    "invalid hf_config.vision_config.patch_size: absent; allowed: an integer "
                    "(LlamaNemotronVL copies it to hf_config.patch_size)",
                    field="hf_config.vision_config.patch_size")
            ctx.set("hf_config", "patch_size", typed.attr(vision, "patch_size", typed.ANY),
                    reason="LlamaNemotronVL: patch_size taken from vision_config")  # copied as given
        # the pooling name is looked up among the known ones: any value that can be looked
        # up (an unknown one is vLLM's refusal below); a list or an object cannot (vLLM
        # crashes), and is bad input
        pooling, field = typed.attr(hf, "pooling", typed.ANY), "hf_config.pooling"
        if pooling is None and isinstance(llm, HFConfigView):
            pooling = typed.attr(llm, "pooling", typed.ANY, default="avg")
            field = "hf_config.llm_config.pooling"
        typed.check(field, pooling, typed.ANY, allowed=lambda v: not isinstance(v, (list, tuple, Mapping)),
                    expect="a pooling name: avg, cls or last")
        seq_type = _POOLING_TYPES.get(pooling) if isinstance(pooling, str) else None
        if seq_type is None:
            raise ConfigRejectedError(f"pool_type {pooling!r} not supported", field="hf_config.pooling",
                                      vllm_type="ValueError")
        ctx.set("pooler_config", "seq_pooling_type", seq_type,
                reason=f"LlamaNemotronVL: checkpoint pooling {pooling!r} means {seq_type} sequence pooling")
