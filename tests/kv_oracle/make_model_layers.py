#!/usr/bin/env python3
"""Write ``model_layers.json``: the KV-cache spec every layer of vLLM 0.19.0's own model
classes declares, for each fixture config (default engine arguments, one GPU).

``make_expected.py`` declares the layer specs from a reading of the model classes; this
script builds the real vLLM model class instead — on PyTorch's ``meta`` device, so no weight
memory is touched, under vLLM's CPU platform (no GPU needed) — and asks each of its
attention and Mamba-like layers for ``get_kv_cache_spec``, in the order vLLM's model runner
collects them.  The test compares the structure of enginecfg's per-layer specs (names,
kinds, KV heads, head sizes, sliding windows, state shapes and dtypes) with it.  Block sizes
are not compared here: they come from the platform's engine start (``expected.json`` covers
them on the H200).

Run it with the oracle venv's interpreter::

    ORACLE/venv19/bin/python tests/kv_oracle/make_model_layers.py --oracle ORACLE
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_FIXTURES = HERE.parent / "data" / "vllm-0.19.0"


def setup(oracle: Path, overlay: str) -> None:
    sys.path.insert(0, str(oracle))
    import run_oracle

    ns = types.SimpleNamespace(cache_dir=str(oracle / ".cache"), platform="cpu",
                               gpu_name="NVIDIA H200", capability="9.0", gpu_mem_mib=143771,
                               num_gpus=8, extra_path=[str(oracle / overlay)])
    run_oracle.setup_environment(ns)


def layers_of(folder: Path, port: int) -> list[list]:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.config.vllm import get_layers_from_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.models import ModelRegistry

    # CPU-platform workarounds that leave the layers' KV-cache specs alone: native activation
    # code (vLLM's compiled CPU ops are not built here), and no chunked prefill / prefix
    # caching (the CPU backend refuses them with an fp8 KV cache)
    args = {"compilation_config": {"custom_ops": ["none"]}, "enable_chunked_prefill": False,
            "enable_prefix_caching": False}
    vc = EngineArgs(model=str(folder), skip_tokenizer_init=True, **args).create_engine_config()
    _init_parallel(vc, port)
    cls, _ = ModelRegistry.resolve_model_cls(vc.model_config.architecture, model_config=vc.model_config)
    _stub_compiled_activations()
    out = []
    with set_current_vllm_config(vc):
        with torch.device("meta"):
            cls(vllm_config=vc, prefix="")
        for name, layer in get_layers_from_vllm_config(vc, AttentionLayerBase).items():
            if getattr(layer, "kv_sharing_target_layer_name", None):
                continue  # reads another layer's cache; the model runner declares none
            spec = layer.get_kv_cache_spec(vc)
            if spec is None:
                continue
            row = {"layer": name, "kind": type(spec).__name__}
            for field in ("num_kv_heads", "head_size", "head_size_v", "sliding_window", "mamba_type"):
                if hasattr(spec, field):
                    row[field] = getattr(spec, field)
            if hasattr(spec, "shapes"):
                row["shapes"] = [list(s) for s in spec.shapes]
                row["dtypes"] = [str(d).replace("torch.", "") for d in spec.dtypes]
            if hasattr(spec, "dtype"):
                row["dtype"] = str(spec.dtype).replace("torch.", "")
            out.append(row)
    return {"cache_dtype": vc.cache_config.cache_dtype, "layers": out}


_PARALLEL_READY = False


def _stub_compiled_activations() -> None:
    """Some activation layers look their compiled kernel up when they are built; vLLM's
    compiled ops are not available here and nothing is run, so a placeholder stands in."""
    import torch

    def never_called(*args, **kwargs):
        raise RuntimeError("placeholder kernel: the model is only built, never run")

    for name in ("gelu_and_mul", "gelu_tanh_and_mul", "gelu_new", "gelu_fast", "gelu_quick",
                 "silu_and_mul", "mul_and_silu", "fatrelu_and_mul", "swigluoai_and_mul"):
        try:
            getattr(torch.ops._C, name)
        except (AttributeError, RuntimeError):
            object.__setattr__(torch.ops._C, name, never_called)


def _init_parallel(vc, port: int) -> None:
    global _PARALLEL_READY
    if _PARALLEL_READY:
        return
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with set_current_vllm_config(vc):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
        initialize_model_parallel(1, 1)
    _PARALLEL_READY = True


def run(folders: list[str], fixtures: Path, port: int) -> dict:
    import logging

    logging.getLogger("vllm").setLevel(logging.ERROR)
    results = {}
    for folder in folders:
        try:
            results[folder] = dict(layers_of(fixtures / folder, port), error=None)
        except Exception as e:  # noqa: BLE001
            results[folder] = {"layers": None, "error": f"{type(e).__name__}: {e}"}
        print(f"[model-layers] {folder}: {results[folder]['error'] or 'ok'}", file=sys.stderr)
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle", default=os.environ.get("ENGINECFG_ORACLE"))
    ap.add_argument("--fixtures", default=str(DEFAULT_FIXTURES))
    ap.add_argument("-o", "--output", default=str(HERE / "model_layers.json"))
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if not ns.oracle:
        ap.error("give --oracle or set ENGINECFG_ORACLE")
    oracle, fixtures = Path(ns.oracle).resolve(), Path(ns.fixtures).resolve()
    if ns.child:
        setup(oracle, "tf5-overlay")
        Path(ns.output).write_text(json.dumps(run(json.loads(Path(ns.child).read_text()), fixtures,
                                                  ns.port)))
        return 0
    data = json.loads((fixtures / "cases.json").read_text())
    resolved = {}
    for c in data["cases"]:
        if c["name"].endswith("/default") and c["expected"]["status"] == "resolved":
            resolved[c["config"]] = c.get("transformers")
    gemma = [f for f, tf in resolved.items() if tf == "5.5.0"]
    rest = [f for f, tf in resolved.items() if tf != "5.5.0"]
    results: dict = {}
    if gemma:
        with tempfile.TemporaryDirectory() as td:
            cin, cout = Path(td, "in.json"), Path(td, "out.json")
            cin.write_text(json.dumps(gemma))
            subprocess.run([sys.executable, __file__, "--oracle", str(oracle), "--fixtures",
                            str(fixtures), "--child", str(cin), "-o", str(cout),
                            "--port", str(ns.port + 1)], check=True)
            results.update(json.loads(cout.read_text()))
    setup(oracle, "tf523-overlay")
    results.update(run(rest, fixtures, ns.port))
    import vllm

    doc = {"produced_by": {"vllm": vllm.__version__, "platform": "vLLM's CPU platform, meta device",
                           "script": "tests/kv_oracle/make_model_layers.py"},
           "configs": {k: results[k] for k in resolved}}
    Path(ns.output).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
