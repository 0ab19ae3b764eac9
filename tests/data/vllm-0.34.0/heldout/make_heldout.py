"""Write the held-out argument sets for vLLM 0.34.0 (issue 34, items 10 and 13): cases.json.

Each case is one fixture config (or one of ./configs) and engine arguments by vLLM's names,
in the oracle's case format (shared/oracle34/README.md); config_dir is relative to this folder
as the oracle reads it, and names the config folder the tests find under the same name.
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIX = "../../vllm-0.19.0/configs/"   # from tests/data/vllm-0.34.0/heldout
OWN = "configs/"

cases = []


def case(config, name, own=False, **args):
    cases.append({"name": f"{config}/{name}", "config_dir": (OWN if own else FIX) + config, "args": args})


# item 10: Kimi-Linear's derived length (its 0.34.0 config class: max_position_embeddings 4096)
K = "kimi-linear-48b-like"
case(K, "default", own=True)
case(K, "maxlen8k", own=True, max_model_len=8192)
case(K, "maxlen4k", own=True, max_model_len=4096)
case(K, "maxlen2k", own=True, max_model_len=2048)
case(K, "prefix", own=True, enable_prefix_caching=True)
case(K, "hf-mpe32k-maxlen8k", own=True, max_model_len=8192, hf_overrides={"max_position_embeddings": 32768})
case(K, "hf-mpe32k", own=True, hf_overrides={"max_position_embeddings": 32768})
case(K, "ssm-bf16", own=True, mamba_cache_dtype="bfloat16")

# item 13, class 1: bfloat16 Mamba dtypes
for cfg in ("qwen3.5-27b", "nemotron-3-nano-30b-a3b-bf16", "jamba-1.5-mini", "falcon-h1-0.5b", "mamba-130m-hf",
            "qwen3-next-default", "mamba2-default", "zamba2-default", "nemotron-h-56b-base-8k"):
    case(cfg, "mamba-bf16", mamba_cache_dtype="bfloat16")
    case(cfg, "ssm-bf16", mamba_ssm_cache_dtype="bfloat16")
case("qwen3.5-27b", "both-bf16-prefix", mamba_cache_dtype="bfloat16", mamba_ssm_cache_dtype="bfloat16",
     enable_prefix_caching=True)
case("jamba-1.5-mini", "mamba-bf16-ssm-fp32", mamba_cache_dtype="bfloat16", mamba_ssm_cache_dtype="float32")
case("qwen3.5-27b", "mamba-fp8", mamba_cache_dtype="fp8")

# item 13, class 2: refusal order
for cfg in ("qwen3.5-27b", "jamba-1.5-mini", "mamba2-default", "nemotron-h-56b-base-8k"):
    case(cfg, "mbs-noprefix", mamba_block_size=64, enable_prefix_caching=False)
    case(cfg, "mbs-noprefix-tp3", mamba_block_size=64, enable_prefix_caching=False, tensor_parallel_size=3)
    case(cfg, "mbs-noprefix-backend", mamba_block_size=64, enable_prefix_caching=False,
         attention_backend="NO_SUCH_BACKEND")
    case(cfg, "prefix-nochunk", enable_prefix_caching=True, enable_chunked_prefill=False)
    case(cfg, "prefix-nochunk-tp3", enable_prefix_caching=True, enable_chunked_prefill=False,
         tensor_parallel_size=3)
    case(cfg, "prefix-nochunk-mnbt", enable_prefix_caching=True, enable_chunked_prefill=False,
         max_num_batched_tokens=1024)
case("qwen3.5-27b", "mbs-noprefix-maxlen-big", mamba_block_size=64, enable_prefix_caching=False,
     max_model_len=10**7)
case("qwen3.5-27b", "mbs-noprefix-kvfp8", mamba_block_size=64, enable_prefix_caching=False, kv_cache_dtype="fp8")
case("qwen3.5-27b", "mbs-noprefix-seqs", mamba_block_size=64, enable_prefix_caching=False,
     max_num_seqs=4096, max_num_batched_tokens=1024)
case("qwen3.5-27b", "prefix-nochunk-bs0", enable_prefix_caching=True, enable_chunked_prefill=False, block_size=0)
case("qwen3.5-27b", "mbs-noprefix-bs0", mamba_block_size=64, enable_prefix_caching=False, block_size=0)

for cfg in ("qwen3.5-27b", "nemotron-h-56b-base-8k"):
    case(cfg, "prefix-nochunk-backend", enable_prefix_caching=True, enable_chunked_prefill=False,
         attention_backend="NO_SUCH_BACKEND")
    case(cfg, "prefix-nochunk-tp0", enable_prefix_caching=True, enable_chunked_prefill=False, tensor_parallel_size=0)
    case(cfg, "mbs-noprefix-tp0", mamba_block_size=64, enable_prefix_caching=False, tensor_parallel_size=0)
    case(cfg, "prefix-nochunk-maxlen-big", enable_prefix_caching=True, enable_chunked_prefill=False,
         max_model_len=10**7)
    case(cfg, "prefix-nochunk-hkv-off", enable_prefix_caching=True, enable_chunked_prefill=False,
         disable_hybrid_kv_cache_manager=True)
    case(cfg, "mbs-noprefix-mbs-odd", mamba_block_size=60, enable_prefix_caching=False)
    case(cfg, "mbs-noprefix-pp0", mamba_block_size=64, enable_prefix_caching=False, pipeline_parallel_size=0)
case("kimi-linear-48b-like", "pooling", own=True, runner="pooling")
case("kimi-linear-48b-like", "bs0", own=True, block_size=0)
case("kimi-linear-48b-like", "mbs-noprefix", own=True, mamba_block_size=64, enable_prefix_caching=False)

# item 13, class 3: bounds
for cfg in ("qwen3.5-27b", "jamba-1.5-mini"):
    case(cfg, "bs0", block_size=0)
    case(cfg, "bs-16", block_size=-16)
    case(cfg, "mbs0-prefix", mamba_block_size=0, enable_prefix_caching=True)
    case(cfg, "mbs-8-prefix", mamba_block_size=-8, enable_prefix_caching=True)
    case(cfg, "tp0", tensor_parallel_size=0)
    case(cfg, "pp0", pipeline_parallel_size=0)
    case(cfg, "tp-1", tensor_parallel_size=-1)
    case(cfg, "gmu1.5", gpu_memory_utilization=1.5)
    case(cfg, "gmu0", gpu_memory_utilization=0.0)
case("qwen3.5-27b", "bs0-tp0", block_size=0, tensor_parallel_size=0)
case("qwen3.5-27b", "bs0-mbs0", block_size=0, mamba_block_size=0, enable_prefix_caching=True)
case("qwen3.5-27b", "tp0-pp0", tensor_parallel_size=0, pipeline_parallel_size=0)
case("qwen3.5-27b", "bs0-gmu1.5", block_size=0, gpu_memory_utilization=1.5)
case("mamba-130m-hf", "bs0", block_size=0)
case("gemma4-text-default", "bs0", block_size=0)

# item 13: --hf-overrides
for cfg, mpe in (("jamba-1.5-mini", 4096), ("nemotron-h-56b-base-8k", 4096), ("qwen3-next-default", 4096),
                 ("falcon-h1-0.5b", 4096), ("zamba2-default", 16384)):
    case(cfg, "hf-mpe", hf_overrides={"max_position_embeddings": mpe})
    case(cfg, "hf-mpe-maxlen8k", hf_overrides={"max_position_embeddings": mpe}, max_model_len=8192)
case("nemotron-h-56b-base-8k", "maxlen16k", max_model_len=16384)
case("nemotron-h-56b-base-8k", "hf-mpe32k-maxlen16k", hf_overrides={"max_position_embeddings": 32768},
     max_model_len=16384)
case("mamba2-default", "hf-mpe", hf_overrides={"max_position_embeddings": 4096})
case("qwen3.5-27b", "hf-text-mpe", hf_overrides={"text_config": {"max_position_embeddings": 4096}})
case("qwen3.5-27b", "hf-text-mpe-maxlen8k", hf_overrides={"text_config": {"max_position_embeddings": 4096}},
     max_model_len=8192)

# item 13: auto_map (custom code) and --trust-remote-code
case("custom-code-hybrid", "default", own=True)
case("custom-code-hybrid", "trust-false", own=True, trust_remote_code=False)
case("nemotron-h-56b-base-8k", "trust-false", trust_remote_code=False)
case("nemotron-h-56b-base-8k", "trust-true", trust_remote_code=True)
case("nemotron-3-nano-30b-a3b-bf16", "trust-false", trust_remote_code=False)
case("qwen3.5-27b", "trust-true", trust_remote_code=True)

# item 13: a Mamba model under --runner pooling
for cfg in ("mamba-130m-hf", "mamba2-default", "jamba-1.5-mini", "qwen3-next-default", "falcon-h1-0.5b",
            "nemotron-h-56b-base-8k"):
    case(cfg, "pooling", runner="pooling")
    case(cfg, "pooling-mbs", runner="pooling", mamba_block_size=64)
case("mamba-130m-hf", "pooling-noprefix", runner="pooling", enable_prefix_caching=False)
case("mamba-130m-hf", "pooling-noprefix-mbs", runner="pooling", enable_prefix_caching=False, mamba_block_size=64)
case("qwen3.5-27b", "pooling", runner="pooling")

(HERE / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
print(len(cases), "cases")

# the same argument sets under vLLM 0.19.0, where its answer can differ: its choices and
# bounds, the Kimi-Linear class, hf_overrides, custom code, the pooling runner
KEYS_019 = ("pooling", "gmu", "/bs0", "bs-16", "hf-", "custom-code", "trust-", "kimi", "mamba-bf16", "ssm-bf16",
            "mbs0", "tp0", "pp0")
cases_019 = [c for c in cases if any(k in c["name"] for k in KEYS_019)]
(HERE / "cases-019.json").write_text(json.dumps(cases_019, indent=1) + "\n")
print(len(cases_019), "cases for 0.19.0")
