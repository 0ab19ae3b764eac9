"""vLLM 0.19.0's own config classes: what they make of fields a config.json leaves out.

For some model types vLLM registers its own config class with transformers' ``AutoConfig``
(``_CONFIG_REGISTRY``), so the object vLLM reads is *not* the one transformers 5.23 builds.
For a complete published config both agree on what vLLM reads; for a config that leaves
fields out the class defaults decide, and they differ.  This module holds, as data, what
vLLM's classes do for the model types where that matters:

* ``kimi_linear``: vLLM's class is a thin one (its named defaults, a few derived fields, every
  other key kept as given); transformers' class is a different model of the same name
  (DeepSeek-style MLA defaults, ``max_position_embeddings`` of 1M, per-layer lists).  A
  config missing ``kv_lora_rank`` is *not* MLA for vLLM but MLA for transformers, one missing
  ``model_max_length`` has no length (2048 with a warning) for vLLM and 1M for transformers.
  enginecfg therefore builds it as vLLM does: the plain config with vLLM's defaults
  (``build = "plain"``).
* ``qwen3_next``, ``qwen3_5`` / ``qwen3_5_moe`` (text config), ``olmo_hybrid``, ``lfm2_moe``:
  vLLM's and transformers' classes give the same values for everything vLLM reads at config
  time, missing fields included (checked field by field against vLLM 0.19.0's classes); they
  are listed so that the table says so, and their defaults are filled in before transformers
  builds the config (``build = "transformers"``) where transformers would leave a field out.

:func:`apply` returns the config dict to hand to the builder and how to build it.  The table
is data; the few derived defaults are small functions next to it.  It is applied where the
transformers snapshot is built, so the snapshot cache must not outlive a change to it: bump
``hfsnapshot.SNAPSHOT_VERSION`` with every change here.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

__all__ = ["VLLM_CLASS_DEFAULTS", "apply", "VLLM_CONFIG_CLASS_TYPES"]

#: every model type vLLM 0.19.0 maps to its own class in ``_CONFIG_REGISTRY`` that this
#: table covers
VLLM_CONFIG_CLASS_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe", "olmo_hybrid", "lfm2_moe", "kimi_linear")

_Derive = Callable[[dict[str, Any], set[str]], None]


def _kimi_derive(cfg: dict[str, Any], given: set[str]) -> None:
    """vLLM's KimiLinear class: head_dim from hidden size / heads, KV heads default to the
    attention heads, and ``rope_parameters`` built from ``rope_scaling`` / ``rope_theta``."""
    if cfg.get("head_dim") is None:
        heads = cfg["num_attention_heads"]
        cfg["head_dim"] = cfg["hidden_size"] // heads
    if cfg.get("num_key_value_heads") is None:
        cfg["num_key_value_heads"] = cfg["num_attention_heads"]
    rope = cfg.pop("rope_scaling", None) or cfg.get("rope_parameters") or {"rope_type": "default"}
    theta = cfg.pop("rope_theta", 10000.0)
    if "rope_theta" not in rope:
        rope = dict(rope, rope_theta=theta)
    cfg["rope_parameters"] = rope


def _kimi_check(cfg: dict[str, Any]) -> str | None:
    """The checks vLLM's class makes (as ``assert``s: vLLM reports an AssertionError)."""
    if cfg.get("moe_router_activation_func") not in ("softmax", "sigmoid"):
        return "moe_router_activation_func"
    lac = cfg.get("linear_attn_config")
    if lac is not None:
        if not isinstance(lac, dict) or lac.get("kda_layers") is None or lac.get("full_attn_layers") is None:
            return "linear_attn_config"
    return None


#: model_type -> {"build": "plain" | "transformers", "where": "" | "text_config",
#:                "defaults": {field: vLLM's default}, "derive": fn or None}
VLLM_CLASS_DEFAULTS: dict[str, dict[str, Any]] = {
    "kimi_linear": {
        "build": "plain", "where": "",
        "defaults": {
            "vocab_size": 163840, "hidden_size": 4096, "head_dim": None, "intermediate_size": 11008,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": None,
            "hidden_act": "silu", "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True,
            "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
            "moe_intermediate_size": None, "moe_renormalize": True, "moe_router_activation_func": "sigmoid",
            "num_experts": None, "num_experts_per_token": None, "num_shared_experts": 0,
            "routed_scaling_factor": 1.0, "first_k_dense_replace": 0, "moe_layer_freq": 1,
            "use_grouped_topk": True, "num_expert_group": 1, "topk_group": 1, "q_lora_rank": None,
            "kv_lora_rank": None, "qk_nope_head_dim": None, "qk_rope_head_dim": None, "v_head_dim": None,
            "mla_use_nope": False, "num_nextn_predict_layers": 0, "linear_attn_config": None,
        },
        "derive": _kimi_derive, "check": _kimi_check,
    },
    "qwen3_next": {"build": "transformers", "where": "", "defaults": {}, "derive": None},
    "qwen3_5": {"build": "transformers", "where": "text_config", "defaults": {}, "derive": None},
    "qwen3_5_moe": {"build": "transformers", "where": "text_config", "defaults": {}, "derive": None},
    "olmo_hybrid": {"build": "transformers", "where": "", "defaults": {}, "derive": None},
    "lfm2_moe": {"build": "transformers", "where": "", "defaults": {}, "derive": None},
}


def apply(config: dict[str, Any]) -> tuple[dict[str, Any], str, str | None]:
    """``(config dict, build, failed check)`` for *config* as vLLM's class would see it.

    ``build`` is ``"plain"`` (a plain ``PretrainedConfig`` holding every key) or
    ``"transformers"`` (transformers' class for the model type).  ``failed check`` names the
    field whose check in vLLM's class fails (vLLM raises an AssertionError), else None.
    The input is not modified.
    """
    entry = VLLM_CLASS_DEFAULTS.get(config.get("model_type")) if isinstance(config.get("model_type"), str) \
        else None
    if entry is None:
        return config, "transformers", None
    out = copy.deepcopy(config)
    target = out
    if entry["where"]:
        sub = out.get(entry["where"])
        if not isinstance(sub, dict):
            return out, entry["build"], None
        target = sub
    given = set(target)
    for name, value in entry["defaults"].items():
        if name not in target:
            target[name] = copy.deepcopy(value)
    if entry.get("derive"):
        entry["derive"](target, given)
    check = entry.get("check")
    return out, entry["build"], check(target) if check else None
