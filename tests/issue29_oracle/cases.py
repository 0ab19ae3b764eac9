"""The cases of issue 29 asked of the real vLLM 0.19.0, and the model folders built for them.

Plain Python (no vLLM needed); the two drivers beside it run in the oracle venv:

    python tests/issue29_oracle/cases.py write                 # configs/ and cases-*.json
    python tests/issue29_oracle/cases.py config  [--ref DIR]   # -> config_time.json (items 1-4, 7, 8)
    python tests/issue29_oracle/cases.py hub     [--ref DIR]   # -> hub.json (item 8, repo ids)
    python tests/issue29_oracle/cases.py cli     [--ref DIR]   # -> cli.json (`vllm serve` parsing)
    python tests/issue29_oracle/cases.py startup [--ref DIR]   # -> startup.json (items 4-7)
    python tests/issue29_oracle/cases.py summarize             # startup.json -> startup_summary.json

``--ref DIR`` (default ``$ENGINECFG_ORACLE_REF``, else ``../ref`` beside the checkout) holds the
oracle venv ``venv19`` (vLLM 0.19.0) and the transformers overlays ``tf523-overlay`` (5.23.0)
and ``tf5-overlay`` (5.5.0, Gemma 4 only), built as the vLLM 0.19.0 oracle's README says.
The oracle is a development tool: tests read only the committed JSON.

A case is ``{"name", "item", "config_dir" (relative to this folder), "args": {EngineArgs
field: value}}``; fixture configs are named by their folder in ``tests/data/vllm-0.19.0/configs``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURES = REPO / "tests" / "data" / "vllm-0.19.0"
FIXTURE_REL = Path("..", "data", "vllm-0.19.0", "configs")
CONSTRUCTED = HERE / "configs"

#: every fixture config (the folders of tests/data/vllm-0.19.0/configs)
FIXTURE_NAMES = sorted(p.name for p in (FIXTURES / "configs").iterdir()
                       if (p / "config.json").exists())
GEMMA4 = ("gemma-4-26b-a4b", "gemma-4-26b-a4b-nvfp4", "gemma4-text-default")

#: over every derived max_model_len of the fixtures
HUGE_LEN = 16_777_216


def fixture(name: str) -> str:
    return str(FIXTURE_REL / name)


def constructed(name: str) -> str:
    return str(Path("configs") / name)


def _fixture_config(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "configs" / name / "config.json").read_text())


# ---------------------------------------------------------------------------------------------
# constructed model folders
# ---------------------------------------------------------------------------------------------
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
         "intermediate_size": 2816, "num_hidden_layers": 4, "num_attention_heads": 16,
         "num_key_value_heads": 8, "max_position_embeddings": 4096, "vocab_size": 32000,
         "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5}


def _modelopt(algo: str, kv: str | None, version: str = "0.27.1",
              exclude: list[str] | None = None) -> dict[str, Any]:
    """hf_quant_config.json as ModelOpt <= 0.29 writes it beside config.json."""
    return {"producer": {"name": "modelopt", "version": version},
            "quantization": {"quant_algo": algo, "kv_cache_quant_algo": kv, "group_size": 16,
                             "exclude_modules": exclude if exclude is not None else ["lm_head"]}}


def _rope_llama(**rope: Any) -> dict[str, Any]:
    cfg = dict(LLAMA, max_position_embeddings=8192)
    cfg["rope_scaling"] = rope
    return cfg


def folders() -> dict[str, dict[str, Any]]:
    """folder name -> {relative file name: JSON value (or bytes)}."""
    nano = _fixture_config("nemotron-3-nano-30b-a3b-nvfp4")
    super_fp8 = _fixture_config("nemotron-3-super-120b-a12b-fp8")
    lightning = _fixture_config("nemotron-3.5-lightning-30b-a3b-nvfp4")
    qwen_nvfp4 = _fixture_config("qwen3.6-27b-nvfp4")
    vl_avg = _fixture_config("nemotron-vl-embed-avg")
    st_modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    side_files = {
        # every file a model folder may hold beside config.json; which of them vLLM opens
        # while it builds the config is what item 8 records
        "generation_config.json": {"max_length": 4096, "temperature": 0.6},
        "tokenizer_config.json": {"model_max_length": 2048, "tokenizer_class": "LlamaTokenizer"},
        "special_tokens_map.json": {"bos_token": "<s>"},
        "preprocessor_config.json": {"image_processor_type": "CLIPImageProcessor"},
        "processor_config.json": {"processor_class": "LlavaProcessor"},
        "chat_template.json": {"chat_template": "{{ messages }}"},
        "modules.json": st_modules,
        "1_Pooling/config.json": {"pooling_mode_mean_tokens": True},
        "sentence_bert_config.json": {"max_seq_length": 1024, "do_lower_case": False},
        "config_sentence_transformers.json": {"prompts": {}},
        "adapter_config.json": {"peft_type": "LORA"},
        "quant_config.json": {"quant_method": "gptq"},
        "quantize_config.json": {"bits": 4},
        "model.safetensors.index.json": {"weight_map": {}},
        "params.json": {"dim": 1024},
    }
    out: dict[str, dict[str, Any]] = {
        # ---- item 8: ModelOpt <= 0.29 checkpoints (quantization beside config.json) ----------
        "modelopt-nano-nvfp4": {"config.json": nano,
                                "hf_quant_config.json": _modelopt("NVFP4", "FP8")},
        "modelopt-nano-nvfp4-nokv": {"config.json": nano,
                                     "hf_quant_config.json": _modelopt("NVFP4", None)},
        "modelopt-lightning-nvfp4": {"config.json": lightning,
                                     "hf_quant_config.json": _modelopt("NVFP4", "FP8")},
        "modelopt-super-fp8": {"config.json": super_fp8,
                               "hf_quant_config.json": _modelopt("FP8", "FP8")},
        # config.json names its own quantization: the file beside it is not read
        "modelopt-both": {"config.json": qwen_nvfp4,
                          "hf_quant_config.json": _modelopt("FP8", "FP8")},
        # a small dense model (its class builds on the meta device at start-up)
        "modelopt-llama-nvfp4": {"config.json": LLAMA,
                                 "hf_quant_config.json": _modelopt("NVFP4", "FP8")},
        "modelopt-llama-fp8": {"config.json": LLAMA,
                               "hf_quant_config.json": _modelopt("FP8", None)},
        "modelopt-llama-fp16-cfg": {"config.json": dict(LLAMA, torch_dtype="float16"),
                                    "hf_quant_config.json": _modelopt("NVFP4", "FP8")},
        # an empty or odd file beside config.json
        "modelopt-llama-empty": {"config.json": LLAMA, "hf_quant_config.json": {}},
        "modelopt-llama-noquant-key": {"config.json": LLAMA,
                                       "hf_quant_config.json": {"producer": {"name": "modelopt"}}},
        # ---- item 8: which files vLLM opens -------------------------------------------------
        "files-llama": dict({"config.json": LLAMA, "hf_quant_config.json": _modelopt("FP8", None)},
                            **side_files),
        "files-llama-abs": dict({"config.json": dict(LLAMA, position_embedding_type="absolute")},
                                **side_files),
        "files-vl-embed": dict({"config.json": vl_avg}, **side_files),
        # no sentence-transformers modules.json: the runner stays "generate"
        "files-llama-generate": dict({"config.json": LLAMA, "hf_quant_config.json": _modelopt("FP8", None)},
                                     **{k: v for k, v in side_files.items()
                                        if k not in ("modules.json", "1_Pooling/config.json")}),
        # a pooling model with absolute positions and only tokenizer_config.json beside
        "tok-abs-only": {"config.json": dict(LLAMA, position_embedding_type="absolute"),
                         "tokenizer_config.json": {"model_max_length": 1024}},
        # ---- item 2: what makes the derived length a float -----------------------------------
        "rope-none": {"config.json": {k: v for k, v in LLAMA.items()}},
        "rope-default": {"config.json": _rope_llama(rope_type="default")},
        "rope-linear-int": {"config.json": _rope_llama(rope_type="linear", factor=2)},
        "rope-linear-float": {"config.json": _rope_llama(rope_type="linear", factor=2.0)},
        "rope-yarn-int": {"config.json": _rope_llama(rope_type="yarn", factor=4,
                                                     original_max_position_embeddings=4096)},
        "rope-llama3": {"config.json": _rope_llama(rope_type="llama3", factor=8.0,
                                                   low_freq_factor=1.0, high_freq_factor=4.0,
                                                   original_max_position_embeddings=8192)},
        "rope-theta-only": {"config.json": dict(LLAMA, rope_theta=500000.0)},
        "gemma3-text": {"config.json": {"architectures": ["Gemma3ForCausalLM"],
                                        "model_type": "gemma3_text", "hidden_size": 640,
                                        "intermediate_size": 2048, "num_hidden_layers": 4,
                                        "num_attention_heads": 4, "num_key_value_heads": 1,
                                        "head_dim": 256, "max_position_embeddings": 32768,
                                        "sliding_window": 512, "vocab_size": 262144,
                                        "torch_dtype": "bfloat16"}},
        # ---- item 5: the attention backends of more layer kinds ------------------------------
        # the bidirectional Llama that LlamaNemotronVL's language model is (the VL fixtures
        # are hand-built without a vision tower, so their class does not build)
        "llama-bidir-avg": {"config.json": dict(LLAMA, architectures=["LlamaBidirectionalModel"],
                                                pooling="avg", max_position_embeddings=8192)},
        "llama-bidir-cls": {"config.json": dict(LLAMA, architectures=["LlamaBidirectionalModel"],
                                                pooling="cls", max_position_embeddings=8192)},
        "llama-hd64": {"config.json": LLAMA},
        "llama-hd96": {"config.json": dict(LLAMA, hidden_size=1536)},
        "llama-hd80": {"config.json": dict(LLAMA, hidden_size=1280)},
        "llama-hd160": {"config.json": dict(LLAMA, head_dim=160)},
        "llama-hd256": {"config.json": dict(LLAMA, head_dim=256)},
        "llama-hd512": {"config.json": dict(LLAMA, head_dim=512)},
        "llama-hd72": {"config.json": dict(LLAMA, head_dim=72)},
        "llama-fp16": {"config.json": dict(LLAMA, torch_dtype="float16")},
        "llama-fp32": {"config.json": dict(LLAMA, torch_dtype="float32")},
        "mistral-swa": {"config.json": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                                        "hidden_size": 1024, "intermediate_size": 2816,
                                        "num_hidden_layers": 4, "num_attention_heads": 16,
                                        "num_key_value_heads": 8, "max_position_embeddings": 32768,
                                        "sliding_window": 4096, "vocab_size": 32000,
                                        "torch_dtype": "bfloat16"}},
        # DeepSeek-V2-Lite's own shape (the fixture is transformers' default DeepseekV2Config
        # with MLA dimensions); grouped top-k off so that the class builds
        "deepseek-v2-lite": {"config.json": {
            "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
            "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
            "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
            "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64,
            "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
            "moe_layer_freq": 1, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
            "norm_topk_prob": False, "routed_scaling_factor": 1.0, "scoring_func": "softmax",
            "max_position_embeddings": 163840, "vocab_size": 102400, "torch_dtype": "bfloat16",
            "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 40,
                                                   "original_max_position_embeddings": 4096,
                                                   "beta_fast": 32, "beta_slow": 1, "mscale": 0.707,
                                                   "mscale_all_dim": 0.707}}},
    }
    return out


def write_folders() -> None:
    """Write configs/ (only what changed, so that a run reading it meanwhile is undisturbed)."""
    wanted: set[Path] = set()
    for folder, files in folders().items():
        for name, value in files.items():
            path = CONSTRUCTED / folder / name
            wanted.add(path)
            data = value if isinstance(value, bytes) else (json.dumps(value, indent=1) + "\n").encode()
            if not path.exists() or path.read_bytes() != data:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
    for path in sorted(CONSTRUCTED.rglob("*"), reverse=True):
        if path.is_file() and path not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


# ---------------------------------------------------------------------------------------------
# config-time cases (items 1, 2, 3, 4, 7, 8)
# ---------------------------------------------------------------------------------------------
#: engine arguments vLLM's own type checks refuse (each alone is an error)
BAD_ARGS: dict[str, dict[str, Any]] = {
    "ssm-bf16": {"mamba_ssm_cache_dtype": "bfloat16"},
    "mamba-bf16": {"mamba_cache_dtype": "bfloat16"},
    "kvdtype-fp4": {"kv_cache_dtype": "fp4"},
    "mode-bad": {"mamba_cache_mode": "sometimes"},
    "dtype-int8": {"dtype": "int8"},
    "maxlen-0": {"max_model_len": 0},
    "tp-0": {"tensor_parallel_size": 0},
    "backend-bad": {"attention_backend": "NOT_A_BACKEND"},
    "mbs-0": {"mamba_block_size": 0},
    "mnbt-0": {"max_num_batched_tokens": 0},
    "mns-0": {"max_num_seqs": 0},
    "gmu-1.5": {"gpu_memory_utilization": 1.5},
    "hash-bad": {"prefix_caching_hash_algo": "md5"},
}


def config_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []

    def add(item: str, name: str, config_dir: str, args: dict[str, Any], **extra: Any) -> None:
        cases.append({"name": f"{item}/{name}", "item": item, "config_dir": config_dir,
                      "args": args, **extra})

    # ---- item 1: an argument error with a config-time error --------------------------------
    vl_errors = {"vl-mean": ("nemotron-vl-embed-mean-bad", {}),
                 "vl-nopool": ("nemotron-vl-embed-nopooling", {}),
                 "falcon-bad-heads": ("falcon-h1-0.5b", {}),
                 "maxlen-too-big": ("deepseek-v2-lite-like", {"max_model_len": 8192}),
                 "sched-mnbt": ("nemotron-vl-embed-avg", {"max_num_batched_tokens": 1024}),
                 "align-nochunk": ("jamba-1.5-mini", {"enable_prefix_caching": True,
                                                      "mamba_cache_mode": "align",
                                                      "enable_chunked_prefill": False}),
                 "mbs-noprefix": ("jamba-1.5-mini", {"mamba_block_size": 256}),
                 "olmo-tp4": ("olmo-hybrid-default", {"tensor_parallel_size": 4}),
                 "minimax-fp32": ("minimax-default", {"mamba_cache_dtype": "float32"})}
    for bad, bargs in BAD_ARGS.items():
        add("1", f"alone/{bad}", fixture("jamba-1.5-mini"), bargs)
    for err, (cfg, eargs) in vl_errors.items():
        add("1", f"alone/{err}", fixture(cfg), eargs)
        for bad, bargs in BAD_ARGS.items():
            if set(bargs) & set(eargs):
                continue
            add("1", f"{err}+{bad}", fixture(cfg), {**eargs, **bargs})
    # the model-level hook against what ModelConfig checks before it and what comes after
    for err, (cfg, eargs) in (("vl-mean", vl_errors["vl-mean"]), ("vl-nopool", vl_errors["vl-nopool"])):
        for other, oargs in {"maxlen-huge": {"max_model_len": HUGE_LEN},
                             "tp3": {"tensor_parallel_size": 3},
                             "mbs256-noprefix": {"mamba_block_size": 256},
                             "partial-2": {"max_num_partial_prefills": 2},
                             "mnbt-1024": {"max_num_batched_tokens": 1024},
                             "quant-fp8": {"quantization": "fp8"},
                             "bs-16": {"block_size": -16}}.items():
            add("1", f"{err}+{other}", fixture(cfg), {**eargs, **oargs})
    # two argument errors: which field vLLM names first
    add("1", "ssm-bf16+mamba-bf16", fixture("jamba-1.5-mini"),
        {**BAD_ARGS["ssm-bf16"], **BAD_ARGS["mamba-bf16"]})
    add("1", "ssm-bf16+kvdtype-fp4", fixture("jamba-1.5-mini"),
        {**BAD_ARGS["ssm-bf16"], **BAD_ARGS["kvdtype-fp4"]})
    add("1", "ssm-bf16+mnbt-0", fixture("jamba-1.5-mini"),
        {**BAD_ARGS["ssm-bf16"], **BAD_ARGS["mnbt-0"]})
    add("1", "dtype-int8+ssm-bf16", fixture("jamba-1.5-mini"),
        {**BAD_ARGS["dtype-int8"], **BAD_ARGS["ssm-bf16"]})
    add("1", "tp-0+ssm-bf16", fixture("jamba-1.5-mini"),
        {**BAD_ARGS["tp-0"], **BAD_ARGS["ssm-bf16"]})
    add("1", "mnbt-0+tp-0", fixture("jamba-1.5-mini"),
        {**BAD_ARGS["mnbt-0"], **BAD_ARGS["tp-0"]})

    # ---- item 2: the derived length in the max-len error ------------------------------------
    for name in FIXTURE_NAMES:
        add("2", f"{name}/huge", fixture(name), {"max_model_len": HUGE_LEN},
            **({"transformers": "5.5.0"} if name in GEMMA4 else {}))
    for name in ("nemotron-h-56b-base-8k", "jamba-1.5-mini", "deepseek-v2-lite-like",
                 "zamba2-default", "nemotron-vl-embed-avg", "qwen3.5-27b", "mamba-130m-hf"):
        add("2", f"{name}/huge-allow", fixture(name), {"max_model_len": HUGE_LEN},
            env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    for folder in ("rope-none", "rope-default", "rope-linear-int", "rope-linear-float",
                   "rope-yarn-int", "rope-llama3", "rope-theta-only", "gemma3-text"):
        add("2", f"{folder}/huge", constructed(folder), {"max_model_len": HUGE_LEN})
    add("2", "files-llama-abs/pooling-huge", constructed("files-llama-abs"),
        {"max_model_len": HUGE_LEN, "runner": "pooling"})
    add("2", "files-llama/pooling-huge", constructed("files-llama"),
        {"max_model_len": HUGE_LEN, "runner": "pooling"})
    add("2", "tok-abs-only/pooling-huge", constructed("tok-abs-only"),
        {"max_model_len": HUGE_LEN, "runner": "pooling"})
    add("2", "tok-abs-only/generate-huge", constructed("tok-abs-only"), {"max_model_len": HUGE_LEN})
    add("2", "mistral-swa/disable-sw-huge", constructed("mistral-swa"),
        {"max_model_len": HUGE_LEN, "disable_sliding_window": True})

    # ---- item 3: the scheduler's length check ------------------------------------------------
    for cfg in ("nemotron-vl-embed-avg", "nemotron-vl-embed-cls"):
        for mnbt in (1024, 8191, 8192, 8193, 16384):
            add("3", f"{cfg}/mnbt-{mnbt}", fixture(cfg), {"max_num_batched_tokens": mnbt})
        add("3", f"{cfg}/default", fixture(cfg), {})
        add("3", f"{cfg}/mnbt-1024+chunked", fixture(cfg),
            {"max_num_batched_tokens": 1024, "enable_chunked_prefill": True})
        add("3", f"{cfg}/mnbt-1024+maxlen-1024", fixture(cfg),
            {"max_num_batched_tokens": 1024, "max_model_len": 1024})
        add("3", f"{cfg}/mnbt-1024+maxlen-2048", fixture(cfg),
            {"max_num_batched_tokens": 1024, "max_model_len": 2048})
        add("3", f"{cfg}/mnbt-512+mns-1024", fixture(cfg),
            {"max_num_batched_tokens": 512, "max_num_seqs": 1024})
        add("3", f"{cfg}/mnbt-1024+tp3", fixture(cfg),
            {"max_num_batched_tokens": 1024, "tensor_parallel_size": 3})
        add("3", f"{cfg}/mnbt-1024+mbs-256", fixture(cfg),
            {"max_num_batched_tokens": 1024, "mamba_block_size": 256})
        add("3", f"{cfg}/mnbt-1024+maxlen-huge", fixture(cfg),
            {"max_num_batched_tokens": 1024, "max_model_len": HUGE_LEN})
        add("3", f"{cfg}/mnbt-1024+ssm-bf16", fixture(cfg),
            {"max_num_batched_tokens": 1024, "mamba_ssm_cache_dtype": "bfloat16"})
        add("3", f"{cfg}/mnbt-1024+mns-2048", fixture(cfg),
            {"max_num_batched_tokens": 1024, "max_num_seqs": 2048})
        add("3", f"{cfg}/mnbt-1024+partial-2", fixture(cfg),
            {"max_num_batched_tokens": 1024, "max_num_partial_prefills": 2})
    for cfg in ("deepseek-v2-lite-like", "jamba-1.5-mini", "qwen3.5-27b",
                "nemotron-3-nano-30b-a3b-bf16", "mamba-130m-hf", "gemma4-text-default"):
        tf = {"transformers": "5.5.0"} if cfg in GEMMA4 else {}
        for mnbt in (1024, 2048):
            add("3", f"{cfg}/nochunk-mnbt-{mnbt}", fixture(cfg),
                {"max_num_batched_tokens": mnbt, "enable_chunked_prefill": False}, **tf)
        add("3", f"{cfg}/nochunk-mnbt-1024-maxlen-1024", fixture(cfg),
            {"max_num_batched_tokens": 1024, "enable_chunked_prefill": False,
             "max_model_len": 1024}, **tf)
        add("3", f"{cfg}/nochunk", fixture(cfg), {"enable_chunked_prefill": False}, **tf)
        add("3", f"{cfg}/mnbt-1024", fixture(cfg), {"max_num_batched_tokens": 1024}, **tf)
    add("3", "jamba-1.5-mini/align-nochunk+mnbt-1024", fixture("jamba-1.5-mini"),
        {"enable_prefix_caching": True, "mamba_cache_mode": "align",
         "enable_chunked_prefill": False, "max_num_batched_tokens": 1024})
    add("3", "files-llama/pooling-mnbt-1024", constructed("files-llama"),
        {"runner": "pooling", "max_num_batched_tokens": 1024})
    add("3", "files-llama/pooling-cls-mnbt-1024", constructed("llama-hd64"),
        {"runner": "pooling", "max_num_batched_tokens": 1024,
         "pooler_config": {"seq_pooling_type": "CLS"}})
    add("3", "llama/pooling-last-mnbt-1024", constructed("llama-hd64"),
        {"runner": "pooling", "max_num_batched_tokens": 1024,
         "pooler_config": {"seq_pooling_type": "LAST"}})
    add("3", "llama/pooling-mean-mnbt-1024", constructed("llama-hd64"),
        {"runner": "pooling", "max_num_batched_tokens": 1024,
         "pooler_config": {"seq_pooling_type": "MEAN"}})
    add("3", "llama/pooling-mean-default", constructed("llama-hd64"),
        {"runner": "pooling", "pooler_config": {"seq_pooling_type": "MEAN"}})

    # ---- item 4: --disable-hybrid-kv-cache-manager at config time ----------------------------
    for cfg in ("qwen3.5-27b", "jamba-1.5-mini", "nemotron-3-nano-30b-a3b-bf16",
                "deepseek-v2-lite-like", "gemma-4-26b-a4b", "gemma4-text-default",
                "mamba-130m-hf", "nemotron-vl-embed-avg", "zamba2-default", "falcon-h1-default"):
        tf = {"transformers": "5.5.0"} if cfg in GEMMA4 else {}
        for value in (True, False):
            add("4", f"{cfg}/dhkv-{str(value).lower()}", fixture(cfg),
                {"disable_hybrid_kv_cache_manager": value}, **tf)
        add("4", f"{cfg}/dhkv-true+prefix", fixture(cfg),
            {"disable_hybrid_kv_cache_manager": True, "enable_prefix_caching": True}, **tf)
    add("4", "qwen3.5-27b/dhkv-true+align", fixture("qwen3.5-27b"),
        {"disable_hybrid_kv_cache_manager": True, "enable_prefix_caching": True,
         "mamba_cache_mode": "align"})
    add("4", "mistral-swa/dhkv-true", constructed("mistral-swa"),
        {"disable_hybrid_kv_cache_manager": True})
    add("4", "qwen3.5-27b/dhkv-false+kv-events", fixture("qwen3.5-27b"),
        {"disable_hybrid_kv_cache_manager": False,
         "kv_events_config": {"enable_kv_cache_events": True}})
    add("4", "qwen3.5-27b/kv-events", fixture("qwen3.5-27b"),
        {"kv_events_config": {"enable_kv_cache_events": True}})

    # ---- item 7: nonpositive block sizes with each check -------------------------------------
    hybrid, mla, free, swa = ("jamba-1.5-mini", "deepseek-v2-lite-like", "mamba-130m-hf",
                              "gemma4-text-default")
    checks: dict[str, dict[str, Any]] = {
        "alone": {},
        "mbs256-noprefix": {"mamba_block_size": 256},
        "align-nochunk": {"enable_prefix_caching": True, "mamba_cache_mode": "align",
                          "enable_chunked_prefill": False},
        "align": {"enable_prefix_caching": True, "mamba_cache_mode": "align"},
        "prefix": {"enable_prefix_caching": True},
        "fp8": {"kv_cache_dtype": "fp8"},
        "tp3": {"tensor_parallel_size": 3},
        "maxlen-huge": {"max_model_len": HUGE_LEN},
        "nochunk-mnbt-1024": {"enable_chunked_prefill": False, "max_num_batched_tokens": 1024},
        "ssm-bf16": {"mamba_ssm_cache_dtype": "bfloat16"},
        "mamba-fp32": {"mamba_cache_dtype": "float32"},
        "backend-flash": {"attention_backend": "FLASH_ATTN"},
    }
    for bs in (-16, 0, -1):
        for cfg in (hybrid, mla, free, swa):
            tf = {"transformers": "5.5.0"} if cfg in GEMMA4 else {}
            for check, cargs in checks.items():
                add("7", f"{cfg}/bs{bs}/{check}", fixture(cfg), {"block_size": bs, **cargs}, **tf)
    add("7", "jamba-1.5-mini/mbs-256+prefix+bs-16", fixture(hybrid),
        {"block_size": -16, "mamba_block_size": 256, "enable_prefix_caching": True})
    add("7", "jamba-1.5-mini/mbs--256+prefix", fixture(hybrid),
        {"mamba_block_size": -256, "enable_prefix_caching": True})
    add("7", "jamba-1.5-mini/mbs-0+prefix", fixture(hybrid),
        {"mamba_block_size": 0, "enable_prefix_caching": True})
    add("7", "qwen3.5-27b/bs-16+align", fixture("qwen3.5-27b"),
        {"block_size": -16, "enable_prefix_caching": True, "mamba_cache_mode": "align"})
    add("7", "qwen3.5-27b/bs0", fixture("qwen3.5-27b"), {"block_size": 0})
    add("7", "nemotron-vl-embed-avg/bs-16", fixture("nemotron-vl-embed-avg"), {"block_size": -16})
    add("7", "nemotron-vl-embed-mean-bad/bs-16", fixture("nemotron-vl-embed-mean-bad"),
        {"block_size": -16})

    # ---- item 8: quantization beside config.json, and the files vLLM opens -------------------
    for folder in ("modelopt-nano-nvfp4", "modelopt-nano-nvfp4-nokv", "modelopt-lightning-nvfp4",
                   "modelopt-super-fp8", "modelopt-both", "modelopt-llama-nvfp4",
                   "modelopt-llama-fp8", "modelopt-llama-fp16-cfg", "modelopt-llama-empty",
                   "modelopt-llama-noquant-key"):
        add("8", f"{folder}/default", constructed(folder), {})
    for folder in ("modelopt-nano-nvfp4", "modelopt-llama-nvfp4"):
        add("8", f"{folder}/kv-auto-explicit", constructed(folder), {"kv_cache_dtype": "auto"})
        add("8", f"{folder}/kv-bf16", constructed(folder), {"kv_cache_dtype": "bfloat16"})
        add("8", f"{folder}/kv-fp8-e5m2", constructed(folder), {"kv_cache_dtype": "fp8_e5m2"})
        add("8", f"{folder}/dtype-fp16", constructed(folder), {"dtype": "float16"})
        add("8", f"{folder}/dtype-fp32", constructed(folder), {"dtype": "float32"})
        add("8", f"{folder}/quant-modelopt-fp4", constructed(folder),
            {"quantization": "modelopt_fp4"})
        add("8", f"{folder}/quant-modelopt", constructed(folder), {"quantization": "modelopt"})
        add("8", f"{folder}/quant-fp8", constructed(folder), {"quantization": "fp8"})
        add("8", f"{folder}/prefix", constructed(folder), {"enable_prefix_caching": True})
        add("8", f"{folder}/tp2", constructed(folder), {"tensor_parallel_size": 2})
    add("8", "modelopt-super-fp8/quant-modelopt-fp4", constructed("modelopt-super-fp8"),
        {"quantization": "modelopt_fp4"})
    for fixture_name in ("nemotron-3-nano-30b-a3b-nvfp4", "nemotron-3-super-120b-a12b-fp8"):
        add("8", f"{fixture_name}/default (no file beside)", fixture(fixture_name), {})
    for folder in ("files-llama", "files-llama-abs", "files-vl-embed", "files-llama-generate"):
        add("8", f"{folder}/default", constructed(folder), {})
        add("8", f"{folder}/pooling", constructed(folder), {"runner": "pooling"})
        add("8", f"{folder}/tokenizer-init", constructed(folder), {"skip_tokenizer_init": False})
    add("8", "files-llama/generation-config-vllm", constructed("files-llama"),
        {"generation_config": "vllm"})
    return cases


def cli_cases() -> list[dict[str, Any]]:
    """``vllm serve`` command lines: what vLLM's own parser refuses before any config is read."""
    vl, jamba = fixture("nemotron-vl-embed-mean-bad"), fixture("jamba-1.5-mini")
    rows = [
        ("1", "vl-mean/ssm-bf16", vl, ["--mamba-ssm-cache-dtype", "bfloat16"]),
        ("1", "vl-mean/mamba-bf16", vl, ["--mamba-cache-dtype", "bfloat16"]),
        ("1", "vl-mean/kvdtype-fp4", vl, ["--kv-cache-dtype", "fp4"]),
        ("1", "vl-mean/mnbt-0", vl, ["--max-num-batched-tokens", "0"]),
        ("1", "vl-mean/dtype-int8", vl, ["--dtype", "int8"]),
        ("1", "vl-mean/none", vl, []),
        ("1", "jamba/ssm-bf16", jamba, ["--mamba-ssm-cache-dtype", "bfloat16"]),
        ("3", "vl-avg/mnbt-1024", fixture("nemotron-vl-embed-avg"), ["--max-num-batched-tokens", "1024"]),
        ("4", "qwen3.5-27b/dhkv", fixture("qwen3.5-27b"), ["--disable-hybrid-kv-cache-manager"]),
        ("4", "qwen3.5-27b/no-dhkv", fixture("qwen3.5-27b"), ["--no-disable-hybrid-kv-cache-manager"]),
        ("7", "jamba/bs-16+mbs256", jamba, ["--block-size", "-16", "--mamba-block-size", "256"]),
        ("7", "jamba/bs0+align-nochunk", jamba, ["--block-size", "0", "--enable-prefix-caching",
                                                  "--mamba-cache-mode", "align",
                                                  "--no-enable-chunked-prefill"]),
        ("7", "jamba/bs-16", jamba, ["--block-size", "-16"]),
        ("7", "deepseek/bs0", fixture("deepseek-v2-lite-like"), ["--block-size", "0"]),
        ("7", "jamba/mbs0+prefix", jamba, ["--mamba-block-size", "0", "--enable-prefix-caching"]),
    ]
    return [{"name": f"cli/{name}", "item": item, "config_dir": cdir, "argv": argv}
            for item, name, cdir, argv in rows]


