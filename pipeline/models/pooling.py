"""vLLM 0.19.0's config hooks of the bidirectional pooling models (``MODELS_CONFIG_MAP``).

Two hooks turn a causal language model into a bidirectional pooling one while the model
config is built (:data:`enginecfg.pipeline.models.architectures.HOOK_LEVELS`: ``model``):
both switch ``hf_config.is_causal`` off, so that vLLM builds encoder-only attention layers
(which keep no KV cache), and both turn the checkpoint's pooling name into the sequence
pooling type.  They differ in where they look for that name:

- ``llama_nemotron_vl`` (LlamaNemotronVL embedding and reranking): also ``llm_config``,
  which then defaults to ``avg``; it also lifts the vision tower's ``patch_size``;
- ``llama_bidirectional`` (``LlamaBidirectionalModel``,
  ``LlamaBidirectionalForSequenceClassification``): the top level only, and the name must be
  there (vLLM reads the attribute without a default).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

__all__ = ["LLAMA_NEMOTRON_VL", "LLAMA_BIDIRECTIONAL", "BIDIRECTIONAL_HOOKS", "CHECKPOINT_POOLING",
           "seq_pooling_type"]

LLAMA_NEMOTRON_VL = "llama_nemotron_vl"
LLAMA_BIDIRECTIONAL = "llama_bidirectional"

#: the config hooks that make attention bidirectional and set the sequence pooling
BIDIRECTIONAL_HOOKS = frozenset({LLAMA_NEMOTRON_VL, LLAMA_BIDIRECTIONAL})

#: the checkpoint's pooling name -> vLLM's sequence pooling type
CHECKPOINT_POOLING: Mapping[str, str] = MappingProxyType({"avg": "MEAN", "cls": "CLS", "last": "LAST"})


def seq_pooling_type(name: Any) -> str | None:
    """The sequence pooling type a checkpoint's pooling *name* means; None when vLLM refuses
    it (any other value, ``None`` included)."""
    return CHECKPOINT_POOLING.get(name) if isinstance(name, str) else None
