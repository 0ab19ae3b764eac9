"""Model folders with everything beside config.json that vLLM 0.19.0 reads, and the cases run on
them.  :func:`build` writes the folders (deterministically) under a root; ``make_expected.py``
runs the real vLLM on them once and commits ``expected.json``; the tests build the same folders
in a temp dir and compare enginecfg with what vLLM said.

The safetensors files hold real headers and tiny zero tensors: only their dtypes matter.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hubsupport import safetensors_bytes, write_cache_repo  # noqa: E402
from support import CONFIGS  # noqa: E402

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
         "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 4096, "vocab_size": 1024}
MISTRAL = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 256,
           "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 32768, "sliding_window": 4096, "vocab_size": 1024, "torch_dtype": "bfloat16"}
KIMI = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "bos_token_id": 163584,
        "eos_token_id": 163586, "first_k_dense_replace": 1, "head_dim": 72, "hidden_act": "silu",
        "hidden_size": 2304, "intermediate_size": 9216, "kv_lora_rank": 512,
        "linear_attn_config": {"full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128,
                               "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23,
                                              25, 26],
                               "num_heads": 32, "short_conv_kernel_size": 4},
        "mla_use_nope": True, "model_max_length": 1048576, "moe_intermediate_size": 1024, "moe_layer_freq": 1,
        "moe_renormalize": True, "moe_router_activation_func": "sigmoid", "num_attention_heads": 32,
        "num_expert_group": 1, "num_experts": 256, "num_experts_per_token": 8, "num_hidden_layers": 27,
        "num_key_value_heads": 32, "num_nextn_predict_layers": 0, "num_shared_experts": 1, "pad_token_id": 163839,
        "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "rope_theta": 10000.0, "routed_scaling_factor": 2.446, "tie_word_embeddings": False,
        "topk_group": 1, "torch_dtype": "bfloat16", "use_cache": True, "use_grouped_topk": True,
        "v_head_dim": 128, "vocab_size": 163840}

#: a repo id and commit for the hub-cache case (vLLM offline swaps the id for this snapshot)
HUB_REPO, HUB_COMMIT = "org/tiny-llama", "0123456789abcdef0123456789abcdef01234567"


def _without(d: dict[str, Any], *paths: str) -> dict[str, Any]:
    out = copy.deepcopy(d)
    for p in paths:
        *parents, last = p.split(".")
        cur = out
        for k in parents:
            cur = cur[k]
        cur.pop(last, None)
    return out


def _fixture(name: str) -> dict[str, Any]:
    return json.loads((CONFIGS / name / "config.json").read_text())


def _st(*tensors: tuple[str, str, list[int]]) -> bytes:
    return safetensors_bytes({n: (code, shape) for n, code, shape in tensors}, {"format": "pt"})


def folders() -> dict[str, dict[str, bytes]]:
    """name -> {relative file: bytes} of every model folder."""
    j = lambda d: json.dumps(d, indent=1).encode()  # noqa: E731
    nemo = _fixture("nemotron-vl-embed-avg")
    st_modules = j([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                    {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                    {"idx": 2, "name": "2", "path": "2_Normalize",
                     "type": "sentence_transformers.models.Normalize"}])
    pool_cls = j({"word_embedding_dimension": 256, "pooling_mode_cls_token": True,
                  "pooling_mode_mean_tokens": False})
    pool_lasttok = j({"word_embedding_dimension": 256, "pooling_mode_lasttoken": True})
    out: dict[str, dict[str, bytes]] = {
        # -- dtype from safetensors headers ----------------------------------------------------
        "st-bf16": {"config.json": j(LLAMA), "model.safetensors": _st(("w", "BF16", [4, 4]))},
        "st-f16": {"config.json": j(LLAMA), "model.safetensors": _st(("w", "F16", [4, 4]))},
        "st-bf16-f32": {"config.json": j(LLAMA),
                        "model-00001-of-00002.safetensors": _st(("w", "BF16", [4, 4])),
                        "model-00002-of-00002.safetensors": _st(("a_log", "F32", [4]), ("v", "BF16", [4])),
                        "model.safetensors.index.json": j({"weight_map": {
                            "w": "model-00001-of-00002.safetensors", "a_log": "model-00002-of-00002.safetensors",
                            "v": "model-00002-of-00002.safetensors"}})},
        "st-i8": {"config.json": j(LLAMA), "model.safetensors": _st(("q", "I8", [4, 4]))},
        "st-f8-f32": {"config.json": j(LLAMA),
                      "model.safetensors": _st(("q", "F8_E4M3", [4, 4]), ("s", "F32", [1]))},
        "st-f8": {"config.json": j(LLAMA), "model.safetensors": _st(("q", "F8_E4M3", [4, 4]))},
        "st-f64": {"config.json": j(LLAMA), "model.safetensors": _st(("w", "F64", [2]))},
        "st-config-wins": {"config.json": j(dict(LLAMA, torch_dtype="float16")),
                           "model.safetensors": _st(("w", "BF16", [4]))},
        "st-subfolder-only": {"config.json": j(LLAMA), "sub/model.safetensors": _st(("w", "F16", [4]))},
        "st-gemma2-f16": {"config.json": j({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
                                            "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                                            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                                            "max_position_embeddings": 4096, "vocab_size": 1024}),
                          "model.safetensors": _st(("w", "F16", [4]))},
        "st-hybrid-bf16-f32": {"config.json": j(_without(_fixture("qwen3-next-default"), "torch_dtype", "dtype")),
                               "model.safetensors": _st(("w", "BF16", [4]), ("A_log", "F32", [4]))},
        # -- sliding window -----------------------------------------------------------------------
        "swa": {"config.json": j(MISTRAL)},
        "swa-zero": {"config.json": j(dict(MISTRAL, sliding_window=0))},
        # -- tokenizer / sentence-transformers files --------------------------------------------
        "tok-generate": {"config.json": j(LLAMA), "tokenizer_config.json": j({"model_max_length": 1024})},
        "pool-tok-abs": {"config.json": j(dict(nemo, position_embedding_type="absolute")),
                         "tokenizer_config.json": j({"model_max_length": 1024})},
        "pool-tok-rel": {"config.json": j(nemo), "tokenizer_config.json": j({"model_max_length": 1024})},
        "pool-st": {"config.json": j(nemo), "modules.json": st_modules, "1_Pooling/config.json": pool_cls,
                    "sentence_bert_config.json": j({"max_seq_length": 512, "do_lower_case": False})},
        "pool-st-lasttok": {"config.json": j(nemo), "modules.json": st_modules[:0] + j(
                                [{"idx": 1, "name": "1", "path": "1_Pooling",
                                  "type": "sentence_transformers.models.Pooling"}]),
                            "1_Pooling/config.json": pool_lasttok,
                            "sentence_xlm-roberta_config.json": j({"max_seq_length": 300})},
        "pool-st-nomax": {"config.json": j(nemo), "sentence_bert_config.json": j({"do_lower_case": True})},
        "st-causal": {"config.json": j(LLAMA), "modules.json": st_modules[:0] + j(
                          [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                           {"idx": 1, "name": "1", "path": "1_Pooling",
                            "type": "sentence_transformers.models.Pooling"}]),
                      "1_Pooling/config.json": j({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}),
                      "sentence_bert_config.json": j({"max_seq_length": 256, "do_lower_case": False}),
                      "model.safetensors": _st(("w", "F32", [4]))},
        "st-encoder-generate": {"config.json": j(dict(LLAMA, torch_dtype="bfloat16")),
                                "sentence_bert_config.json": j({"max_seq_length": 256, "do_lower_case": True})},
        "st-encoder-empty-first": {"config.json": j(dict(LLAMA, torch_dtype="bfloat16")),
                                   "sentence_bert_config.json": j({}),
                                   "sentence_roberta_config.json": j({"max_seq_length": 300, "do_lower_case": False})},
        "st-encoder-incomplete-first": {"config.json": j(dict(LLAMA, torch_dtype="bfloat16")),
                                        "sentence_bert_config.json": j({"max_seq_length": 128}),
                                        "sentence_roberta_config.json": j({"max_seq_length": 300,
                                                                           "do_lower_case": False})},
        "generation-config": {"config.json": j(dict(LLAMA, torch_dtype="bfloat16")),
                              "generation_config.json": j({"temperature": 0.6, "max_new_tokens": 16,
                                                           "max_length": 100})},
    }
    # -- vLLM's own config classes, fields left out -------------------------------------------
    q3n = _fixture("qwen3-next-default")
    q35 = _fixture("qwen3.5-27b")
    olmo = _fixture("olmo-hybrid-default")
    lfm_moe = {"architectures": ["Lfm2MoeForCausalLM"], "model_type": "lfm2_moe", "hidden_size": 256,
               "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 6,
               "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
               "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "full_attention"],
               "conv_L_cache": 3, "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1024,
               "torch_dtype": "bfloat16"}
    cfgs = {
        "vcls-qwen3-next-bare": _without(q3n, "layer_types", "linear_num_value_heads", "linear_key_head_dim",
                                         "head_dim", "partial_rotary_factor", "rope_parameters", "rope_theta"),
        "vcls-qwen3.5-no-layers": _without(q35, "text_config.num_hidden_layers"),
        "vcls-qwen3.5-no-layer-types": _without(q35, "text_config.layer_types",
                                                "text_config.linear_num_value_heads"),
        "vcls-olmo-no-rope": _without(olmo, "rope_parameters", "rope_theta", "rope_scaling"),
        "vcls-lfm2-moe": lfm_moe,
        "vcls-lfm2-moe-bare": _without(lfm_moe, "layer_types", "conv_L_cache", "num_key_value_heads",
                                       "max_position_embeddings"),
        "vcls-kimi": KIMI,
        "vcls-kimi-no-mla": _without(KIMI, "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                                     "mla_use_nope"),
        "vcls-kimi-no-maxlen": _without(KIMI, "model_max_length"),
        "vcls-kimi-no-kv-heads": _without(KIMI, "num_key_value_heads", "head_dim", "kv_lora_rank",
                                          "qk_rope_head_dim", "mla_use_nope", "qk_nope_head_dim", "v_head_dim"),
        "vcls-kimi-no-linear": _without(KIMI, "linear_attn_config"),
        "vcls-kimi-bare": {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
                           "linear_attn_config": KIMI["linear_attn_config"], "torch_dtype": "bfloat16"},
    }
    for name, cfg in cfgs.items():
        out[name] = {"config.json": j(cfg)}
    return out


#: (case name, folder, EngineArgs) -- folder "hub:" + name means the offline hub-cache snapshot
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("st-bf16", "st-bf16", {}),
    ("st-f16", "st-f16", {}),
    ("st-bf16-f32", "st-bf16-f32", {}),
    ("st-i8", "st-i8", {}),
    ("st-f8-f32", "st-f8-f32", {}),
    ("st-f8", "st-f8", {}),
    ("st-f64", "st-f64", {}),
    ("st-config-wins", "st-config-wins", {}),
    ("st-subfolder-only", "st-subfolder-only", {}),
    ("st-bf16/dtype-f16", "st-bf16", {"dtype": "float16"}),
    ("st-f16/dtype-f32", "st-f16", {"dtype": "float32"}),
    ("st-gemma2-f16", "st-gemma2-f16", {}),
    ("st-hybrid-bf16-f32/prefix", "st-hybrid-bf16-f32", {"enable_prefix_caching": True}),
    ("swa", "swa", {}),
    ("swa/disable", "swa", {"disable_sliding_window": True}),
    ("swa/disable-maxlen", "swa", {"disable_sliding_window": True, "max_model_len": 8192}),
    ("swa/maxlen", "swa", {"max_model_len": 8192}),
    ("swa-zero", "swa-zero", {}),
    ("tok-generate", "tok-generate", {}),
    ("pool-tok-abs", "pool-tok-abs", {}),
    ("pool-tok-rel", "pool-tok-rel", {}),
    ("pool-st", "pool-st", {}),
    ("pool-st/maxlen-too-big", "pool-st", {"max_model_len": 4096}),
    ("pool-st-lasttok", "pool-st-lasttok", {}),
    ("pool-st-nomax", "pool-st-nomax", {}),
    ("st-causal", "st-causal", {}),
    ("st-encoder-generate", "st-encoder-generate", {}),
    ("st-encoder-empty-first", "st-encoder-empty-first", {}),
    ("st-encoder-incomplete-first", "st-encoder-incomplete-first", {}),
    ("generation-config", "generation-config", {}),
    ("hub/st-bf16-f32", "hub:st-bf16-f32", {}),
    ("vcls-qwen3-next-bare/prefix", "vcls-qwen3-next-bare", {"enable_prefix_caching": True}),
    ("vcls-qwen3.5-no-layers", "vcls-qwen3.5-no-layers", {}),
    ("vcls-qwen3.5-no-layer-types/prefix", "vcls-qwen3.5-no-layer-types", {"enable_prefix_caching": True}),
    ("vcls-olmo-no-rope/prefix", "vcls-olmo-no-rope", {"enable_prefix_caching": True}),
    ("vcls-lfm2-moe/prefix", "vcls-lfm2-moe", {"enable_prefix_caching": True}),
    ("vcls-lfm2-moe-bare/prefix", "vcls-lfm2-moe-bare", {"enable_prefix_caching": True}),
    ("vcls-kimi/prefix", "vcls-kimi", {"enable_prefix_caching": True}),
    ("vcls-kimi-no-mla/prefix", "vcls-kimi-no-mla", {"enable_prefix_caching": True}),
    ("vcls-kimi-no-maxlen", "vcls-kimi-no-maxlen", {}),
    ("vcls-kimi-no-kv-heads/prefix", "vcls-kimi-no-kv-heads", {"enable_prefix_caching": True}),
    ("vcls-kimi-no-linear", "vcls-kimi-no-linear", {}),
    ("vcls-kimi-bare/prefix", "vcls-kimi-bare", {"enable_prefix_caching": True}),
]


def build(root: Path) -> dict[str, Path]:
    """Write every model folder under *root* (plus a hub cache at ``root/hub-cache``); returns
    folder name -> path ("hub:NAME" -> the cached snapshot folder)."""
    paths: dict[str, Path] = {}
    for name, files in folders().items():
        d = root / "models" / name
        for rel, data in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
        paths[name] = d
    cache = root / "hub-cache"
    write_cache_repo(cache, HUB_REPO, folders()["st-bf16-f32"], commit=HUB_COMMIT)
    paths["hub:st-bf16-f32"] = cache / ("models--" + HUB_REPO.replace("/", "--")) / "snapshots" / HUB_COMMIT
    return paths