#: config-time cases asked of a hub (repo ids): served by a local HTTP hub, online
HUB_REPOS = {"org/modelopt-nano-nvfp4": "modelopt-nano-nvfp4",
             "org/files-llama": "files-llama",
             "org/files-llama-generate": "files-llama-generate",
             "org/tok-abs-only": "tok-abs-only",
             "org/files-vl-embed": "files-vl-embed"}


def hub_cases() -> list[dict[str, Any]]:
    cases = []
    for repo, folder in HUB_REPOS.items():
        cases.append({"name": f"8/hub/{repo}/default", "item": "8", "repo_id": repo,
                      "folder": constructed(folder), "args": {}})
        cases.append({"name": f"8/hub/{repo}/pooling", "item": "8", "repo_id": repo,
                      "folder": constructed(folder), "args": {"runner": "pooling"}})
    return cases


# ---------------------------------------------------------------------------------------------
# start-up cases (items 4, 5, 6, 7)
# ---------------------------------------------------------------------------------------------
def startup_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []

    def add(item: str, name: str, config_dir: str, args: dict[str, Any], gemma: bool = False) -> None:
        if any(c["name"] == name for c in cases):
            return  # an argument set of the fixtures already
        case = {"name": name, "item": item, "config_dir": config_dir, "args": args}
        if gemma:
            case["transformers"] = "5.5.0"
        cases.append(case)

    # every fixture case that resolves at config time, under its argument set
    for case in json.loads((FIXTURES / "cases.json").read_text())["cases"]:
        if case["expected"]["status"] != "resolved":
            continue
        folder = case["config"].split("/", 1)[1]
        add("5", case["name"], fixture(folder), case["engine_args"], gemma=folder in GEMMA4)
    # MLA and backend-preference combinations beyond the argument sets
    for folder in ("deepseek-v2-lite-like", "deepseek-v2-lite"):
        for name, args in {"fp8+tp2": {"kv_cache_dtype": "fp8", "tensor_parallel_size": 2},
                           "fp8+bs16": {"kv_cache_dtype": "fp8", "block_size": 16},
                           "fp8+bs32": {"kv_cache_dtype": "fp8", "block_size": 32},
                           "fp8+bs64": {"kv_cache_dtype": "fp8", "block_size": 64},
                           "fp8+bs128": {"kv_cache_dtype": "fp8", "block_size": 128},
                           "fp8-e4m3": {"kv_cache_dtype": "fp8_e4m3"},
                           "fp8-e5m2": {"kv_cache_dtype": "fp8_e5m2"},
                           "bf16-kv": {"kv_cache_dtype": "bfloat16"},
                           "fp16": {"dtype": "float16"},
                           "fp16+fp8": {"dtype": "float16", "kv_cache_dtype": "fp8"},
                           "be-flashmla": {"attention_backend": "FLASHMLA"},
                           "be-flashinfer-mla": {"attention_backend": "FLASHINFER_MLA"},
                           "be-triton-mla": {"attention_backend": "TRITON_MLA"},
                           "be-cutlass-mla": {"attention_backend": "CUTLASS_MLA"},
                           "be-flash-attn-mla+fp8": {"attention_backend": "FLASH_ATTN_MLA",
                                                     "kv_cache_dtype": "fp8"},
                           "fp8+prefix": {"kv_cache_dtype": "fp8", "enable_prefix_caching": True},
                           "default": {}, "fp8": {"kv_cache_dtype": "fp8"}}.items():
            if folder == "deepseek-v2-lite-like" and name in ("default", "fp8"):
                continue  # in the fixture argument sets already
            add("5", f"{folder}/{name}", fixture(folder) if folder.endswith("-like")
                else constructed(folder), args)
    for folder in ("llama-hd64", "llama-hd72", "llama-hd80", "llama-hd96", "llama-hd160",
                   "llama-hd256", "llama-hd512", "llama-fp16", "llama-fp32", "mistral-swa",
                   "gemma3-text"):
        for name, args in {"default": {}, "fp8": {"kv_cache_dtype": "fp8"},
                           "fp8-e5m2": {"kv_cache_dtype": "fp8_e5m2"}, "bs32": {"block_size": 32},
                           "bs8": {"block_size": 8}, "be-flashinfer": {"attention_backend": "FLASHINFER"},
                           "be-triton": {"attention_backend": "TRITON_ATTN"}}.items():
            add("5", f"{folder}/{name}", constructed(folder), args)
    for folder in ("llama-bidir-avg", "llama-bidir-cls"):
        for name, args in {"default": {}, "fp8": {"kv_cache_dtype": "fp8"},
                           "prefix": {"enable_prefix_caching": True},
                           "chunked": {"enable_chunked_prefill": True},
                           "bs32": {"block_size": 32}, "tp2": {"tensor_parallel_size": 2},
                           "be-flashinfer": {"attention_backend": "FLASHINFER"},
                           "be-triton": {"attention_backend": "TRITON_ATTN"}}.items():
            add("5", f"{folder}/{name}", constructed(folder), args)
    for folder in ("modelopt-llama-nvfp4", "modelopt-llama-fp8", "modelopt-nano-nvfp4"):
        add("5", f"{folder}/default", constructed(folder), {})
        add("5", f"{folder}/prefix", constructed(folder), {"enable_prefix_caching": True})
    # item 4 at engine start
    for folder in ("qwen3.5-27b", "jamba-1.5-mini", "nemotron-3-nano-30b-a3b-bf16",
                   "deepseek-v2-lite-like", "gemma-4-26b-a4b", "gemma4-text-default",
                   "mamba-130m-hf", "zamba2-default", "falcon-h1-default", "qwen3-next-default"):
        add("4", f"{folder}/dhkv-true", fixture(folder),
            {"disable_hybrid_kv_cache_manager": True}, gemma=folder in GEMMA4)
    add("4", "mistral-swa/dhkv-true", constructed("mistral-swa"),
        {"disable_hybrid_kv_cache_manager": True})
    add("4", "gemma3-text/dhkv-true", constructed("gemma3-text"),
        {"disable_hybrid_kv_cache_manager": True})
    # item 7: the nonpositive block sizes that resolve, at engine start
    for bs in (-16, 0, -1):
        for folder in ("jamba-1.5-mini", "deepseek-v2-lite-like", "mamba-130m-hf",
                       "gemma4-text-default", "qwen3.5-27b"):
            add("7", f"{folder}/bs{bs}", fixture(folder), {"block_size": bs},
                gemma=folder in GEMMA4)
        add("7", f"llama-hd64/bs{bs}", constructed("llama-hd64"), {"block_size": bs})
        add("7", f"jamba-1.5-mini/bs{bs}+align", fixture("jamba-1.5-mini"),
            {"block_size": bs, "enable_prefix_caching": True, "mamba_cache_mode": "align"})
    return cases


