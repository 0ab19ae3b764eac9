#!/usr/bin/env python3
"""Ask the real vLLM 0.19.0 what happens when the engine starts, on an H200.

Run with the oracle venv's python (``cases.py startup`` does it)::

    $REF/venv19/bin/python tests/issue29_oracle/ask_startup.py CASES.json -o OUT.json \
        --extra-path $REF/tf523-overlay [--budgets-gib 2,17,64] [--only SUBSTR]

Per case, in one process, the steps vLLM 0.19.0 takes from ``vllm serve`` to "GPU KV cache
size", with vLLM's own functions:

1. config time: ``EngineArgs(model=..., skip_tokenizer_init=True, **args)
   .create_engine_config(UsageContext.OPENAI_API_SERVER)``;
2. ``load_model``: the real model class built on the meta device by the loader's own
   ``initialize_model`` under ``set_default_torch_dtype`` (vLLM's exception when it fails);
   every attention layer asks ``get_attn_backend``, i.e. the CUDA platform's priority list
   and each backend's ``validate_configuration`` on compute capability 9.0;
3. ``Platform.update_block_size_for_backend`` (what the executor calls right after
   ``load_model``): the first attention layer's backend and its preferred block size;
4. the GPU model runner's ``get_kv_cache_spec`` loop (layers sharing a KV cache skipped);
5. the engine core's ``get_kv_cache_configs`` / ``generate_scheduler_kv_cache_config`` at each
   KV-cache budget (as ``--kv-cache-memory-bytes``), the "GPU KV cache size" tokens and
   concurrency, then ``cache_config.block_size`` = the smallest group block size and
   ``VllmConfig.validate_block_size``.

For each distinct question a layer asked the selector, the answer is explained: the
priority list, every backend's reasons for refusing, the chosen backend, its kernel block
sizes and ``get_preferred_block_size(16)``.

What stands in for the GPU (nothing in vLLM is edited):
- the platform is ``../shared/oracle34/oracle_plugin``'s emulated CUDA platform (vLLM's
  ``CudaPlatform``; device queries answered as an H200: capability 9.0, 143771 MiB, 132 SMs;
  libcuda stub with every driver symbol vLLM's extensions need, so ``_vllm_fa3_C`` and
  ``_flashmla_C`` import as on an H200). Triton: by default vLLM sees no active driver and
  uses its Triton placeholder (as the fixtures were made; the FLA ops of Qwen3.5/Qwen3-Next
  query the active driver at import and cannot run otherwise without a GPU); with
  ``--triton-active`` the driver is reported active and vLLM keeps the real ``triton``
  module, as on an H200. OLMo-Hybrid's layers call ``triton.set_allocator`` while they are
  built (it registers the allocator later kernel launches use); the placeholder lacks it, so
  a no-op stands in for it on the placeholder;
- ``current_platform.current_device()`` is the meta device, ``torch.cuda.Stream`` and vLLM's
  aux stream are stand-in objects during the build (layers only keep references);
- ``flashinfer_mla``'s and ``cutlass_mla``'s module-level workspaces (``torch.zeros`` /
  ``torch.empty(..., device="cuda")``, run when the selector first imports those backends) are
  made on the meta device;
- tensor parallelism: one process, the TP group patched to report ``world_size = tp``,
  rank 0 (each layer sizes itself per rank; every rank's specs are the same);
- KV budgets are given, so no profiling runs.
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import gc
import importlib.util
import json
import logging
import os
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHARED = REPO.parent / "shared"
ORACLE = SHARED / "oracle" / "run_oracle.py"
PLUGIN = SHARED / "oracle34" / "oracle_plugin"
GiB = 2**30
#: how the engine core's memory check starts its two answers (a budget problem, not a start one)
MEMORY_ERRORS = ("To serve at least one request", "No available memory for the cache blocks")
STAND_INS: dict[str, str] = {}


def load_run_oracle():
    spec = importlib.util.spec_from_file_location("run_oracle19", ORACLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class StandInStream:
    def __repr__(self) -> str:
        return "<stand-in for torch.cuda.Stream>"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("cases")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--extra-path", action="append", default=[])
    ap.add_argument("--cases-root", default=str(HERE))
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--budgets-gib", default="2,17,64")
    ap.add_argument("--only")
    ap.add_argument("--triton-active", action="store_true",
                    help="report Triton's NVIDIA driver active (vLLM keeps the real triton "
                         "module); default: vLLM's Triton placeholder, as without a GPU")
    ns = ap.parse_args(argv)
    os.environ["ORACLE_VLLM_TRITON_ACTIVE"] = "1" if ns.triton_active else "0"
    budgets = [float(x) for x in ns.budgets_gib.split(",")]
    cases = json.loads(Path(ns.cases).read_text())
    if ns.only:
        cases = [c for c in cases if ns.only in c["name"]]
    root = Path(ns.cases_root).resolve()
    tmp = tempfile.TemporaryDirectory(prefix="issue29-startup-")
    cache = Path(ns.cache_dir or tmp.name).resolve()

    ro = load_run_oracle()
    ro.PLUGIN_DIR = str(PLUGIN)
    ro.setup_environment(types.SimpleNamespace(
        cache_dir=str(cache), platform="cuda", gpu_name="NVIDIA H200", capability="9.0",
        gpu_mem_mib=143771, num_gpus=8, extra_path=ns.extra_path))

    import torch
    import vllm
    import vllm.logger as vlogger
    import vllm.utils.torch_utils as tu
    import vllm.v1.attention.selector as selector
    from vllm.config import set_current_vllm_config
    from vllm.config.cache import CacheConfig
    from vllm.config.vllm import get_layers_from_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed import parallel_state as ps
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.attention import Attention
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms import current_platform
    from vllm.platforms.cuda import _get_backend_priorities
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.core import kv_cache_utils as ku
    from vllm.v1.kv_cache_interface import MambaSpec

    j = ro.jsonable

    # ---- stand-ins for the GPU (see the docstring) --------------------------------------------
    type(current_platform).current_device = classmethod(lambda cls: torch.device("meta"))
    STAND_INS["current_device"] = "current_platform.current_device() -> meta"
    if getattr(tu, "_aux_stream", "absent") is None:
        tu._aux_stream = StandInStream()
        STAND_INS["aux_stream"] = "vllm.utils.torch_utils._aux_stream -> stand-in"
    from vllm.triton_utils import triton as vllm_triton
    if not hasattr(vllm_triton, "set_allocator"):
        vllm_triton.set_allocator = lambda fn: None
        STAND_INS["triton.set_allocator"] = "no-op on vLLM's Triton placeholder"
    real = {"zeros": torch.zeros, "empty": torch.empty}

    def on_meta(name):
        def make(*a, **k):
            if str(k.get("device", "")).startswith("cuda"):
                k["device"] = "meta"
            return real[name](*a, **k)
        return make

    torch.zeros, torch.empty = on_meta("zeros"), on_meta("empty")
    try:
        import vllm.v1.attention.backends.mla.cutlass_mla  # noqa: F401
        import vllm.v1.attention.backends.mla.flashinfer_mla  # noqa: F401
        STAND_INS["mla workspaces"] = ("flashinfer_mla's and cutlass_mla's module-level "
                                       "workspaces made on the meta device")
    finally:
        torch.zeros, torch.empty = real["zeros"], real["empty"]

    # ---- observation only -------------------------------------------------------------------
    records: list[logging.LogRecord] = []
    orig_handle = logging.Logger.handle

    def recording_handle(self, record):
        if record.name == "vllm" or record.name.startswith("vllm."):
            records.append(record)
        return orig_handle(self, record)

    logging.Logger.handle = recording_handle

    asked: list[tuple[Any, Any, Any, str]] = []
    orig_cached = selector._cached_get_attn_backend

    def recording_selector(backend, attn_selector_config, num_heads=None):
        cls = orig_cached(backend, attn_selector_config, num_heads)
        asked.append((backend, attn_selector_config, num_heads, cls.get_name()))
        return cls

    selector._cached_get_attn_backend = recording_selector

    def clear_caches():
        for n in ("_print_debug_once", "_print_info_once", "_print_warning_once",
                  "_print_error_once"):
            f = getattr(vlogger, n, None)
            if f is not None and hasattr(f, "cache_clear"):
                f.cache_clear()
        orig_cached.cache_clear()

    dist = {"ready": False}

    def init_dist(vc):
        with set_current_vllm_config(vc):
            if not dist["ready"]:
                port = 29500 + os.getpid() % 2000
                init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                             distributed_init_method=f"tcp://127.0.0.1:{port}",
                                             backend="gloo")
                dist["ready"] = True
            else:
                ps.destroy_model_parallel()
            initialize_model_parallel(1, 1)

    def logs(since: int) -> list[dict[str, str]]:
        return [{"level": r.levelname, "logger": r.name, "message": _message(r)}
                for r in records[since:] if r.levelno >= logging.INFO
                and not r.name.startswith("vllm.triton_utils")]

    def explain(vc, backend, sel, num_heads, chosen) -> dict[str, Any]:
        """Why the selector answered *chosen* to *sel* on capability 9.0."""
        cap = current_platform.get_device_capability()
        out: dict[str, Any] = {
            "selector_config": {k: j(v) for k, v in sel._asdict().items()},
            "num_heads": num_heads, "forced_backend": j(backend), "chosen": chosen}
        if backend is None:
            prio = _get_backend_priorities(sel.use_mla, cap, num_heads, sel.kv_cache_dtype)
            out["priority"] = [b.name for b in prio]
            valid, invalid = current_platform.get_valid_backends(cap, sel, num_heads)
            out["valid"] = [b.name for b, _ in sorted(valid, key=lambda x: x[1])]
            out["refused"] = {b.name: reasons for b, (_, reasons) in invalid.items()}
        cls = _backend_class(chosen)
        with set_current_vllm_config(vc):
            sizes = cls.get_supported_kernel_block_sizes()
            out["kernel_block_sizes"] = [getattr(s, "base", s) if not isinstance(s, int)
                                         else s for s in sizes]
            out["kernel_block_sizes_multiple_of"] = [not isinstance(s, int) for s in sizes]
            out["preferred_block_size"] = cls.get_preferred_block_size(
                CacheConfig.DEFAULT_BLOCK_SIZE)
        return out

    def _backend_class(name: str):
        from vllm.v1.attention.backends.registry import AttentionBackendEnum
        if name in AttentionBackendEnum.__members__:
            cls = AttentionBackendEnum[name].get_class()
            if cls.get_name() == name:
                return cls
        for b in AttentionBackendEnum:
            try:
                cls = b.get_class()
            except Exception:  # noqa: BLE001 - backends of other platforms
                continue
            if cls.get_name() == name:
                return cls
        raise LookupError(name)

    def layer_kind(layer, vc) -> str:
        parts = [type(layer).__name__]
        for attr in ("attn_type", "head_size", "sliding_window", "kv_cache_dtype", "mamba_type"):
            v = getattr(layer, attr, None)
            if v is not None and v is not False:
                parts.append(f"{attr}={j(v)}")
        return " ".join(parts)

    def spec_summary(s) -> dict[str, Any]:
        d: dict[str, Any] = {"type": type(s).__name__}
        for k in ("block_size", "num_kv_heads", "head_size", "dtype", "sliding_window",
                  "attention_chunk_size", "shapes", "dtypes", "page_size_padded",
                  "mamba_type", "mamba_cache_mode", "cache_dtype_str"):
            if hasattr(s, k):
                d[k] = j(getattr(s, k))
        try:
            d["page_size_bytes"] = s.page_size_bytes
        except BaseException as e:  # noqa: BLE001 - vLLM's assertion, recorded
            d["page_size_bytes"] = None
            d["page_size_error"] = f"{type(e).__name__}: {e}"
        if isinstance(s, MambaSpec):
            d["unpadded_page_size_bytes"] = dataclasses.replace(s, page_size_padded=None).page_size_bytes
        return d

    def build_kwargs(case):
        cdir = (root / case["config_dir"]).resolve()
        kwargs: dict[str, Any] = {"model": str(cdir), "skip_tokenizer_init": True}
        implied: dict[str, Any] = {"skip_tokenizer_init": True}
        for k, v in case["args"].items():
            kwargs[k] = v
        world = (kwargs.get("tensor_parallel_size") or 1) * (kwargs.get("pipeline_parallel_size") or 1)
        if world > 1 and kwargs.get("distributed_executor_backend") is None:
            kwargs["distributed_executor_backend"] = implied["distributed_executor_backend"] = "mp"
        return kwargs, implied

    def declared_kv(vc, explained, budgets) -> dict[str, Any] | None:
        """A model whose class fails to build after its first attention layer asked the
        selector: the figures vLLM's own spec classes and KV arithmetic give for the layers
        the config declares, at the block size the start-up step would have set from that
        answer. Only for one kind of layer (MLA, or full attention without sliding window)."""
        from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
        from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec
        mc, cc, pc = vc.model_config, vc.cache_config, vc.parallel_config
        if (not explained or mc.is_hybrid or mc.is_attention_free
                or mc.get_sliding_window() is not None or "preferred_block_size" not in explained[0]):
            return None
        bs = cc.block_size if cc.user_specified_block_size else explained[0]["preferred_block_size"]
        dtype = kv_cache_dtype_str_to_dtype(cc.cache_dtype, mc)
        n_layers = mc.get_num_layers(pc)
        if mc.use_mla:
            spec = MLAAttentionSpec(block_size=bs, num_kv_heads=1, head_size=mc.get_head_size(),
                                    dtype=dtype, cache_dtype_str=cc.cache_dtype)
        else:
            spec = FullAttentionSpec(block_size=bs, num_kv_heads=mc.get_num_kv_heads(pc),
                                     head_size=mc.get_head_size(), dtype=dtype)
        out: dict[str, Any] = {"block_size": bs, "layers": n_layers, "spec": spec_summary(spec),
                               "budgets": []}
        specs = {f"layer.{i}": spec for i in range(n_layers)}
        for gib in budgets:
            row: dict[str, Any] = {"budget_gib": gib}
            try:
                with set_current_vllm_config(vc):
                    try:
                        ku.get_kv_cache_configs(vc, [dict(specs)], [int(gib * GiB)])
                        row["error"] = None
                    except ValueError as e:
                        row["error"] = str(e)
                    grs = ku.get_kv_cache_groups(vc, dict(specs))
                    k = ku.get_kv_cache_config_from_groups(vc, grs, int(gib * GiB))
                row["num_blocks"] = k.num_blocks
                row["kv_tokens"] = k.num_blocks // len(k.kv_cache_groups) * bs
                row["max_concurrency"] = ku.get_max_concurrency_for_kv_cache_config(vc, k)
            except Exception as e:  # noqa: BLE001 - vLLM's own failure (e.g. block size 0)
                row["error"] = f"{type(e).__name__}: {e}"
            out["budgets"].append(row)
        return out

    results: list[dict[str, Any]] = []
    out_meta = {"vllm_version": vllm.__version__,
                "transformers_version": __import__("transformers").__version__,
                "torch_version": torch.__version__,
                "platform": {"class": type(current_platform).__name__,
                             "device_name": current_platform.get_device_name(),
                             "device_capability": list(current_platform.get_device_capability()),
                             "device_total_memory": current_platform.get_device_total_memory()},
                "usage_context": "OPENAI_API_SERVER", "budgets_gib": budgets,
                "triton": "active" if ns.triton_active else "placeholder"}
    scrub = [(str(root) + "/", ""), (sys.prefix.rstrip("/") + "/", "$VENV19/"),
             (str(cache) + "/", "$CACHE/"), (str(REPO.parent) + "/", "")]

    def dump():
        text = json.dumps(dict(out_meta, stand_ins=STAND_INS, results=results), indent=1,
                          default=str)
        for a, b in scrub:
            text = text.replace(a, b)
        Path(ns.output).write_text(text + "\n")

    for case in cases:
        t0 = time.perf_counter()
        kwargs, implied = build_kwargs(case)
        clear_caches()
        records.clear()
        asked.clear()
        res: dict[str, Any] = {"name": case["name"], "item": case.get("item"),
                               "config_dir": case["config_dir"], "args": case["args"],
                               "implied_args": implied,
                               "triton": "active" if ns.triton_active else "placeholder"}
        results.append(res)
        try:
            vc = EngineArgs(**kwargs).create_engine_config(
                usage_context=UsageContext.OPENAI_API_SERVER)
        except Exception as e:  # noqa: BLE001 - vLLM's answer, recorded
            res["config_error"] = ro.describe_error(e)
            res["status"] = "config-error"
            _progress(res, t0)
            dump()
            continue
        cc, mc = vc.cache_config, vc.model_config
        res["config"] = {
            "block_size": cc.block_size, "user_specified_block_size": cc.user_specified_block_size,
            "mamba_block_size": cc.mamba_block_size, "mamba_page_size_padded": cc.mamba_page_size_padded,
            "mamba_cache_mode": cc.mamba_cache_mode, "cache_dtype": cc.cache_dtype,
            "enable_prefix_caching": cc.enable_prefix_caching,
            "enable_chunked_prefill": vc.scheduler_config.enable_chunked_prefill,
            "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
            "disable_hybrid_kv_cache_manager": vc.scheduler_config.disable_hybrid_kv_cache_manager,
            "max_model_len": mc.max_model_len, "dtype": j(mc.dtype), "is_hybrid": mc.is_hybrid,
            "use_mla": mc.use_mla, "attention_backend": j(vc.attention_config.backend),
            "quantization": mc.quantization, "tensor_parallel_size": vc.parallel_config.tensor_parallel_size}
        # the config-time mamba state, as the hybrid hook computed its page from it
        try:
            model_cls, _ = ModelRegistry.resolve_model_cls(mc.architecture, model_config=mc)
            if hasattr(model_cls, "get_mamba_state_shape_from_config"):
                shapes = model_cls.get_mamba_state_shape_from_config(vc)
                dtypes = model_cls.get_mamba_state_dtype_from_config(vc)
                res["config_time_mamba"] = {
                    "shapes": j(shapes), "dtypes": j(dtypes),
                    "page_size_bytes": MambaSpec(shapes=shapes, dtypes=dtypes,
                                                 block_size=-1).page_size_bytes}
        except Exception as e:  # noqa: BLE001
            res["config_time_mamba"] = {"error": f"{type(e).__name__}: {e}"}

        tp = vc.parallel_config.tensor_parallel_size
        model = None
        try:
            init_dist(vc)
        except Exception as e:  # noqa: BLE001
            res["status"] = "oracle-error"
            res["oracle_error"] = f"distributed init: {type(e).__name__}: {e}"
            _progress(res, t0)
            dump()
            continue
        g = ps._TP
        saved = (g.world_size, g.rank_in_group, list(g.ranks))
        g.world_size, g.rank_in_group, g.ranks = tp, 0, list(range(tp))
        orig_stream = torch.cuda.Stream
        try:
            # ---- 2. load_model ---------------------------------------------------------------
            n0 = len(records)
            torch.cuda.Stream = lambda *a, **k: StandInStream()
            try:
                with set_current_vllm_config(vc), tu.set_default_torch_dtype(mc.dtype), \
                        torch.device("meta"):
                    model = initialize_model(vllm_config=vc)
                res["built"] = True
                res["model_class"] = f"{type(model).__module__}.{type(model).__qualname__}"
            except Exception as e:  # noqa: BLE001 - vLLM's own exception at load_model
                res["built"] = False
                res["build_error"] = ro.describe_error(e)
                res["build_traceback_tail"] = traceback.format_exc()[-1500:]
            finally:
                torch.cuda.Stream = orig_stream
            res["build_logs"] = logs(n0)
            explained, seen = [], set()
            for backend, sel, num_heads, chosen in asked:
                key = (repr(backend), repr(sel), num_heads)
                if key in seen:
                    continue
                seen.add(key)
                try:
                    with set_current_vllm_config(vc):
                        explained.append(explain(vc, backend, sel, num_heads, chosen))
                except Exception as e:  # noqa: BLE001
                    explained.append({"selector_config": repr(sel), "chosen": chosen,
                                      "explain_error": f"{type(e).__name__}: {e}"})
            res["selector"] = explained
            if not res["built"]:
                res["status"] = "build-error"
                declared = declared_kv(vc, explained, budgets)
                if declared:
                    res["declared_kv"] = declared
                continue
            layers = get_layers_from_vllm_config(vc, AttentionLayerBase)
            kinds: dict[str, collections.Counter] = {}
            for layer in layers.values():
                try:
                    bname = layer.get_attn_backend().get_name()
                except Exception as e:  # noqa: BLE001
                    bname = f"<{type(e).__name__}: {e}>"
                kinds.setdefault(layer_kind(layer, vc), collections.Counter())[bname] += 1
            res["backends_by_layer_kind"] = {k: dict(v) for k, v in kinds.items()}
            if layers:
                first_name, first = next(iter(layers.items()))
                res["first_layer"] = {"name": first_name, "kind": layer_kind(first, vc),
                                      "backend": first.get_attn_backend().get_name()}
            # ---- 3. update_block_size_for_backend --------------------------------------------
            n0 = len(records)
            res["block_size_before_update"] = cc.block_size
            try:
                current_platform.update_block_size_for_backend(vc)
                res["update_error"] = None
            except Exception as e:  # noqa: BLE001
                res["update_error"] = ro.describe_error(e)
            res["block_size_after_update"] = cc.block_size
            res["update_logs"] = logs(n0)
            # ---- 4. the runner's KV-cache spec loop ------------------------------------------
            n0 = len(records)
            specs: dict[str, Any] = {}
            try:
                with set_current_vllm_config(vc):
                    for name, layer in layers.items():
                        if isinstance(layer, Attention) and layer.kv_sharing_target_layer_name:
                            continue
                        spec = layer.get_kv_cache_spec(vc)
                        if spec:
                            specs[name] = spec
            except Exception as e:  # noqa: BLE001
                res["spec_error"] = ro.describe_error(e)
                res["status"] = "start-error"
                res["start_error"] = dict(res["spec_error"], step="get_kv_cache_spec")
                continue
            groups_of_specs = collections.Counter(
                json.dumps(spec_summary(s), sort_keys=True) for s in specs.values())
            res["layer_specs"] = [dict(json.loads(k), n_layers=n) for k, n in groups_of_specs.items()]
            real_mamba = [s for s in specs.values() if isinstance(s, MambaSpec)]
            if real_mamba:
                res["real_mamba"] = {
                    "shapes": j(real_mamba[0].shapes), "dtypes": j(real_mamba[0].dtypes),
                    "unpadded_page_size_bytes": max(
                        dataclasses.replace(s, page_size_padded=None).page_size_bytes
                        for s in real_mamba),
                    "page_size_padded": cc.mamba_page_size_padded,
                    "matches_config_time": (res.get("config_time_mamba") or {}).get("shapes")
                    == j(real_mamba[0].shapes)}
            # ---- 5. the engine core's KV planning --------------------------------------------
            rows = []
            start_error = None
            for gib in budgets:
                row: dict[str, Any] = {"budget_gib": gib}
                try:
                    with set_current_vllm_config(vc):
                        cfgs = ku.get_kv_cache_configs(vc, [dict(specs)], [int(gib * GiB)])
                    sched = ku.generate_scheduler_kv_cache_config(cfgs)
                    row["error"] = None
                    row["num_blocks"] = sched.num_blocks
                    groups = sched.kv_cache_groups
                    row["n_groups"] = len(groups)
                    if groups:
                        mbs = min(gr.kv_cache_spec.block_size for gr in groups)
                        row["group_block_sizes"] = [gr.kv_cache_spec.block_size for gr in groups]
                        row["group_kinds"] = [type(gr.kv_cache_spec).__name__ for gr in groups]
                        row["page_size_bytes"] = [gr.kv_cache_spec.page_size_bytes for gr in groups]
                        row["kv_tokens"] = sched.num_blocks // len(groups) * mbs
                        row["max_concurrency"] = ku.get_max_concurrency_for_kv_cache_config(vc, sched)
                        row["engine_block_size"] = mbs
                except ValueError as e:
                    if not str(e).startswith(MEMORY_ERRORS):
                        # not the budget: the engine would stop here whatever the memory
                        row["error"] = f"{type(e).__name__}: {e}"
                        row["error_detail"] = ro.describe_error(e)
                        start_error = start_error or dict(ro.describe_error(e),
                                                          step="get_kv_cache_configs")
                        rows.append(row)
                        continue
                    # vLLM's not-enough-memory answer; the figures the same budget gives
                    # (as kv019 records them) are kept beside it
                    row["error"] = str(e)
                    try:
                        with set_current_vllm_config(vc):
                            grs = ku.get_kv_cache_groups(vc, dict(specs))
                            k = ku.get_kv_cache_config_from_groups(vc, grs, int(gib * GiB))
                        if k.kv_cache_groups:
                            mbs = min(gr.kv_cache_spec.block_size for gr in k.kv_cache_groups)
                            row["num_blocks"] = k.num_blocks
                            row["n_groups"] = len(k.kv_cache_groups)
                            row["kv_tokens"] = k.num_blocks // len(k.kv_cache_groups) * mbs
                            row["engine_block_size"] = mbs
                    except Exception as e2:  # noqa: BLE001
                        row["figures_error"] = f"{type(e2).__name__}: {e2}"
                except BaseException as e:  # noqa: BLE001 - the engine would stop here
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    row["error"] = f"{type(e).__name__}: {e}"
                    row["error_detail"] = ro.describe_error(e)
                    start_error = start_error or dict(ro.describe_error(e), step="get_kv_cache_configs")
                rows.append(row)
            res["kv"] = rows
            res["kv_logs"] = logs(n0)
            # the engine core writes the smallest group block size back, then validates it
            ok_rows = [r for r in rows if r.get("engine_block_size") is not None]
            if ok_rows and start_error is None:
                saved_bs = cc.block_size
                cc.block_size = ok_rows[0]["engine_block_size"]
                res["engine_block_size"] = cc.block_size
                try:
                    vc.validate_block_size()
                    res["validate_block_size"] = "ok"
                except BaseException as e:  # noqa: BLE001 - vLLM's assertion, recorded
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    res["validate_block_size"] = ro.describe_error(e)
                    start_error = dict(ro.describe_error(e), step="validate_block_size")
                cc.block_size = saved_bs
            res["status"] = "start-error" if start_error else "started"
            if start_error:
                res["start_error"] = start_error
        finally:
            g.world_size, g.rank_in_group, g.ranks = saved
            del model
            gc.collect()
            _progress(res, t0)
            dump()
    dump()
    tmp.cleanup()
    return 0


def _progress(res: dict[str, Any], t0: float) -> None:
    res["seconds"] = round(time.perf_counter() - t0, 2)
    kv = (res.get("kv") or [{}])[0]
    print(f"[ask_startup] {res['name']}: {res.get('status')} "
          f"bs {res.get('block_size_before_update')}->{res.get('block_size_after_update')} "
          f"tokens@{kv.get('budget_gib')}={kv.get('kv_tokens')} ({res['seconds']} s)",
          file=sys.stderr, flush=True)


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception as e:  # noqa: BLE001
        return f"<unformattable {record.msg!r}: {e}>"


if __name__ == "__main__":
    sys.exit(main())
