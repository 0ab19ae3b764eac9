#!/usr/bin/env python3
"""Write the oracle case files of this folder from the 0.19.0 fixtures kept in ../vllm-0.19.0.

    python tests/data/vllm-0.34.0/make_cases.py

cases/extra.json   the fixtures' argument sets that results/public-034.json does not run
                   (all, kvscales, ssm-fp16, mbs-noprefix, align-nochunk, fp16, be-flash,
                   be-triton) on the 34 configs of the public set, with the engine arguments
                   of ../vllm-0.19.0/cases.json, so every 0.19.0 fixture case has a 0.34.0 answer.
cases/subset.json  default, fp8 and tp2 on the 34 configs: the cheaper set run on other GPUs
                   whose answers are expected to equal one already run (H100 = H200, L40S = A100).
cases/mla.json     seven argument sets on configs/deepseek-v2-lite-mla, written here too: the
                   fixtures' DeepSeek-V2-Lite-like config with the MoE routing fields the real
                   checkpoint publishes, so that vLLM 0.34.0's model class builds and its MLA
                   start-up step and KV planning can be observed (no public case builds an MLA model).
cases/offline.json eight public cases for a B200 without FlashInfer's TRT-LLM kernels (no
                   cubins, NVIDIA's artifactory unreachable): do the answers change?
cases/probes.json  single cases for rules no public case reaches: one KV group of same-type
                   layers with different shapes (G2, through --disable-hybrid-kv-cache-manager),
                   unquantized skip layers beside an FP8 KV cache (S2's last step), a user block
                   below FP8 d512's 64 on SM90, a hybrid with only --no-enable-chunked-prefill.
"""

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
V019 = os.path.normpath(os.path.join(HERE, "..", "vllm-0.19.0"))
PUBLIC_SETS = {"default", "prefix", "noprefix", "bs16", "fp8", "tp2", "tp4", "ssm-fp32",
               "align", "maxlen8k"}


MLA_ROUTING = {"n_group": 1, "topk_group": 1, "num_experts_per_tok": 6,
               "moe_intermediate_size": 1408, "first_k_dense_replace": 1, "norm_topk_prob": False}
MLA_SETS = [("default", {}), ("fp8", {"kv_cache_dtype": "fp8"}), ("bs16", {"block_size": 16}),
            ("tp2", {"tensor_parallel_size": 2}), ("tp4", {"tensor_parallel_size": 4}),
            ("prefix", {"enable_prefix_caching": True}), ("noprefix", {"enable_prefix_caching": False})]


def write_mla_config(cases_dir: str) -> list[dict]:
    folder = os.path.join(HERE, "configs", "deepseek-v2-lite-mla")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(V019, "configs", "deepseek-v2-lite-like", "config.json")) as f:
        config = json.load(f)
    config.update(MLA_ROUTING)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(folder, "SOURCE.txt"), "w") as f:
        f.write("constructed, not published: vllm-0.19.0/configs/deepseek-v2-lite-like/config.json "
                "with the MoE\nrouting fields of the published DeepSeek-V2-Lite checkpoint: "
                + json.dumps(MLA_ROUTING) + "\n(the fixture leaves n_group/topk_group None, "
                "on which vLLM 0.34.0's DeepseekV2 MoE router refuses to build).\n"
                "Written by tests/data/vllm-0.34.0/make_cases.py.\n")
    rel = os.path.relpath(folder, cases_dir)
    return [{"name": f"deepseek-v2-lite-mla/{n}", "config_dir": rel, "args": a} for n, a in MLA_SETS]


def subset_all(public: list[dict], rel: str) -> list[dict]:
    """The public cases with config_dir relative to cases/ here."""
    return [dict(c, config_dir=f"{rel}/{c['name'].split('/')[0]}") for c in public]


def main() -> None:
    with open(os.path.join(V019, "cases.json")) as f:
        fixtures = json.load(f)["cases"]
    with open(os.path.join(HERE, "public.json")) as f:
        public = json.load(f)
    configs = sorted({c["name"].split("/")[0] for c in public})
    args_of_set: dict[str, dict] = {}
    for c in fixtures:
        args_of_set.setdefault(c["name"].split("/", 1)[1], c["engine_args"])
    cases_dir = os.path.join(HERE, "cases")
    rel = os.path.relpath(os.path.join(V019, "configs"), cases_dir)
    extra = [{"name": f"{cfg}/{s}", "config_dir": f"{rel}/{cfg}", "args": args_of_set[s]}
             for cfg in configs for s in sorted(args_of_set) if s not in PUBLIC_SETS]
    subset = [c for c in public if c["name"].split("/")[1] in ("default", "fp8", "tp2")]
    for c in subset:
        c["config_dir"] = f"{rel}/{c['name'].split('/')[0]}"
    mla = write_mla_config(cases_dir)
    probes = [
        {"name": f"{cfg}/{label}", "config_dir": f"{rel}/{cfg}", "args": args}
        for cfg, label, args in (
            ("gemma4-text-default", "nohma", {"disable_hybrid_kv_cache_manager": True}),
            ("gemma-4-26b-a4b", "nohma", {"disable_hybrid_kv_cache_manager": True}),
            ("qwen3.5-27b", "fp8-skip3", {"kv_cache_dtype": "fp8",
                                          "kv_cache_dtype_skip_layers": ["3"]}),
            ("gemma4-text-default", "fp8-skipsw", {"kv_cache_dtype": "fp8",
                                                   "kv_cache_dtype_skip_layers": ["sliding_window"]}),
            ("gemma4-text-default", "fp8-bs32", {"kv_cache_dtype": "fp8", "block_size": 32}),
            ("qwen3.5-27b", "nochunk", {"enable_chunked_prefill": False}),
        )]
    offline_names = {"gemma-4-26b-a4b/default", "gemma-4-26b-a4b/fp8",
                     "gemma4-text-default/default", "jamba-default/fp8",
                     "nemotron-3-nano-30b-a3b-bf16/default", "qwen3-next-default/tp2",
                     "qwen3.5-27b/default", "zamba2-default/default"}
    offline = [c for c in subset_all(public, rel) if c["name"] in offline_names]
    for name, cases in (("extra.json", extra), ("subset.json", subset), ("mla.json", mla),
                        ("probes.json", probes), ("offline.json", offline)):
        with open(os.path.join(cases_dir, name), "w") as f:
            json.dump(cases, f, indent=1)
            f.write("\n")
        print(f"cases/{name}: {len(cases)} cases")


if __name__ == "__main__":
    main()
