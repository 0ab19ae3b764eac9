#!/usr/bin/env python3
"""Write ``expected.json``: what vLLM 0.19.0 makes of its three memory flags.

``--gpu-memory-utilization``, ``--kv-cache-memory-bytes`` and ``--num-gpu-blocks-override``,
and the auto-fit of ``--max-model-len -1``, asked of vLLM 0.19.0's own code on the fixture
configs.  A development tool, never a test dependency; two steps::

    python tests/capacity_oracle/make_expected.py --inputs            # enginecfg's side
    ORACLE_VENV/bin/python tests/capacity_oracle/make_expected.py \\
        --oracle-dir ORACLE --overlay TF523_OVERLAY                    # vLLM's side

The first step (any interpreter that imports this checkout's enginecfg) writes
``inputs.json``: the cases, the card totals, and enginecfg's weights estimate of each case
(the memory the GPU-less oracle cannot measure).  The second step runs in the vLLM 0.19.0
oracle venv (``../shared/oracle``'s README builds it; ``ORACLE`` is the folder holding its
``run_oracle.py``, whose emulated H200 platform it uses) and for every case:

1. builds the engine config with ``EngineArgs(...).create_engine_config()``, each memory flag
   given as ``vllm serve`` gives it, and records what the config holds;
2. asks ``vllm.v1.worker.utils.request_memory`` what a card of the given total requests at
   each utilization (and its refusal when the free memory is short);
3. runs ``Worker.determine_available_memory`` (vLLM's own method, on a stand-in worker whose
   profiling run does nothing) for ``--kv-cache-memory-bytes``: the bytes it returns, or that
   it goes on to profile the memory (0, read as unset);
4. declares each layer's KV-cache spec as ``tests/kv_oracle/make_expected.py`` does (the
   attention layers of a model without Mamba layers at the block size its backend starts
   with on each card, from step 1: FlashMLA's 64 for an fp8 MLA cache on an H200), sets
   ``num_gpu_blocks_override`` on the config and calls ``get_kv_cache_configs``: the groups,
   the block count (overridden or not), the KV tokens and concurrency vLLM would log, the
   max_model_len its auto-fit chooses, or the start-up error, at the KV-cache memory that
   step 2 or 3 leaves after enginecfg's weights estimate.

What a GPU-less oracle can answer: everything from the card's total and the KV-cache bytes
on: the memory vLLM requests, which flag wins, the blocks, the override, the auto-fit, the
start-up check and its message.  What it cannot: the memory the weights, the activation peak
of the profiling run, CUDA graphs and the CUDA context really take on a card (enginecfg's
weights estimate stands in for them here, and is handed in as such), nor the free memory a
real card has when the worker starts (``request_memory`` is asked with the free memory
measured on an idle H200, ``pipeline/models/gpus.py``).  Gemma 4 configs (transformers 5.5)
are left out: the flags act on them as on any other config.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import logging
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURES = REPO / "tests" / "data" / "vllm-0.19.0" / "configs"
GIB = 2**30

#: (config folder, engine args) the flags are tried on
CASES = (
    ("qwen3.5-27b", {}),
    ("qwen3.5-27b", {"kv_cache_dtype": "fp8", "enable_prefix_caching": True}),
    ("nemotron-3-nano-30b-a3b-bf16", {}),
    ("jamba-1.5-mini", {}),
    ("deepseek-v2-lite-like", {"kv_cache_dtype": "fp8"}),
    ("qwen3-next-80b-a3b-thinking", {"tensor_parallel_size": 2}),
    ("mamba-130m-hf", {}),
)
#: cards by preset name: the totals the driver reports (H200: measured; the other, as listed)
CARDS = ("H200", "A100-40GB")
UTILIZATIONS = (0.5, 0.9, 0.95)
#: --kv-cache-memory-bytes as given on the command line (0: unset, as vLLM reads it)
KV_BYTES = ("0", "8G", "20g", "-1073741824")
#: --num-gpu-blocks-override values, at utilization 0.9
OVERRIDES = (64, 4096)
#: the utilizations asked of request_memory with the H200's measured free memory
#: the KV-cache bytes of the auto-fit case that must shorten max_model_len
AUTO_FIT_KV_BYTES = 4 * GIB
REQUEST_UTILIZATIONS = (0.9, 0.99, 0.996, 0.9964, 1.0)
CONTEXTS = (1024, 8192, 32768)


# --------------------------------------------------------------------------- step 1: inputs
def write_inputs(path: Path) -> None:
    sys.path.insert(0, str(REPO))
    from enginecfg import EngineConfig
    from enginecfg.pipeline.models import gpus, kv_specs, weights
    from enginecfg.pipeline.run import Pipeline

    cases = []
    for folder, args in CASES:
        result = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(FIXTURES / folder, **args))
        cfg = result.config
        est = weights.estimate_weights(cfg, kv_specs.layer_specs(cfg))
        # the block size the engine start gives the attention layers on each card (enginecfg's
        # engine-start stage, checked against vLLM's own start-up in tests/stages/test_engine_start.py)
        starts = {card: Pipeline(gpu_validation="off", gpu=card).run(
            EngineConfig.from_pretrained(FIXTURES / folder, **args)).facts["startup"].block_size
            for card in CARDS}
        cases.append({"name": f"{folder}/" + (",".join(f"{k}={v}" for k, v in args.items()) or "default"),
                      "config": folder, "engine_args": args, "weights_per_gpu": est.bytes_per_gpu,
                      "startup_block_size": starts})
    cards = {name: {"memory_bytes": gpus.GPUS[name].memory_bytes,
                    "free_at_start_bytes": gpus.GPUS[name].free_at_start_bytes} for name in CARDS}
    path.write_text(json.dumps({"cards": cards, "cases": cases}, indent=1) + "\n")


# --------------------------------------------------------------------------- step 2: vLLM
def at_startup_block(vc, specs: dict, block: int) -> dict:
    """The attention layers of a model without Mamba layers at the block size its attention
    backend starts with on the card (an fp8 MLA cache on an H200: FlashMLA's 64); a hybrid's
    attention block is the one its page alignment decided, as declared."""
    import dataclasses

    from vllm.v1.kv_cache_interface import MambaSpec

    if vc.model_config.is_hybrid or any(isinstance(s, MambaSpec) for s in specs.values()):
        return specs
    return {name: dataclasses.replace(s, block_size=block) for name, s in specs.items()}


def _kv_oracle():
    spec = importlib.util.spec_from_file_location("kv_oracle_make_expected",
                                                  REPO / "tests" / "kv_oracle" / "make_expected.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def setup(oracle_dir: Path, overlay: Path) -> None:
    sys.path.insert(0, str(oracle_dir))
    import run_oracle  # the oracle's own environment set-up (emulated H200 platform, caches)

    ns = types.SimpleNamespace(cache_dir=str(oracle_dir / ".cache"), platform="cuda",
                               gpu_name="NVIDIA H200", capability="9.0", gpu_mem_mib=143771,
                               num_gpus=8, extra_path=[str(overlay)])
    run_oracle.setup_environment(ns)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def engine_config(case: dict, **flags: Any):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    args = dict(case["engine_args"], **flags)
    kwargs = {"model": str(FIXTURES / case["config"]), "skip_tokenizer_init": True, **args}
    if (args.get("tensor_parallel_size") or 1) > 1:
        kwargs["distributed_executor_backend"] = "mp"
    return EngineArgs(**kwargs).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


def requested(total: int, free: int, utilization: float) -> dict:
    """``request_memory`` of a card with *total* and *free* bytes."""
    from vllm.config import CacheConfig
    from vllm.v1.worker.utils import request_memory

    snapshot = types.SimpleNamespace(total_memory=total, free_memory=free, device_="cuda:0")
    try:
        return {"requested_memory": request_memory(snapshot, CacheConfig(gpu_memory_utilization=utilization)),
                "error": None}
    except ValueError as exc:
        return {"requested_memory": None, "error": _error(exc)}


def available_from_flag(vc, free: int) -> dict:
    """``Worker.determine_available_memory`` on a stand-in worker: the bytes it returns for
    ``kv_cache_memory_bytes``, or ``"profiles"`` when it goes on to profile the memory."""
    from vllm.v1.worker.gpu_worker import Worker

    class _Profiled(Exception):
        pass

    class _Runner:
        def profile_run(self):
            return None

        @property
        def model_memory_usage(self):  # only the profiling path reads it
            raise _Profiled

    stand_in = types.SimpleNamespace(cache_config=vc.cache_config, model_runner=_Runner(),
                                     init_snapshot=types.SimpleNamespace(free_memory=free))
    try:
        return {"available": Worker.determine_available_memory(stand_in), "path": "kv_cache_memory_bytes"}
    except _Profiled:
        return {"available": None, "path": "profiles"}


def figures(vc, specs: dict, available: int) -> dict:
    """``get_kv_cache_configs`` at *available* bytes (the config's override and max_model_len
    as they are): blocks, tokens, concurrency, the auto-fitted length, or the error."""
    from vllm.v1.core import kv_cache_utils as ku

    saved = vc.model_config.max_model_len
    out: dict[str, Any] = {"available_memory": available}
    try:
        cfgs = ku.get_kv_cache_configs(vc, [copy.copy(specs)], [available])
    except ValueError as exc:
        out.update(error=_error(exc), max_model_len=vc.model_config.max_model_len)
        vc.model_config.max_model_len = saved
        return out
    kcfg = cfgs[0]
    out.update(error=None, max_model_len=vc.model_config.max_model_len, num_blocks=kcfg.num_blocks)
    if kcfg.kv_cache_groups:
        min_bs = min(g.kv_cache_spec.block_size for g in kcfg.kv_cache_groups)
        out["kv_tokens"] = kcfg.num_blocks // len(kcfg.kv_cache_groups) * min_bs
        out["max_concurrency"] = ku.get_max_concurrency_for_kv_cache_config(vc, kcfg)
        conc = {}
        for n in CONTEXTS:
            if n <= vc.model_config.max_model_len:
                limit = vc.model_config.max_model_len
                vc.model_config.max_model_len = n
                conc[str(n)] = ku.get_max_concurrency_for_kv_cache_config(vc, kcfg)
                vc.model_config.max_model_len = limit
        out["max_concurrency_at"] = conc
    else:
        out.update(kv_tokens=0, max_concurrency=None, max_concurrency_at={})
    vc.model_config.max_model_len = saved
    return out


def run_case(case: dict, cards: dict, kv_oracle) -> dict:
    from vllm.engine.arg_utils import EngineArgs  # noqa: F401  (the import order the oracle uses)

    res: dict[str, Any] = {"name": case["name"], "config": case["config"], "engine_args": case["engine_args"],
                           "weights_per_gpu": case["weights_per_gpu"]}
    weights = case["weights_per_gpu"]
    vc = engine_config(case)
    declared, _ = kv_oracle.declared_specs(vc)
    res["has_kv_cache"] = bool(declared)
    by_card = {card: at_startup_block(vc, declared, case["startup_block_size"][card]) for card in CARDS}
    specs = by_card["H200"]

    rows = []
    for card in CARDS:
        total = cards[card]["memory_bytes"]
        for util in UTILIZATIONS:
            vcu = engine_config(case, gpu_memory_utilization=util)
            req = requested(total, total, util)["requested_memory"]
            row = {"gpu": card, "gpu_memory_utilization": vcu.cache_config.gpu_memory_utilization,
                   "requested_memory": req}
            row.update(figures(vcu, by_card[card], req - weights))
            rows.append(row)
    res["utilization"] = rows

    rows = []
    h200 = cards["H200"]
    for text in KV_BYTES:
        from vllm.engine.arg_utils import human_readable_int

        value = human_readable_int(text)
        vck = engine_config(case, kv_cache_memory_bytes=value)
        took = available_from_flag(vck, h200["free_at_start_bytes"])
        row = {"flag": text, "kv_cache_memory_bytes": vck.cache_config.kv_cache_memory_bytes, **took}
        if took["path"] == "kv_cache_memory_bytes":
            row.update(figures(vck, specs, took["available"]))
        rows.append(row)
    res["kv_cache_memory_bytes"] = rows

    rows = []
    for card in CARDS:
        total = cards[card]["memory_bytes"]
        for blocks in OVERRIDES:
            vco = engine_config(case, num_gpu_blocks_override=blocks)
            req = requested(total, total, 0.9)["requested_memory"]
            row = {"gpu": card, "num_gpu_blocks_override": vco.cache_config.num_gpu_blocks_override}
            row.update(figures(vco, by_card[card], req - weights))
            rows.append(row)
    res["num_gpu_blocks_override"] = rows

    rows = []
    for card, kv_bytes in [(card, None) for card in CARDS] + [("H200", AUTO_FIT_KV_BYTES)]:
        total = cards[card]["memory_bytes"]
        try:
            vca = engine_config(case, max_model_len=-1, kv_cache_memory_bytes=kv_bytes)
        except Exception as exc:  # noqa: BLE001 - vLLM refuses -1 at config time
            rows.append({"gpu": card, "kv_cache_memory_bytes": kv_bytes,
                         "config_error": _error(exc).splitlines()[0]})
            continue
        available = kv_bytes if kv_bytes else requested(total, total, 0.9)["requested_memory"] - weights
        row = {"gpu": card, "kv_cache_memory_bytes": kv_bytes,
               "original_max_model_len": vca.model_config.original_max_model_len,
               "configured_max_model_len": vca.model_config.max_model_len}
        row.update(figures(vca, by_card[card], available))
        rows.append(row)
    res["auto_fit"] = rows
    return res


def config_refusals(case: dict) -> list[dict]:
    """What ``create_engine_config`` says of flag values out of range."""
    out = []
    for flags in ({"gpu_memory_utilization": 0}, {"gpu_memory_utilization": 1.5},
                  {"kv_cache_memory_bytes": -2**30}, {"num_gpu_blocks_override": 0}):
        try:
            vc = engine_config(case, **flags)
        except Exception as exc:  # noqa: BLE001 - the oracle reports what vLLM raises
            out.append({"flags": flags, "accepted": False, "error": type(exc).__name__})
        else:
            out.append({"flags": flags, "accepted": True,
                        "kv_cache_memory_bytes": vc.cache_config.kv_cache_memory_bytes,
                        "num_gpu_blocks_override": vc.cache_config.num_gpu_blocks_override})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", action="store_true", help="step 1: write inputs.json with enginecfg")
    ap.add_argument("--oracle-dir", help="the folder holding the oracle's run_oracle.py")
    ap.add_argument("--overlay", help="the transformers 5.23 overlay folder of the oracle venv")
    ap.add_argument("-o", "--output", default=str(HERE / "expected.json"))
    ns = ap.parse_args(argv)
    if ns.inputs:
        write_inputs(HERE / "inputs.json")
        return 0
    if not ns.oracle_dir or not ns.overlay:
        ap.error("give --oracle-dir and --overlay (step 2), or --inputs (step 1)")
    setup(Path(ns.oracle_dir).resolve(), Path(ns.overlay).resolve())
    # vLLM inspects model classes in a child interpreter started in the working folder: the
    # checkout's top-level folders (kernels/, ...) must not shadow installed packages there
    os.chdir(tempfile.mkdtemp(prefix="capacity-oracle-"))
    logging.getLogger("vllm").setLevel(logging.ERROR)
    inputs = json.loads((HERE / "inputs.json").read_text())
    kv_oracle = _kv_oracle()
    requests = [{"gpu_memory_utilization": u, **requested(inputs["cards"]["H200"]["memory_bytes"],
                                                          inputs["cards"]["H200"]["free_at_start_bytes"], u)}
                for u in REQUEST_UTILIZATIONS]
    results = []
    for case in inputs["cases"]:
        results.append(run_case(case, inputs["cards"], kv_oracle))
        print(f"[capacity-oracle] {case['name']}: ok", file=sys.stderr)

    import transformers
    import vllm
    doc = {
        "produced_by": {"vllm": vllm.__version__, "transformers": transformers.__version__,
                        "platform": "CUDA, NVIDIA H200, compute capability 9.0 (device queries emulated)",
                        "script": "tests/capacity_oracle/make_expected.py"},
        "cards": inputs["cards"], "contexts": list(CONTEXTS),
        "request_memory_h200": requests,
        "config_refusals": config_refusals(inputs["cases"][0]),
        "cases": results,
    }
    head = json.dumps({k: v for k, v in doc.items() if k != "cases"})[:-1]
    lines = ",\n".join(json.dumps(c, separators=(",", ":")) for c in results)
    Path(ns.output).write_text(f'{head}, "cases": [\n{lines}\n]}}\n')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
