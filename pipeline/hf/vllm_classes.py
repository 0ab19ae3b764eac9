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
* ``qwen3_5`` / ``qwen3_5_moe``: vLLM's classes are plain ``PretrainedConfig`` subclasses that
  check no field types, where transformers 5.23's classes are strict dataclasses that refuse a
  value of the wrong type anywhere (``attention_bias: 7``, ``num_attention_heads: "24"``)
  that vLLM reads past or computes with.  enginecfg builds them as vLLM's classes do
  (``build = "vllm_class"``, :data:`VLLM_CLASSES`: the named fields and their defaults, the
  layer-type rule), so vLLM's outcome, resolved or refused, is enginecfg's.
* ``qwen3_next``, ``olmo_hybrid``, ``lfm2_moe``:
  vLLM's and transformers' classes give the same values for everything vLLM reads at config
  time, missing fields included (checked field by field against vLLM 0.19.0's classes); they
  are listed so that the table says so, and their defaults are filled in before transformers
  builds the config (``build = "transformers"``) where transformers would leave a field out.

:func:`apply` returns the config dict to hand to the builder and how to build it.  The table
is data; the few derived defaults are small functions next to it.  It is applied where the
transformers snapshot is built, so the snapshot cache must not outlive a change to it: its
key (``cache.layout_version``) digests this module's source with the snapshot builder's.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

__all__ = ["VLLM_CLASS_DEFAULTS", "apply", "VLLM_CONFIG_CLASS_TYPES", "VLLM_CLASSES", "VLLM_REGISTERED_TYPES"]

#: every model type vLLM 0.19.0 builds with a config class of its own (its
#: ``_CONFIG_REGISTRY``), whether or not transformers knows the type; any other type that
#: transformers does not know is refused by transformers' ``AutoConfig``, and so by vLLM
VLLM_REGISTERED_TYPES = frozenset({
    "afmoe", "bagel", "chatglm", "colmodernvbert", "colpali", "colqwen3", "ops_colqwen3",
    "qwen3_vl_nemotron_embed", "deepseek_vl_v2", "deepseek_v32", "flex_olmo", "funaudiochat",
    "hunyuan_vl", "isaac", "kimi_k2", "kimi_linear", "kimi_vl", "kimi_k25", "RefinedWeb",
    "RefinedWebModel", "jais", "mlp_speculator", "medusa", "midashenglm", "eagle", "speculators",
    "nemotron", "olmo_hybrid", "ovis", "ultravox", "step3_vl", "step3_text", "step3p5",
    "qwen3_asr", "qwen3_next", "qwen3_5", "qwen3_5_moe", "lfm2_moe", "tarsier2",
})

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
    "qwen3_5": {"build": "vllm_class", "where": "", "defaults": {}, "derive": None},
    "qwen3_5_moe": {"build": "vllm_class", "where": "", "defaults": {}, "derive": None},
    "olmo_hybrid": {"build": "transformers", "where": "", "defaults": {}, "derive": None},
    "lfm2_moe": {"build": "transformers", "where": "", "defaults": {}, "derive": None},
}


_QWEN3_5_TEXT = {
    "vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
    "num_attention_heads": 16, "num_key_value_heads": 4, "hidden_act": "silu",
    "max_position_embeddings": 32768, "initializer_range": 0.02, "rms_norm_eps": 1e-6,
    "use_cache": True, "attention_bias": False, "attention_dropout": 0.0, "head_dim": 256,
    "rope_parameters": None,
}
_QWEN3_5_MOE_TEXT = {
    **{k: v for k, v in _QWEN3_5_TEXT.items() if k != "intermediate_size"},
    "hidden_size": 2048, "num_hidden_layers": 40, "num_key_value_heads": 2,
}
_LINEAR = {"linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
           "linear_num_key_heads": 16, "linear_num_value_heads": 32}
_MOE = {"moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
        "num_experts_per_tok": 8, "num_experts": 256, "output_router_logits": False,
        "router_aux_loss_coef": 0.001}
_LATE = {"pad_token_id": None, "bos_token_id": None, "eos_token_id": None, "tie_word_embeddings": False}
_QWEN3_5_VISION = {
    "depth": 27, "hidden_size": 1152, "hidden_act": "gelu_pytorch_tanh", "intermediate_size": 4304,
    "num_heads": 16, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2,
    "temporal_patch_size": 2, "out_hidden_size": 3584, "num_position_embeddings": 2304,
    "initializer_range": 0.02,
}
_QWEN3_5_TOP = {"image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
                "vision_end_token_id": 248054}


def _qwen3_5(name: str, moe: bool) -> dict[str, Any]:
    prefix = "Qwen3_5Moe" if moe else "Qwen3_5"
    return {
        "class": f"{prefix}Config", "model_type": name, "top": _QWEN3_5_TOP,
        "vision": {"class": f"{prefix}VisionConfig", "model_type": name, "fields": _QWEN3_5_VISION},
        "text": {
            "class": f"{prefix}TextConfig", "model_type": f"{name}_text",
            # set in this order: the first group before the layer types are checked, the
            # linear-attention (and MoE) fields after, the token ids and tying last
            "early": _QWEN3_5_MOE_TEXT if moe else _QWEN3_5_TEXT,
            "after_layer_types": {**_LINEAR, **(_MOE if moe else {})},
            "late": _LATE,
            "kwarg_defaults": {"partial_rotary_factor": 0.25},
            "layer_types": {"interval_key": "full_attention_interval", "interval": 4,
                            "every": "full_attention", "else": "linear_attention"},
            "rope_ignore": ("mrope_section", "mrope_interleaved"),
        },
    }


#: vLLM 0.19.0's own classes that enginecfg rebuilds (``build = "vllm_class"``), as data: the
#: class names, the named fields with their defaults in the order the class sets them, and
#: the rule that fills in ``layer_types`` (every ``interval``-th layer full attention).
#: The builder is :func:`enginecfg.pipeline.hf._classes.build` (transformers-side).
VLLM_CLASSES: dict[str, dict[str, Any]] = {
    "qwen3_5": _qwen3_5("qwen3_5", moe=False),
    "qwen3_5_moe": _qwen3_5("qwen3_5_moe", moe=True),
}


def apply(config: dict[str, Any]) -> tuple[dict[str, Any], str, str | None]:
    """``(config dict, build, failed check)`` for *config* as vLLM's class would see it.

    ``build`` is ``"plain"`` (a plain ``PretrainedConfig`` holding every key),
    ``"vllm_class"`` (vLLM's class, rebuilt from :data:`VLLM_CLASSES`) or ``"transformers"``
    (transformers' class for the model type).  ``failed check`` names the
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
