"""Build the order-of-checks (and typed-read) cases and, given the oracle, record what vLLM
0.19.0 answered for each.

Each case combines two things that are wrong (a bad engine argument with a config vLLM
rejects while building the model config, a model-level hook error with a post-check, ...),
or one malformed field of a real config (the typed-read cases).  Which error vLLM reports
first is the contract enginecfg's checks follow.

    python tests/order_oracle/make_cases.py write            # configs/ and cases.json
    python tests/order_oracle/make_cases.py run --oracle DIR  # + expected.json (DIR: the oracle
                                                              #   build: venv19/, run_oracle.py)

The oracle is a development tool: tests read only ``expected.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
FIXTURE_CONFIGS = HERE.parent / "data" / "vllm-0.19.0" / "configs"
# relative to this folder, as the cases file names them (the oracle resolves them against it)
FIXTURE_REL = Path("..", "data", "vllm-0.19.0", "configs")

#: a bad value of each engine argument, as vLLM's EngineArgs receives it
BAD_ARGS: dict[str, dict[str, Any]] = {
    "ssm-bf16": {"mamba_ssm_cache_dtype": "bfloat16"},
    "mamba-bf16": {"mamba_cache_dtype": "bfloat16"},
    "kvdtype-bad": {"kv_cache_dtype": "fp4"},
    "block0": {"block_size": 0},
    "mode-bad": {"mamba_cache_mode": "sometimes"},
    "dtype-bad": {"dtype": "int8"},
    "maxlen0": {"max_model_len": 0},
    "tp0": {"tensor_parallel_size": 0},
    "pp0": {"pipeline_parallel_size": 0},
    "backend-bad": {"attention_backend": "NOT_A_BACKEND"},
    "mbs0": {"mamba_block_size": 0},
    "mnbt0": {"max_num_batched_tokens": 0},
}

#: configs (and arguments) that vLLM rejects at a known place, one error each
MODEL_ERRORS: dict[str, tuple[str, dict[str, Any]]] = {
    # the config class's validator (transformers), before ModelConfig's verify
    "falcon-bad-heads": ("falcon-h1-0.5b", {}),
    # the model-level hook (LlamaNemotronVL pooling)
    "vl-mean": ("nemotron-vl-embed-mean-bad", {}),
    "vl-nopool": ("nemotron-vl-embed-nopooling", {}),
    # ModelConfig's derived max_model_len
    "maxlen-too-big": ("deepseek-v2-lite-like", {"max_model_len": 8192}),
    # the vllm-level hybrid hook
    "minimax-fp32": ("minimax-default", {"mamba_cache_dtype": "float32"}),
    "jamba-align-nochunk": ("jamba-1.5-mini", {"enable_prefix_caching": True,
                                                "mamba_cache_mode": "align",
                                                "enable_chunked_prefill": False}),
    "olmo-tp4": ("olmo-hybrid-default", {"tensor_parallel_size": 4}),
    # the check right after the hooks
    "jamba-mbs-noprefix": ("jamba-1.5-mini", {"mamba_block_size": 256}),
}


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def edit(cfg: dict) -> None:
        *parents, last = path.split(".")
        node = cfg
        for p in parents:
            node = node[p]
        if value is _DELETE:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return edit


_DELETE = object()

#: malformed fields of real configs: (name, fixture, edits)
TYPED: list[tuple[str, str, list[Callable[[dict], None]]]] = [
    ("qalgo-object", "qwen3.6-27b-nvfp4", [_set("quantization_config.quant_algo", {"a": 1})]),
    ("qalgo-object-layers-list", "qwen3.6-27b-nvfp4",
     [_set("quantization_config.quant_algo", {"a": 1}),
      _set("quantization_config.quantized_layers", ["model.layers.0.mlp"])]),
    ("qlayers-list", "qwen3.6-27b-nvfp4",
     [_set("quantization_config.quantized_layers", ["model.layers.0.mlp"])]),
    ("qalgo-int", "qwen3.6-27b-nvfp4", [_set("quantization_config.quant_algo", 5)]),
    ("qalgo-list", "qwen3.6-27b-nvfp4", [_set("quantization_config.quant_algo", ["NVFP4"])]),
    ("qmethod-int", "qwen3.6-27b-nvfp4", [_set("quantization_config.quant_method", 5)]),
    ("qmethod-object", "qwen3.6-27b-nvfp4", [_set("quantization_config.quant_method", {"a": 1})]),
    ("qconfig-list", "qwen3.6-27b-nvfp4", [_set("quantization_config", [1, 2])]),
    ("qconfig-string", "qwen3.6-27b-nvfp4", [_set("quantization_config", "modelopt")]),
    ("qkvscheme-string", "qwen3.6-27b-nvfp4",
     [_set("quantization_config.kv_cache_scheme", "fp8")]),
    ("text-heads-string", "qwen3.6-27b-nvfp4", [_set("text_config.num_attention_heads", "24")]),
    ("text-headdim-float", "qwen3.6-27b-nvfp4", [_set("text_config.head_dim", 2.5)]),
    ("text-layertypes-string", "qwen3.6-27b-nvfp4",
     [_set("text_config.layer_types", "full_attention")]),
    ("text-rope-list", "qwen3.6-27b-nvfp4", [_set("text_config.rope_parameters", [1])]),
    ("text-maxpos-string", "qwen3.6-27b-nvfp4",
     [_set("text_config.max_position_embeddings", "big")]),
    ("text-kvheads-null", "qwen3.6-27b-nvfp4", [_set("text_config.num_key_value_heads", None)]),
    ("text-vheads-bool", "qwen3.6-27b-nvfp4",
     [_set("text_config.linear_num_value_heads", True)]),
    ("vision-int", "qwen3.6-27b-nvfp4", [_set("vision_config", 3)]),
    ("text-config-list", "qwen3.6-27b-nvfp4", [_set("text_config", [1])]),
    ("text-ssmdtype-int", "qwen3.6-27b-nvfp4", [_set("text_config.mamba_ssm_dtype", 7)]),
]


def _fixture_args(name: str) -> dict[str, Any]:
    return dict(MODEL_ERRORS[name][1])


def cases() -> tuple[list[dict[str, Any]], dict[str, dict]]:
    """The cases (oracle format) and the edited configs to write, by folder name."""
    out: list[dict[str, Any]] = []
    configs: dict[str, dict] = {}

    def fixture(name: str) -> str:
        return str(FIXTURE_REL / name)

    # every model error alone, and every bad argument alone on a config vLLM accepts
    for m, (cfg, args) in MODEL_ERRORS.items():
        out.append({"name": f"single/{m}", "config_dir": fixture(cfg), "args": args})
    for a, args in BAD_ARGS.items():
        out.append({"name": f"single/{a}", "config_dir": fixture("jamba-1.5-mini"), "args": args})
    # every bad argument with every model error (the argument set wins where both name it)
    for m, (cfg, margs) in MODEL_ERRORS.items():
        for a, aargs in BAD_ARGS.items():
            if set(aargs) & set(margs):
                continue
            out.append({"name": f"pair/{m}+{a}", "config_dir": fixture(cfg),
                        "args": {**margs, **aargs}})
    # two hook-level errors at once
    pairs = [
        ("vl-mean+mbs-noprefix", "nemotron-vl-embed-mean-bad", {"mamba_block_size": 256}),
        ("vl-mean+tp3", "nemotron-vl-embed-mean-bad", {"tensor_parallel_size": 3}),
        ("olmo-tp4+mbs-noprefix", "olmo-hybrid-default",
         {"tensor_parallel_size": 4, "mamba_block_size": 256}),
        ("minimax-fp32+mbs-noprefix", "minimax-default",
         {"mamba_cache_dtype": "float32", "mamba_block_size": 256}),
        ("jamba-align-nochunk+tp3", "jamba-1.5-mini",
         {"enable_prefix_caching": True, "mamba_cache_mode": "align",
          "enable_chunked_prefill": False, "tensor_parallel_size": 3}),
        ("falcon-bad-heads+maxlen-huge", "falcon-h1-0.5b", {"max_model_len": 10_000_000}),
        ("minimax-fp32+tp3", "minimax-default",
         {"mamba_cache_dtype": "float32", "tensor_parallel_size": 3}),
        ("minimax-ssm-fp32", "minimax-default", {"mamba_ssm_cache_dtype": "float32"}),
        ("minimax-default", "minimax-default", {}),
    ]
    for name, cfg, args in pairs:
        out.append({"name": f"pair/{name}", "config_dir": fixture(cfg), "args": args})
    # two bad arguments at once, on a config vLLM accepts
    names = list(BAD_ARGS)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            out.append({"name": f"args/{a}+{b}", "config_dir": fixture("jamba-1.5-mini"),
                        "args": {**BAD_ARGS[a], **BAD_ARGS[b]}})
    # malformed fields
    for name, cfg, edits in TYPED:
        data = json.loads((FIXTURE_CONFIGS / cfg / "config.json").read_text())
        for e in edits:
            e(data)
        folder = f"types-{name}"
        configs[folder] = data
        out.append({"name": f"types/{name}", "config_dir": str(Path("configs") / folder),
                    "args": {}})
    return out, configs


def write() -> Path:
    all_cases, configs = cases()
    root = HERE / "configs"
    if root.exists():
        shutil.rmtree(root)
    for folder, data in configs.items():
        (root / folder).mkdir(parents=True)
        (root / folder / "config.json").write_text(json.dumps(data, indent=1) + "\n")
    path = HERE / "cases.json"
    path.write_text(json.dumps(all_cases, indent=1) + "\n")
    return path


def _first_sentence(message: str) -> str:
    text = " ".join(message.split())
    for stop in (". ", ": "):
        if stop in text:
            text = text.split(stop, 1)[0]
    return text.rstrip(".")


def run(oracle: Path) -> None:
    cases_file = write()
    raw = HERE / "oracle-results.json"
    cmd = [str(oracle / "venv19" / "bin" / "python"), str(oracle / "run_oracle.py"),
           str(cases_file), "--extra-path", str(oracle / "tf523-overlay"), "-o", str(raw)]
    subprocess.run(cmd, check=True)
    results = json.loads(raw.read_text())
    results = results.get("results", results) if isinstance(results, dict) else results
    expected = {}
    for case, res in zip(cases()[0], results):
        err = res.get("error")
        entry = {"config": case["config_dir"], "engine_args": case["args"]}
        if err:
            # the exception at the root (pydantic's wrapper removed), and the fields whose
            # own type check failed (pydantic errors without an inner exception)
            message = err.get("root_message") or err["message"]
            bad_fields = [e["loc"][0] for e in err.get("validation_errors") or []
                          if not e.get("original_type") and e.get("loc")]
            wrapper = err["type"] if err["type"] == "ValidationError" else None
            if wrapper and err["message"].split("\n", 1)[0].count(" for "):
                wrapper = err["message"].split("\n", 1)[0].rsplit(" for ", 1)[1].strip()
            entry.update(status="error", type=err.get("root_type") or err["type"],
                         stage=err.get("stage"), message=message,
                         first_sentence=_first_sentence(message), invalid_fields=bad_fields,
                         validated_by=wrapper, raised_at=err.get("raised_at"))
        else:
            entry.update(status="resolved")
        expected[case["name"]] = entry
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    raw.unlink()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("write")
    r = sub.add_parser("run")
    r.add_argument("--oracle", type=Path, default=os.environ.get("ENGINECFG_ORACLE"),
                   help="the oracle's folder (default: $ENGINECFG_ORACLE)")
    ns = p.parse_args(argv)
    if ns.cmd == "write":
        print(write())
        return 0
    if ns.oracle is None:
        p.error("--oracle DIR (or ENGINECFG_ORACLE) is required")
    run(ns.oracle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
