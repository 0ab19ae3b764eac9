#!/usr/bin/env python3
"""Write ``expected.json``: vLLM 0.19.0's own KV-cache arithmetic on the fixture configs.

Run it with the interpreter of the vLLM 0.19.0 oracle venv (``../shared/oracle``'s README
says how to build it); it is a development tool, never a test dependency::

    ORACLE/venv19/bin/python tests/kv_oracle/make_expected.py --oracle ORACLE

For every resolved fixture case of the selected argument sets it

1. resolves the engine config with vLLM itself (``EngineArgs(...).create_engine_config()``
   on the oracle's emulated H200, the same set-up the fixtures were made with);
2. declares, with vLLM's own ``KVCacheSpec`` classes, the spec each layer of the model class
   declares (attention layers: ``FullAttentionSpec`` / ``SlidingWindowSpec`` /
   ``MLAAttentionSpec``; Mamba-like layers: ``MambaSpec`` with the state shapes and dtypes
   from the model class's own ``get_mamba_state_shape_from_config`` /
   ``get_mamba_state_dtype_from_config``), at the block size the engine start gives them
   (``Platform.update_block_size_for_backend``: 16 for a hybrid model whose block size the
   caller did not set, which the page-size unification then grows back);
3. calls vLLM's ``get_kv_cache_groups``, ``get_kv_cache_configs`` (which builds each
   worker's ``KVCacheConfig`` through ``get_kv_cache_config_from_groups``),
   ``get_max_concurrency_for_kv_cache_config``, ``estimate_max_model_len`` and
   ``max_memory_usage_bytes`` at several KV-cache memory budgets, and records groups, page
   sizes, block counts, KV tokens, concurrency and the largest max_model_len that fits.

Gemma 4 configs need the transformers 5.5 overlay: they run in a child interpreter.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_FIXTURES = HERE.parent / "data" / "vllm-0.19.0"

#: argument sets of cases.json whose resolved cases get KV figures
ARG_SETS = ("default", "prefix", "align", "all", "bs16", "fp8", "tp2", "tp4", "ssm-fp16",
            "maxlen8k", "fp16")
#: cases beyond cases.json: (config folder, engine args); ``disable_hybrid_kv_cache_manager``
#: is vLLM's flag, which enginecfg takes as an argument of the grouping
EXTRA = (
    ("gemma-4-26b-a4b", {"max_num_batched_tokens": 2048}),
    ("gemma-4-26b-a4b", {"disable_hybrid_kv_cache_manager": True}),
    ("gemma4-text-default", {"enable_chunked_prefill": False}),
    ("gemma4-text-default", {"disable_hybrid_kv_cache_manager": True, "kv_cache_dtype": "fp8"}),
    ("qwen3.5-27b", {"disable_hybrid_kv_cache_manager": True}),
    ("qwen3.5-27b", {"enable_prefix_caching": True, "mamba_cache_mode": "align",
                     "max_model_len": 32768}),
    ("jamba-1.5-mini", {"enable_chunked_prefill": False, "max_model_len": 65536}),
    ("nemotron-3-nano-30b-a3b-bf16", {"tensor_parallel_size": 8, "kv_cache_dtype": "fp8"}),
    ("deepseek-v2-lite-like", {"kv_cache_dtype": "fp8", "tensor_parallel_size": 2}),
)
#: KV-cache memory budgets in bytes (per worker)
BUDGETS = (256 * 2**20, 4 * 2**30, 24 * 2**30, 96 * 2**30)
#: context lengths at which the concurrency is also recorded
CONTEXTS = (1024, 8192, 32768)


# --------------------------------------------------------------------------- layer specs
def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def declared_specs(vc) -> tuple[dict[str, Any], dict]:
    """The KV-cache spec of every layer, as the model class declares it.

    Returns the ``{layer name: KVCacheSpec}`` map (in module construction order) and a
    JSON description of it.  Layer patterns follow each 0.19.0 model class's constructor.
    """
    import torch  # noqa: F401
    from vllm.model_executor.models import ModelRegistry
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, MambaSpec, MLAAttentionSpec,
                                            SlidingWindowSpec)

    mc, cc, pc = vc.model_config, vc.cache_config, vc.parallel_config
    tp = pc.tensor_parallel_size
    hf, t = mc.hf_config, mc.hf_text_config
    arch = mc.architecture
    kv_dtype = kv_cache_dtype_str_to_dtype(cc.cache_dtype, mc)
    # engine start: Platform.update_block_size_for_backend (H200 backends keep 16 otherwise)
    if mc.is_hybrid and not cc.user_specified_block_size:
        attn_block = 16
    else:
        attn_block = cc.block_size
    model_sliding = getattr(cc, "sliding_window", None)

    specs: dict[str, Any] = {}
    # layer names as vLLM's model classes register them (multimodal ones under language_model)
    lm = "language_model." if arch.endswith("ForConditionalGeneration") else ""

    def attn(name, total_kv, head, sliding=None, per_tp=True):
        kv = max(1, total_kv // tp) if per_tp else total_kv
        window = sliding if sliding is not None else model_sliding
        if window is not None:
            specs[name] = SlidingWindowSpec(block_size=attn_block, num_kv_heads=kv,
                                            head_size=head, dtype=kv_dtype,
                                            sliding_window=window)
        else:
            specs[name] = FullAttentionSpec(block_size=attn_block, num_kv_heads=kv,
                                            head_size=head, dtype=kv_dtype)

    mamba_spec = None
    if hasattr(ModelRegistry.resolve_model_cls(arch, model_config=mc)[0],
               "get_mamba_state_shape_from_config"):
        model_cls = ModelRegistry.resolve_model_cls(arch, model_config=mc)[0]
        mamba_type = {
            "JambaForCausalLM": "mamba1", "MambaForCausalLM": "mamba1",
            "Qwen3NextForCausalLM": "gdn_attention",
            "Qwen3_5ForConditionalGeneration": "gdn_attention",
            "Qwen3_5MoeForConditionalGeneration": "gdn_attention",
            "OlmoHybridForCausalLM": "gdn_attention",
        }.get(arch, "mamba2")
        mamba_spec = MambaSpec(
            shapes=model_cls.get_mamba_state_shape_from_config(vc),
            dtypes=model_cls.get_mamba_state_dtype_from_config(vc),
            block_size=cc.mamba_block_size,
            page_size_padded=cc.mamba_page_size_padded,
            mamba_type=mamba_type,
            mamba_cache_mode=cc.mamba_cache_mode,
            num_speculative_blocks=0,
        )

    def mamba(name):
        specs[name] = mamba_spec

    def head_or(cfg, heads_field="num_attention_heads"):
        hd = getattr(cfg, "head_dim", None)
        return hd if hd is not None else cfg.hidden_size // getattr(cfg, heads_field)

    if arch in ("MambaForCausalLM", "Mamba2ForCausalLM"):
        for i in range(t.num_hidden_layers):
            mamba(f"backbone.layers.{i}.mixer")
    elif arch in ("JambaForCausalLM", "BambaForCausalLM"):
        # the class maps "attention"/"mamba"; transformers 5.x spells Bamba's pattern
        # "full_attention"/"linear_attention" (the class's meaning is kept)
        head = t.hidden_size // t.num_attention_heads
        for i, kind in enumerate(t.layers_block_type):
            if kind in ("attention", "full_attention"):
                attn(f"model.layers.{i}.attn", t.num_key_value_heads, head)
            elif kind in ("mamba", "linear_attention"):
                mamba(f"model.layers.{i}.mixer")
            else:
                raise ValueError(f"unknown layer kind {kind!r}")
    elif arch == "NemotronHForCausalLM":
        head = head_or(t)
        for i, ch in enumerate(t.hybrid_override_pattern):
            if ch == "M":
                mamba(f"model.layers.{i}.mixer")
            elif ch == "*":
                attn(f"model.layers.{i}.mixer.attn", t.num_key_value_heads, head,
                     sliding=getattr(t, "sliding_window", None))
    elif arch in ("Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                  "Qwen3_5MoeForConditionalGeneration", "OlmoHybridForCausalLM"):
        if arch == "OlmoHybridForCausalLM":
            head = t.hidden_size // t.num_attention_heads
            total_kv = t.num_key_value_heads or t.num_attention_heads
        else:
            head = head_or(t)
            total_kv = t.num_key_value_heads
        for i, kind in enumerate(t.layer_types):
            if kind == "linear_attention":
                mamba(f"{lm}model.layers.{i}.linear_attn")
            else:
                attn(f"{lm}model.layers.{i}.self_attn.attn", total_kv, head)
    elif arch == "FalconH1ForCausalLM":
        head = head_or(t)
        for i in range(t.num_hidden_layers):
            attn(f"model.layers.{i}.attn", t.num_key_value_heads, head)
            mamba(f"model.{t.num_hidden_layers + i}.mixer")
    elif arch == "Zamba2ForCausalLM":
        # the shared transformer blocks (built first) own one Attention per hybrid layer
        hybrid = [i for i, k in enumerate(t.layers_block_type) if k == "hybrid"]
        for j, _ in enumerate(hybrid):
            attn(f"model.attn.{j}", t.num_attention_heads, t.attention_head_dim)
        for i in range(len(t.layers_block_type)):
            mamba(f"{len(hybrid) + i}.mixer")
    elif arch in ("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"):
        shared = getattr(t, "num_kv_shared_layers", 0) or 0
        first_shared = t.num_hidden_layers - shared
        for i, kind in enumerate(t.layer_types):
            if shared > 0 and i >= first_shared:
                continue  # reads the KV cache of an earlier layer of its type
            full = kind == "full_attention"
            head = getattr(t, "global_head_dim", t.head_dim) if full else t.head_dim
            k_eq_v = full and getattr(t, "attention_k_eq_v", False)
            kv = (getattr(t, "num_global_key_value_heads", t.num_key_value_heads)
                  if k_eq_v else t.num_key_value_heads)
            attn(f"{lm}model.layers.{i}.self_attn.attn", kv, head,
                 sliding=None if full else t.sliding_window)
    elif mc.use_mla:
        for i in range(t.num_hidden_layers):
            specs[f"model.layers.{i}.self_attn.attn"] = MLAAttentionSpec(
                block_size=attn_block, num_kv_heads=1, head_size=mc.get_head_size(),
                dtype=kv_dtype, cache_dtype_str=cc.cache_dtype)
    elif arch == "LlamaNemotronVLModel":
        if getattr(hf, "is_causal", True):
            for i in range(t.num_hidden_layers):
                attn(f"language_model.model.layers.{i}.self_attn.attn",
                     t.num_key_value_heads, head_or(t))
        # is_causal False: encoder-only attention, no KV cache
    else:
        raise NotImplementedError(f"no layer pattern for {arch}")

    described = {"layers": [[name, type(s).__name__, s.block_size, s.page_size_bytes]
                            for name, s in specs.items()]}
    if mamba_spec is not None:
        described["mamba"] = {
            "shapes": [list(x) for x in mamba_spec.shapes],
            "dtypes": [_dtype_name(x) for x in mamba_spec.dtypes],
            "block_size": mamba_spec.block_size, "page_size_padded": mamba_spec.page_size_padded,
            "real_page_size_bytes": MambaSpec(shapes=mamba_spec.shapes, dtypes=mamba_spec.dtypes,
                                              block_size=-1).page_size_bytes,
            "mamba_type": mamba_spec.mamba_type}
    return specs, described


# --------------------------------------------------------------------------- arithmetic
def describe_group(g, order: dict[str, int]) -> dict:
    s = g.kv_cache_spec
    d = {"kind": type(s).__name__, "num_layers": len(g.layer_names),
         "layers": [order[n] for n in g.layer_names], "block_size": s.block_size,
         "page_size_bytes": s.page_size_bytes}
    if hasattr(s, "num_kv_heads"):
        d.update(num_kv_heads=s.num_kv_heads, head_size=s.head_size,
                 dtype=_dtype_name(s.dtype), sliding_window=getattr(s, "sliding_window", None))
    if hasattr(s, "shapes"):
        d.update(page_size_padded=s.page_size_padded)
    return d


def figures(vc, specs: dict) -> dict:
    import copy

    from vllm.v1.core import kv_cache_utils as ku

    out: dict[str, Any] = {"max_model_len": vc.model_config.max_model_len}
    groups = ku.get_kv_cache_groups(vc, copy.copy(specs))
    order = {name: i for i, name in enumerate(specs)}
    out["groups"] = [describe_group(g, order) for g in groups]
    out["max_memory_usage_bytes"] = ku.max_memory_usage_bytes(vc, specs.values())
    out["group_memory_usage_bytes"] = ku._max_memory_usage_bytes_from_groups(vc, groups)
    per_budget = []
    for budget in BUDGETS:
        row: dict[str, Any] = {"available_memory": budget}
        row["estimate_max_model_len"] = ku.estimate_max_model_len(vc, dict(specs), budget)
        row["group_estimate_max_model_len"] = ku._estimate_max_model_len_from_groups(
            vc, groups, budget)
        try:
            ku.check_enough_kv_cache_memory(vc, dict(specs), budget)
            row["check_enough"] = None
        except ValueError as e:
            row["check_enough"] = str(e)
        try:
            cfgs = ku.get_kv_cache_configs(vc, [copy.copy(specs)], [budget])
        except ValueError as e:
            row["error"] = str(e)
            # the worker config itself, as get_kv_cache_config_from_groups builds it
            kcfg = ku.get_kv_cache_config_from_groups(vc, groups, budget)
        else:
            row["error"] = None
            kcfg = cfgs[0]
        row["num_blocks"] = kcfg.num_blocks
        row["num_tensors"] = len(kcfg.kv_cache_tensors)
        row["tensor_bytes"] = sum(t.size for t in kcfg.kv_cache_tensors)
        if kcfg.kv_cache_groups:
            min_bs = min(g.kv_cache_spec.block_size for g in kcfg.kv_cache_groups)
            row["kv_tokens"] = kcfg.num_blocks // len(kcfg.kv_cache_groups) * min_bs
            row["max_concurrency"] = ku.get_max_concurrency_for_kv_cache_config(vc, kcfg)
            conc = {}
            saved = vc.model_config.max_model_len
            try:
                for n in CONTEXTS:
                    vc.model_config.max_model_len = n
                    conc[str(n)] = ku.get_max_concurrency_for_kv_cache_config(vc, kcfg)
            finally:
                vc.model_config.max_model_len = saved
            row["max_concurrency_at"] = conc
        else:
            row["kv_tokens"] = 0
            row["max_concurrency"] = None
            row["max_concurrency_at"] = None
        per_budget.append(row)
    out["budgets"] = per_budget
    return out


# --------------------------------------------------------------------------- driver
def setup(oracle: Path, overlay: str) -> None:
    sys.path.insert(0, str(oracle))
    import run_oracle  # the oracle's own environment set-up (platform plugin, caches)

    ns = types.SimpleNamespace(
        cache_dir=str(oracle / ".cache"), platform="cuda", gpu_name="NVIDIA H200",
        capability="9.0", gpu_mem_mib=143771, num_gpus=8,
        extra_path=[str(oracle / overlay)])
    run_oracle.setup_environment(ns)


def run_cases(cases: list[dict], fixtures: Path) -> list[dict]:
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    logging.getLogger("vllm").setLevel(logging.ERROR)
    results = []
    for case in cases:
        args = dict(case["engine_args"])
        kwargs = {"model": str(fixtures / case["config"]), "skip_tokenizer_init": True, **args}
        if (args.get("tensor_parallel_size") or 1) > 1:
            kwargs["distributed_executor_backend"] = "mp"
        res: dict[str, Any] = {"name": case["name"], "config": case["config"],
                               "engine_args": args}
        try:
            vc = EngineArgs(**kwargs).create_engine_config(
                usage_context=UsageContext.OPENAI_API_SERVER)
            specs, described = declared_specs(vc)
            res["resolved"] = {
                "block_size": vc.cache_config.block_size,
                "user_specified_block_size": vc.cache_config.user_specified_block_size,
                "mamba_block_size": vc.cache_config.mamba_block_size,
                "mamba_page_size_padded": vc.cache_config.mamba_page_size_padded,
                "cache_dtype": vc.cache_config.cache_dtype,
                "disable_hybrid_kv_cache_manager":
                    vc.scheduler_config.disable_hybrid_kv_cache_manager,
                "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
            }
            res.update(described)
            res.update(figures(vc, specs))
            res["error"] = None
        except Exception as e:  # noqa: BLE001
            res["error"] = f"{type(e).__name__}: {e}"
        print(f"[kv-oracle] {case['name']}: {res.get('error') or 'ok'}", file=sys.stderr)
        results.append(res)
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle", default=os.environ.get("ENGINECFG_ORACLE"),
                    help="the oracle folder (run_oracle.py, venv19, overlays); "
                         "default $ENGINECFG_ORACLE")
    ap.add_argument("--fixtures", default=str(DEFAULT_FIXTURES))
    ap.add_argument("-o", "--output", default=str(HERE / "expected.json"))
    ap.add_argument("--only", help="substring filter on case names")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if not ns.oracle:
        ap.error("give --oracle or set ENGINECFG_ORACLE")
    oracle, fixtures = Path(ns.oracle).resolve(), Path(ns.fixtures).resolve()

    if ns.child:  # a Gemma 4 batch in the transformers-5.5 interpreter
        cases = json.loads(Path(ns.child).read_text())
        setup(oracle, "tf5-overlay")
        Path(ns.output).write_text(json.dumps(run_cases(cases, fixtures)))
        return 0

    data = json.loads((fixtures / "cases.json").read_text())
    cases = [c for c in data["cases"]
             if c["name"].split("/")[1] in ARG_SETS and c["expected"]["status"] == "resolved"
             and (not ns.only or ns.only in c["name"])]
    by_config = {c["config"]: c for c in data["cases"]}
    for folder, args in EXTRA:
        base = by_config[f"configs/{folder}"]
        name = f"{folder}/extra:" + ",".join(f"{k}={v}" for k, v in args.items())
        if not ns.only or ns.only in name:
            cases.append({"name": name, "config": base["config"], "engine_args": args,
                          "transformers": base.get("transformers")})
    gemma = [c for c in cases if c.get("transformers") == "5.5.0"]
    rest = [c for c in cases if c.get("transformers") != "5.5.0"]

    child_results: list[dict] = []
    if gemma:
        with tempfile.TemporaryDirectory() as td:
            cin, cout = Path(td, "cases.json"), Path(td, "out.json")
            cin.write_text(json.dumps(gemma))
            subprocess.run([sys.executable, __file__, "--oracle", str(oracle), "--fixtures",
                            str(fixtures), "--child", str(cin), "-o", str(cout)], check=True)
            child_results = json.loads(cout.read_text())
    setup(oracle, "tf523-overlay")
    results = run_cases(rest, fixtures) + child_results
    order = {c["name"]: i for i, c in enumerate(cases)}
    results.sort(key=lambda r: order[r["name"]])

    import transformers
    import vllm
    doc = {
        "produced_by": {
            "vllm": vllm.__version__, "transformers": transformers.__version__,
            "transformers_gemma4": "5.5.0",
            "platform": "CUDA, NVIDIA H200, compute capability 9.0 (device queries emulated)",
            "script": "tests/kv_oracle/make_expected.py",
        },
        "budgets": list(BUDGETS),
        "contexts": list(CONTEXTS),
        "cases": results,
    }
    # one case per line: reviewable diffs without a multi-megabyte indent
    head = json.dumps({k: v for k, v in doc.items() if k != "cases"})[:-1]
    lines = ",\n".join(json.dumps(c, separators=(",", ":")) for c in results)
    Path(ns.output).write_text(f'{head}, "cases": [\n{lines}\n]}}\n')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