def write() -> None:
    write_folders()
    for name, cases in (("cases-config.json", config_cases()), ("cases-hub.json", hub_cases()),
                        ("cases-cli.json", cli_cases()),
                        ("cases-startup.json", startup_cases())):
        (HERE / name).write_text(json.dumps(cases, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# running the drivers
# ---------------------------------------------------------------------------------------------
def _ref(ns: argparse.Namespace) -> Path:
    ref = ns.ref or os.environ.get("ENGINECFG_ORACLE_REF") or str(REPO.parent / "ref")
    return Path(ref).resolve()


def _split(cases: list[dict], tmp: Path, stem: str) -> list[tuple[Path, str]]:
    """The cases in one file per transformers overlay: [(file, overlay folder name)]."""
    out = []
    for overlay, pick in (("tf523-overlay", lambda c: "transformers" not in c),
                          ("tf5-overlay", lambda c: c.get("transformers") == "5.5.0")):
        part = [c for c in cases if pick(c)]
        if part:
            path = tmp / f"{stem}-{overlay}.json"
            path.write_text(json.dumps(part))
            out.append((path, overlay))
    return out


def _run(script: str, cases_file: str, out_name: str, ns: argparse.Namespace,
         extra: list[str], one_process_per_case: bool = False,
         names: set[str] | None = None) -> None:
    """Run *script* on the cases (those named in *names*, or whose name contains ``--only``)
    and merge the answers into *out_name* (a partial run replaces only its own cases)."""
    ref = _ref(ns)
    python = str(ref / "venv19" / "bin" / "python")
    cases = json.loads((HERE / cases_file).read_text())
    partial = bool(ns.only) or names is not None
    if ns.only:
        cases = [c for c in cases if ns.only in c["name"]]
    if names is not None:
        cases = [c for c in cases if c["name"] in names]
    if not cases:
        return
    tmp = HERE / ".work"
    tmp.mkdir(exist_ok=True)
    parts = []
    batches = [[c] for c in cases] if one_process_per_case else [cases]
    runs = [pair for i, batch in enumerate(batches)
            for pair in _split(batch, tmp, f"{Path(out_name).stem}-{i}")]
    for path, overlay in runs:
        out = tmp / f"{path.stem}-out.json"
        cmd = [python, str(HERE / script), str(path), "-o", str(out),
               "--extra-path", str(ref / overlay), "--cases-root", str(HERE)] + extra
        print("+", " ".join(cmd), file=sys.stderr)
        # a neutral working directory: vLLM's model-inspection subprocess runs `python -m`,
        # which would otherwise put this checkout's top-level folders on its path
        subprocess.run(cmd, check=True, cwd=tmp)
        parts.append(json.loads(out.read_text()))
    merged = dict(parts[0])
    merged["results"] = [r for p in parts for r in p["results"]]
    if len(parts) > 1:
        merged["transformers_versions"] = sorted({p["transformers_version"] for p in parts})
    order = {c["name"]: i for i, c in enumerate(cases)}
    merged["results"].sort(key=lambda r: order.get(r["name"], 1 << 30))
    target = HERE / out_name
    if partial and target.exists():
        old = json.loads(target.read_text())
        names = {r["name"] for r in merged["results"]}
        merged["results"] = [r for r in old["results"] if r["name"] not in names] + merged["results"]
        full = {c["name"]: i for i, c in enumerate(json.loads((HERE / cases_file).read_text()))}
        merged["results"].sort(key=lambda r: full.get(r["name"], 1 << 30))
    target.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(merged['results'])} results to {target}", file=sys.stderr)


def _short(err: dict | None) -> str | None:
    if not err:
        return None
    kind = err.get("root_type") or err.get("type")
    text = err.get("root_message") or err.get("message") or ""
    return f"{kind}: {text}"


def summarize() -> dict[str, Any]:
    """startup.json, shortened to what a test asserts: per case the backends, the block size
    through the start-up step and the KV figures; and one table of every distinct question
    the layers asked the attention selector, with vLLM's answer and reasons."""
    doc = json.loads((HERE / "startup.json").read_text())
    cases, table = [], {}
    for r in doc["results"]:
        cfg = r.get("config") or {}
        row: dict[str, Any] = {
            "name": r["name"], "item": r.get("item"), "args": r["args"], "status": r.get("status"),
            "is_hybrid": cfg.get("is_hybrid"), "use_mla": cfg.get("use_mla"),
            "cache_dtype": cfg.get("cache_dtype"),
            "config_block_size": cfg.get("block_size"),
            "user_specified_block_size": cfg.get("user_specified_block_size"),
            "block_size_after_update": r.get("block_size_after_update"),
            "engine_block_size": r.get("engine_block_size"),
            "backends": {k: v for k, v in (r.get("backends_by_layer_kind") or {}).items()},
            "first_layer_backend": (r.get("first_layer") or {}).get("backend"),
            "update_logs": [m["message"] for m in r.get("update_logs") or []],
        }
        if r.get("config_error"):
            row["config_error"] = _short(r["config_error"])
        if r.get("build_error"):
            row["build_error"] = _short(r["build_error"])
            row["build_error_raised_at"] = r["build_error"].get("raised_at")
        if r.get("start_error"):
            row["start_error"] = dict(step=r["start_error"].get("step"), error=_short(r["start_error"]))
        if r.get("real_mamba"):
            row["mamba_state_matches_config_time"] = r["real_mamba"]["matches_config_time"]
            row["mamba_unpadded_page"] = r["real_mamba"]["unpadded_page_size_bytes"]
            row["mamba_page_size_padded"] = r["real_mamba"]["page_size_padded"]
        if r.get("kv"):
            row["kv"] = [{k: b.get(k) for k in ("budget_gib", "num_blocks", "kv_tokens",
                                                "max_concurrency", "group_block_sizes")}
                         | ({"error": b["error"][:160]} if b.get("error") else {})
                         for b in r["kv"]]
        if r.get("declared_kv"):
            row["declared_kv"] = {"block_size": r["declared_kv"]["block_size"],
                                  "budgets": r["declared_kv"]["budgets"]}
        if "validate_block_size" in r:
            row["validate_block_size"] = (r["validate_block_size"] if isinstance(
                r["validate_block_size"], str) else _short(r["validate_block_size"]))
        cases.append(row)
        for q in r.get("selector") or []:
            sel = q.get("selector_config")
            if not isinstance(sel, dict):
                continue
            key = json.dumps([sel, q.get("forced_backend")], sort_keys=True)
            entry = table.setdefault(key, {
                "selector_config": sel, "forced_backend": q.get("forced_backend"),
                "chosen": q["chosen"], "priority": q.get("priority"), "valid": q.get("valid"),
                "refused": q.get("refused"), "kernel_block_sizes": q.get("kernel_block_sizes"),
                "kernel_block_sizes_multiple_of": q.get("kernel_block_sizes_multiple_of"),
                "preferred_block_size": q.get("preferred_block_size"), "seen_in": []})
            entry["seen_in"].append(r["name"])
    return {"produced_by": {k: doc[k] for k in ("vllm_version", "transformers_version",
                                                 "platform", "budgets_gib") if k in doc},
            "cases": cases, "selector_table": list(table.values())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("write", help="write configs/ and the cases files")
    sub.add_parser("summarize", help="startup.json -> startup_summary.json")
    for name in ("config", "hub", "cli", "startup"):
        p = sub.add_parser(name, help=f"ask the oracle the {name} cases")
        p.add_argument("--ref", help="folder of venv19/ and the transformers overlays")
        p.add_argument("--only", help="only the cases whose name contains this (merged into "
                                      "the committed results)")
        if name == "startup":
            p.add_argument("--budgets-gib", default="2,17,64")
    ns = ap.parse_args(argv)
    if ns.cmd == "summarize":
        (HERE / "startup_summary.json").write_text(json.dumps(summarize(), indent=1) + "\n")
        return 0
    write()
    if ns.cmd == "write":
        return 0
    if ns.cmd == "config":
        _run("ask_config.py", "cases-config.json", "config_time.json", ns, [])
    elif ns.cmd == "cli":
        _run("ask_cli.py", "cases-cli.json", "cli.json", ns, [])
    elif ns.cmd == "hub":
        # one process per case: huggingface_hub fixes its cache folder at import, and the
        # hub cache of a case must start empty
        _run("ask_config.py", "cases-hub.json", "hub.json", ns, ["--hub"],
             one_process_per_case=True)
    else:
        _run("ask_startup.py", "cases-startup.json", "startup.json", ns,
             ["--budgets-gib", ns.budgets_gib])
        (HERE / "startup_summary.json").write_text(json.dumps(summarize(), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
