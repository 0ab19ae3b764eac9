"""``pooling``: the bidirectional pooling models' config hooks (vLLM's model-level hooks).

LlamaNemotronVL embedding and reranking models, and ``LlamaBidirectionalModel`` /
``LlamaBidirectionalForSequenceClassification``, are causal language models used
bidirectionally: attention is made non-causal on the config (so vLLM builds encoder-only
attention layers), and the checkpoint's ``pooling`` name (``avg`` / ``cls`` / ``last``) picks
the sequence pooling.  Any other name, ``None`` included, is refused with vLLM's message.

- LlamaNemotronVL: also its ``llm_config`` is made non-causal, the vision tower's
  ``patch_size`` is lifted to the top level, and the pooling name is read from the top level
  or else ``llm_config``, where it defaults to ``avg``.
- LlamaBidirectional: the pooling name is read from the top level only; a checkpoint without
  one is bad input (vLLM crashes reading it).
"""

from __future__ import annotations

from collections.abc import Mapping

from enginecfg.pipeline.errors import ConfigRejectedError, InvalidInputError
from enginecfg.pipeline.hf import HFConfigView, typed
from enginecfg.pipeline.models.pooling import (BIDIRECTIONAL_HOOKS, LLAMA_BIDIRECTIONAL, seq_pooling_type)
from enginecfg.pipeline.stage import Stage
from enginecfg.stages._common import config_hook

_EXPECT = "a pooling name: avg, cls or last"


def _lookable(value) -> bool:
    """Can vLLM look the value up among the pooling names?  An unknown one is its refusal; a
    list or an object cannot be looked up (vLLM crashes), and is bad input."""
    return not isinstance(value, (list, tuple, Mapping, HFConfigView))


class PoolingStage(Stage):
    name = "pooling"
    vllm_step = "model"

    def applies(self, cfg) -> bool:
        return config_hook(cfg) in BIDIRECTIONAL_HOOKS

    def run(self, cfg, ctx) -> None:
        if config_hook(cfg) == LLAMA_BIDIRECTIONAL:
            self._llama_bidirectional(cfg, ctx)
        else:
            self._llama_nemotron_vl(cfg, ctx)

    def _llama_bidirectional(self, cfg, ctx) -> None:
        hf = cfg.model_config.hf_config
        ctx.set("hf_config", "is_causal", False,
                reason="LlamaBidirectional pooling model: bidirectional attention (is_causal off)")
        pooling = self._bidirectional_pooling(hf)
        typed.check("hf_config.pooling", pooling, typed.ANY, allowed=_lookable, expect=_EXPECT)
        self._set_pooling(ctx, pooling, "LlamaBidirectional")

    def _bidirectional_pooling(self, hf):
        """The LlamaBidirectional checkpoint's pooling name: the top-level field, which must be
        there (vLLM 0.19.0 reads it without a default, and crashes)."""
        if not typed.has(hf, "pooling"):
            raise typed.fail("hf_config.pooling", typed.ABSENT, _EXPECT,
                             "a LlamaBidirectional checkpoint names its pooling in config.json")
        return typed.attr(hf, "pooling", typed.ANY)

    def _llama_nemotron_vl(self, cfg, ctx) -> None:
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
        pooling, field = typed.attr(hf, "pooling", typed.ANY), "hf_config.pooling"
        if pooling is None and isinstance(llm, HFConfigView):
            pooling = typed.attr(llm, "pooling", typed.ANY, default="avg")
            field = "hf_config.llm_config.pooling"
        typed.check(field, pooling, typed.ANY, allowed=_lookable, expect=_EXPECT)
        self._set_pooling(ctx, pooling, "LlamaNemotronVL")

    @staticmethod
    def _set_pooling(ctx, pooling, model: str) -> None:
        seq_type = seq_pooling_type(pooling)
        if seq_type is None:
            raise ConfigRejectedError(f"pool_type {pooling!r} not supported", field="hf_config.pooling",
                                      vllm_type="ValueError")
        ctx.set("pooler_config", "seq_pooling_type", seq_type,
                reason=f"{model}: checkpoint pooling {pooling!r} means {seq_type} sequence pooling")
