#!/usr/bin/env python3
"""The vLLM 0.34.0 oracle (shared/oracle34/run_oracle34.py), made to run the unmodified vLLM of
an intermediate release (0.20.0 ... 0.33.0) in that release's own venv:

    <venv of vLLM X>/bin/python tests/data/releases/make_release_results.py CASES.json -o OUT.json

The platform plugin, the libcuda stub and the 0.19 oracle's snapshot helpers are taken, read-only,
from shared/oracle34 and shared/oracle (ORACLE34_DIR, default ../shared/oracle34 beside the
checkout); the device stand-ins beyond the oracle's are in oracle_standins/. Per case, as
run_oracle34.py: (a) EngineArgs(...).create_engine_config() with the usage context
OPENAI_API_SERVER; (b) the real model class built on the meta device, then
current_platform.update_block_size_for_backend(vllm_config) as the executor calls it after
load_model(); (c) the release's own KV planning functions at explicit budgets.

What differs from run_oracle34.py, per release (every branch looks the API up, none is keyed
by a version number):

- (a) unchanged. The result keeps `final` (not `after_verify`, not the compilation config: no
  test compares them) and is written as compact JSON.
- page sizes: `get_kv_quant_mode` / `kv_quant_mode` only where the release has them (0.20.0+);
  `MambaSpec(state_alignment=...)` only where `mamba_state_alignment` exists (0.34.0);
  `MLAAttentionSpec(cache_dtype_str=...)` only where the field exists (0.30.0+).
- (b) the non-SSM backends: `Platform._find_non_ssm_backends` (0.31.0+, all of them) or
  `Platform._find_non_ssm_backend` (0.20.0-0.30.0, the first); 0.19.x has neither.
  `CacheConfig.DEFAULT_BLOCK_SIZE` is read from the release (16 before 0.34.0).
- (c) the worker's spec loop is `v1/worker/gpu/attn_utils.get_kv_cache_spec` in every release;
  grouping and planning are `v1/core/kv_cache_planning` (0.33.0+: `get_global_kv_cache_groups`,
  `get_kv_cache_configs(vc, specs, budgets, groups)`) or `v1/core/kv_cache_utils`
  (`get_kv_cache_groups`, `get_kv_cache_configs(vc, specs, budgets)`). The KV cache layout is
  resolved only where `resolve_kv_cache_layout` exists. `kv_tokens` is the number the release
  itself logs as "GPU KV cache size: N tokens" (its log record is captured while the release
  plans or, 0.28.0+, in `update_kv_cache_capacity`); `max_concurrency` is
  `get_max_concurrency_for_kv_cache_config` on the scheduler's config, as the release logs it;
  `kv_tokens_019_formula` and `kv_tokens_034_formula` are both recomputed beside it.
  `estimate_max_model_len` is the release's own estimator where it has one that takes the
  groups, else omitted. `bytes_per_block` only where the release has a function for it.
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
import time
import traceback
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
ORACLE_DIR = os.path.normpath(os.environ.get(
    "ORACLE34_DIR", os.path.join(REPO, "..", "shared", "oracle34")))
PLUGIN_DIR = os.path.join(ORACLE_DIR, "oracle_plugin")
ORACLE19 = os.path.join(ORACLE_DIR, "..", "oracle", "run_oracle.py")
GiB = 2**30
DEFAULT_BUDGETS_GIB = [2, 17, 64, 500]
CONFIG_LOGGERS = ("vllm.model_executor.models.config", "vllm.config")


def _load_oracle19():
    """The 0.19 oracle's helpers (snapshot, jsonable, describe_error, ...),
    imported read-only from ../oracle/run_oracle.py."""
    spec = importlib.util.spec_from_file_location("run_oracle19", ORACLE19)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


o19 = _load_oracle19()
jsonable, snapshot, describe_error = o19.jsonable, o19.snapshot, o19.describe_error
ListHandler, fmt_records, _try = o19.ListHandler, o19.fmt_records, o19._try


def setup_environment(ns) -> None:
    cache = os.path.abspath(ns.cache_dir)
    os.makedirs(cache, exist_ok=True)
    for k, v in {
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": os.path.join(cache, "hf"),
        "VLLM_CACHE_ROOT": os.path.join(cache, "vllm"),
        "VLLM_CONFIG_ROOT": os.path.join(cache, "vllm-config"),
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    }.items():
        os.environ.setdefault(k, v)
    os.environ["ORACLE_VLLM_PLATFORM"] = "cuda"
    os.environ.setdefault("ORACLE_VLLM_STUB_DIR", os.path.join(cache, "libcuda-stub"))
    os.environ["ORACLE_VLLM_GPU_NAME"] = ns.gpu_name
    os.environ["ORACLE_VLLM_CAPABILITY"] = ns.capability
    os.environ["ORACLE_VLLM_GPU_MEM_BYTES"] = str(int(ns.gpu_mem_mib) * 2**20)
    os.environ["ORACLE_VLLM_NUM_GPUS"] = str(ns.num_gpus)
    o19._prepend_pythonpath(PLUGIN_DIR)
    for extra in reversed(ns.extra_path or []):
        # a package overlay (an older transformers) in front of the venv's, for every process
        o19._prepend_pythonpath(os.path.abspath(extra))
    # one more device answer, for this process and vLLM's subprocesses (its docstring)
    o19._prepend_pythonpath(os.path.join(HERE, "oracle_standins"))
    importlib.import_module("sitecustomize")  # this process started before the path was set


def _is_cfg_logger(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in CONFIG_LOGGERS)


def clear_once_caches():
    """vLLM's *_once log helpers are lru_caches; clear them so each case
    logs what a fresh process would."""
    import vllm.logger as vl
    for n in ("_print_debug_once", "_print_info_once", "_print_warning_once",
              "_print_error_once"):
        f = getattr(vl, n, None)
        if f is not None and hasattr(f, "cache_clear"):
            f.cache_clear()


# --------------------------------------------------------------------------
# page sizes as vLLM 0.34 computes them in Platform._align_hybrid_block_size
# (on the config state after create_engine_config; before the model is built)
# --------------------------------------------------------------------------
def _kwargs_for(cls, **kw):
    """Only the keyword arguments the release's dataclass has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in kw.items() if k in names}


def page_sizes34(vc) -> dict:
    """attn1 and the model class's Mamba page, before any alignment, with the release's own
    spec classes (as its Platform._align_hybrid_block_size builds them)."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    import vllm.v1.kv_cache_interface as kci
    FullAttentionSpec, MambaSpec, MLAAttentionSpec = (kci.FullAttentionSpec, kci.MambaSpec,
                                                      kci.MLAAttentionSpec)
    mc, cc, pc = vc.model_config, vc.cache_config, vc.parallel_config
    out: dict[str, Any] = {"is_hybrid": bool(mc.is_hybrid)}
    try:
        dt = mc.dtype if cc.cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[cc.cache_dtype]
        qm = kci.get_kv_quant_mode(cc.cache_dtype) if hasattr(kci, "get_kv_quant_mode") else None
        common = dict(block_size=1, num_kv_heads=mc.get_num_kv_heads(pc),
                      head_size=mc.get_head_size(), dtype=dt, kv_quant_mode=qm,
                      cache_dtype_str=cc.cache_dtype)
        if mc.use_mla:
            s = MLAAttentionSpec(**_kwargs_for(MLAAttentionSpec, **common))
        else:
            common.pop("cache_dtype_str")
            s = FullAttentionSpec(**_kwargs_for(FullAttentionSpec, **common))
        out["attn_spec"] = type(s).__name__
        out["attn_page_size_1_token_generic"] = s.page_size_bytes
    except Exception as e:  # noqa: BLE001
        out["attn_error"] = f"{type(e).__name__}: {e}"
    try:
        model_cls, _ = ModelRegistry.resolve_model_cls(mc.architecture, model_config=mc)
        out["model_cls"] = f"{model_cls.__module__}.{model_cls.__qualname__}"
        if hasattr(model_cls, "get_mamba_specs_from_config"):
            out["mamba_page_size"] = max(
                sp.page_size_bytes for sp in model_cls.get_mamba_specs_from_config(vc))
        elif hasattr(model_cls, "get_mamba_state_shape_from_config"):
            shapes = model_cls.get_mamba_state_shape_from_config(vc)
            dtypes = model_cls.get_mamba_state_dtype_from_config(vc)
            out["mamba_state_shapes"] = jsonable(shapes)
            out["mamba_state_dtypes"] = jsonable(dtypes)
            kw: dict[str, Any] = dict(shapes=shapes, dtypes=dtypes, block_size=-1)
            try:
                from vllm.model_executor.layers.mamba.mamba_utils import mamba_state_alignment
                kw["state_alignment"] = mamba_state_alignment(vc)
            except ImportError:
                pass
            out["mamba_page_size"] = MambaSpec(**kw).page_size_bytes
    except Exception as e:  # noqa: BLE001
        out["mamba_error"] = f"{type(e).__name__}: {e}"
    return out


# --------------------------------------------------------------------------
# (b) real model on the meta device + update_block_size_for_backend
# --------------------------------------------------------------------------
_DIST_READY = False
STUBS_USED: dict[str, str] = {}


class StandInCudaStream:
    """Stands in for the torch.cuda.Stream that vllm.utils.torch_utils.aux_stream()
    creates (one per process) on a GPU; layers only keep a reference to it at
    construction time (it is used in forward, which never runs here)."""

    def __repr__(self):
        return "<oracle34 stand-in for torch.cuda.Stream>"


def _stand_in_stream(*args, **kwargs):
    STUBS_USED["torch.cuda.Stream"] = "torch.cuda.Stream() during the build -> stand-in"
    return StandInCudaStream()


def install_build_stubs():
    import torch
    import vllm.utils.torch_utils as tu
    from vllm.platforms import current_platform
    if "current_device" not in STUBS_USED:
        # layers that allocate buffers on "the current CUDA device" get meta
        type(current_platform).current_device = classmethod(
            lambda cls: torch.device("meta"))
        STUBS_USED["current_device"] = "current_platform.current_device() -> meta"
    if getattr(tu, "_aux_stream", None) is None:
        tu._aux_stream = StandInCudaStream()
        STUBS_USED["aux_stream"] = "vllm.utils.torch_utils._aux_stream = stand-in stream"
    import_with_workspaces_on_meta()


#: MLA backend modules that allocate a workspace on the "cuda" device when imported (the
#: backend selector imports each candidate while an MLA layer is built); as
#: tests/data/vllm-0.34.0/make_results_device.py does for CUTLASS MLA, they are imported once
#: with that allocation on the meta device. Nothing reads a workspace before a forward.
WORKSPACE_MODULES = ("vllm.v1.attention.backends.mla.flashinfer_mla",
                     "vllm.v1.attention.backends.mla.cutlass_mla")


def import_with_workspaces_on_meta():
    import importlib
    import importlib.util

    import torch
    for name in WORKSPACE_MODULES:
        if name in sys.modules or importlib.util.find_spec(name) is None:
            continue
        originals = {f: getattr(torch, f) for f in ("zeros", "empty")}

        def on_meta(fn):
            def alloc(*args, **kwargs):
                device = kwargs.get("device")
                if device is not None and torch.device(device).type == "cuda":
                    kwargs["device"] = "meta"
                return fn(*args, **kwargs)
            return alloc
        for f, fn in originals.items():
            setattr(torch, f, on_meta(fn))
        try:
            importlib.import_module(name)
            STUBS_USED[name] = "imported with its CUDA workspace on meta"
        except Exception as e:  # noqa: BLE001  (the selector will meet the same error)
            STUBS_USED[name] = f"import failed: {type(e).__name__}: {e}"
        finally:
            for f, fn in originals.items():
                setattr(torch, f, fn)


def init_dist_once(vc):
    """World of one (gloo) once per process; the model-parallel groups are
    rebuilt for every case because initialize_model_parallel reads the current
    config (e.g. the EP group exists only for MoE models)."""
    global _DIST_READY
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed import parallel_state as ps
    with set_current_vllm_config(vc):
        if not _DIST_READY:
            port = 29500 + (os.getpid() % 2000)
            init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                         distributed_init_method=f"tcp://127.0.0.1:{port}",
                                         backend="gloo")
            _DIST_READY = True
        else:
            ps.destroy_model_parallel()
        initialize_model_parallel(1, 1)


class TPPatch:
    """Make the (single-process) TP group look like rank 0 of `tp` ranks, so
    every layer sizes itself per rank; nothing communicates on meta."""

    def __init__(self, tp):
        from vllm.distributed import parallel_state as ps
        self.groups = [g for g in (getattr(ps, "_TP", None),) if g is not None]
        self.tp = tp
        self.saved = []

    def __enter__(self):
        for g in self.groups:
            self.saved.append((g, g.world_size, g.rank_in_group, list(g.ranks)))
            g.world_size = self.tp
            g.rank_in_group = 0
            g.ranks = list(range(self.tp))
        return self

    def __exit__(self, *a):
        for g, ws, r, ranks in self.saved:
            g.world_size, g.rank_in_group, g.ranks = ws, r, ranks


def layer_kind(layer) -> str:
    parts = [type(layer).__name__]
    for attr in ("attn_type",):
        v = getattr(layer, attr, None)
        if v is not None:
            parts.append(f"{attr}={jsonable(v)}")
    hs = getattr(layer, "head_size", None)
    if isinstance(hs, int):
        parts.append(f"head_size={hs}")
    sw = getattr(layer, "sliding_window", None)
    if sw:
        parts.append(f"sliding_window={sw}")
    return " ".join(parts)


def backends_by_kind(vc) -> dict:
    from vllm.config.vllm import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    out: dict[str, collections.Counter] = {}
    for _, layer in get_layers_from_vllm_config(vc, AttentionLayerBase).items():
        try:
            b = layer.get_attn_backend()
            bname = b.get_name()
            # FlashAttention version the layer's impl picked (composite
            # backends: their causal route), e.g. "FLASH_ATTN(FA3)"
            impl = getattr(layer, "impl", None)
            fav = getattr(impl, "vllm_flash_attn_version", None)
            if fav is None:
                fav = getattr(getattr(impl, "causal_impl", None), "vllm_flash_attn_version", None)
                if fav is not None:
                    bname += f"(causal FA{fav})"
            else:
                bname += f"(FA{fav})"
        except Exception as e:  # noqa: BLE001
            bname = f"<error {type(e).__name__}: {e}>"
        out.setdefault(layer_kind(layer), collections.Counter())[bname] += 1
    return {k: dict(v) for k, v in out.items()}


def build_and_update(vc, rec_handler) -> tuple[dict, Any]:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.platforms import current_platform
    from vllm.utils.torch_utils import set_default_torch_dtype

    res: dict[str, Any] = {"real_class_built": False}
    install_build_stubs()
    model = None
    t = time.perf_counter()
    if True:  # the caller holds TPPatch(tp) around (b) and (c)
        orig_stream = torch.cuda.Stream
        try:
            # model code that creates its own side stream (torch.cuda.Stream())
            # gets a stand-in object during the build (see install_build_stubs)
            torch.cuda.Stream = _stand_in_stream
            with set_current_vllm_config(vc), set_default_torch_dtype(vc.model_config.dtype), \
                    torch.device("meta"):
                model = initialize_model(vllm_config=vc)
            res["real_class_built"] = True
            res["model_cls"] = f"{type(model).__module__}.{type(model).__qualname__}"
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            res["build_error"] = describe_error(e)
            res["build_tb_tail"] = traceback.format_exc()[-1200:]
        finally:
            torch.cuda.Stream = orig_stream
        res["t_build_s"] = round(time.perf_counter() - t, 3)
        if not res["real_class_built"]:
            return res, None
        res["attention_backends_by_layer_kind"] = backends_by_kind(vc)
        cc = vc.cache_config
        res["before"] = {"block_size": cc.block_size,
                         "mamba_block_size": cc.mamba_block_size,
                         "mamba_page_size_padded": cc.mamba_page_size_padded}
        rec_handler.records.clear()
        try:
            current_platform.update_block_size_for_backend(vc)
            res["error"] = None
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            res["error"] = describe_error(e)
        res["logs"] = fmt_records(rec_handler.records, with_logger=True)
        res["after"] = {"block_size": cc.block_size,
                        "mamba_block_size": cc.mamba_block_size,
                        "mamba_page_size_padded": cc.mamba_page_size_padded,
                        "user_specified_block_size": cc.user_specified_block_size,
                        "skip_page_size_padded": getattr(cc, "skip_page_size_padded", None)}
        try:
            from vllm.config.cache import CacheConfig
            res["default_block_size"] = CacheConfig.DEFAULT_BLOCK_SIZE
            if hasattr(type(current_platform), "_find_non_ssm_backends"):
                nb = current_platform._find_non_ssm_backends(vc)
            else:
                one = current_platform._find_non_ssm_backend(vc)
                nb = [] if one is None else [one]
            res["non_ssm_backends"] = [b.get_name() for b in nb]
        except Exception as e:  # noqa: BLE001
            res["non_ssm_backends"] = f"<error {type(e).__name__}: {e}>"
    return res, model


# --------------------------------------------------------------------------
# (c) KV planning with 0.34's own functions
# --------------------------------------------------------------------------
def spec_summary(s) -> dict:
    import torch
    d: dict[str, Any] = {"type": type(s).__name__}
    for k in ("block_size", "num_kv_heads", "head_size", "head_size_v", "dtype",
              "sliding_window", "attention_chunk_size", "shapes", "dtypes",
              "page_size_padded", "mamba_cache_mode", "kv_quant_mode", "cache_dtype_str",
              "num_speculative_blocks", "prefix_cacheable"):
        if hasattr(s, k):
            v = getattr(s, k)
            d[k] = str(v).replace("torch.", "") if isinstance(v, torch.dtype) else jsonable(v)
    try:
        d["page_size_bytes"] = s.page_size_bytes
    except Exception as e:  # noqa: BLE001
        d["page_size_bytes"] = f"<error {type(e).__name__}: {e}>"
    if hasattr(s, "kv_cache_specs"):
        d["n_layers_in_uniform_type"] = len(s.kv_cache_specs)
    return d


def _call(fn, *args):
    """Call a release function with the leading arguments it takes (several planning helpers
    gained a `builder` first argument in 0.33.0)."""
    return fn(*args)


def _logged_capacity(records) -> dict:
    """The release's own "GPU KV cache size: N tokens" / "Maximum concurrency for M tokens per
    request: X.XXx" record(s), as logged (one or two lines depending on the release)."""
    import re
    out: dict[str, Any] = {}
    for r in records:
        msg = r.getMessage()
        m = re.search(r"KV cache size: ([\d,]+) tokens", msg)
        if m:
            out["kv_tokens_logged"] = int(m.group(1).replace(",", ""))
            out["kv_tokens_log_line"] = msg
        m = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", msg)
        if m:
            out["max_concurrency_logged"] = m.group(2)
            if "kv_tokens_log_line" in out and out["kv_tokens_log_line"] != msg:
                out["concurrency_log_line"] = msg
    return out


def kv_planning(vc, budgets_gib, rec_handler) -> dict:
    import inspect
    from vllm.config import set_current_vllm_config
    from vllm.v1.core import kv_cache_utils as ku
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec
    try:
        from vllm.v1.core import kv_cache_planning as kp
    except ImportError:
        kp = None
    plan = kp if kp is not None and hasattr(kp, "get_kv_cache_configs") else ku
    generate_scheduler_kv_cache_config = ku.generate_scheduler_kv_cache_config
    get_max_concurrency = ku.get_max_concurrency_for_kv_cache_config
    update_capacity = getattr(ku, "update_kv_cache_capacity", None)

    out: dict[str, Any] = {}
    rec_handler.records.clear()
    with set_current_vllm_config(vc):
        try:
            from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
            register_all_kvcache_specs(vc)
        except ImportError:
            pass
        specs = get_kv_cache_spec(vc)
        # engine core: non-causal layers turn off chunked prefill / prefix caching
        if any(getattr(s, "non_causal", False) for s in specs.values()):
            out["non_causal_layers"] = True
            vc.scheduler_config.enable_chunked_prefill = False
            vc.cache_config.enable_prefix_caching = False
        # engine core (0.32.0+): one KV cache layout for the whole model
        try:
            from vllm.v1.attention.backends.utils import (get_supported_kv_cache_layouts,
                                                          resolve_kv_cache_layout)
        except ImportError:
            resolve_kv_cache_layout = None
        if resolve_kv_cache_layout is not None:
            try:
                from vllm.distributed.kv_transfer.kv_connector.utils import (
                    get_current_attn_backends)
                supported = [[l.name for l in get_supported_kv_cache_layouts(
                    get_current_attn_backends(vc))]]
                out["supported_kv_cache_layouts"] = supported[0]
                out["kv_cache_layout"] = jsonable(resolve_kv_cache_layout(
                    vc, supported, list(specs.values())).name)
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                out["layout_error"] = describe_error(e)
                out["error"] = dict(describe_error(e), stage="resolve_kv_cache_layout")
                out["logs"] = fmt_records(rec_handler.records, with_logger=True)
                return out
        out["n_layers_with_kv"] = len(specs)
        kinds = collections.Counter(json.dumps(spec_summary(s), sort_keys=True)
                                    for s in specs.values())
        out["layer_specs"] = [dict(json.loads(k), n_layers=n) for k, n in kinds.items()]
        try:
            if hasattr(plan, "get_global_kv_cache_groups"):
                groups = plan.get_global_kv_cache_groups(vc, [specs])
            else:
                groups = ku.get_kv_cache_groups(vc, copy.copy(specs))
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            out["groups_error"] = describe_error(e)
            out["logs"] = fmt_records(rec_handler.records, with_logger=True)
            return out
        out["groups"] = [{"n_layers": len(g.layer_names),
                          "first_layer": g.layer_names[0] if g.layer_names else None,
                          "spec": spec_summary(g.kv_cache_spec)} for g in groups]
        takes_groups = "global_kv_cache_groups" in inspect.signature(
            plan.get_kv_cache_configs).parameters
        builder = plan.get_kv_cache_config_builder(vc) if hasattr(
            plan, "get_kv_cache_config_builder") else None
        lead = (builder,) if builder is not None else ()

        def bytes_per_block():
            if hasattr(plan, "_pool_bytes_per_block_from_builder"):
                return plan._pool_bytes_per_block_from_builder(builder, vc, groups)
            if hasattr(ku, "_pool_bytes_per_block"):
                sig = inspect.signature(ku._pool_bytes_per_block).parameters
                return (ku._pool_bytes_per_block(vc, groups) if len(sig) == 2
                        else ku._pool_bytes_per_block(groups))
            return None

        if groups:
            try:
                out["bytes_per_block"] = bytes_per_block()
                out["bytes_one_request_at_max_model_len"] = \
                    plan._max_memory_usage_bytes_from_groups(*lead, vc, groups)
            except Exception as e:  # noqa: BLE001
                out["bytes_error"] = f"{type(e).__name__}: {e}"
        rows = []
        for gib in budgets_gib:
            budget = int(gib * GiB)
            row: dict[str, Any] = {"budget_gib": gib, "available_memory": budget}
            clear_once_caches()
            n0 = len(rec_handler.records)
            try:
                if takes_groups:
                    cfgs = plan.get_kv_cache_configs(vc, [specs], [budget],
                                                     copy.deepcopy(groups))
                else:
                    cfgs = plan.get_kv_cache_configs(vc, [copy.copy(specs)], [budget])
                sched = generate_scheduler_kv_cache_config(cfgs)
                row["error"] = None
                row["num_blocks"] = sched.num_blocks
                if sched.kv_cache_groups:
                    part = [g.kv_cache_spec.block_size for g in sched.kv_cache_groups
                            if getattr(g.kv_cache_spec, "prefix_cacheable", True)]
                    row["engine_block_size"] = min(part or [g.kv_cache_spec.block_size
                                                            for g in sched.kv_cache_groups])
                    saved_bs = vc.cache_config.block_size
                    if update_capacity is not None:
                        update_capacity(vc, sched)
                    vc.cache_config.block_size = saved_bs
                    conc = get_max_concurrency(vc, sched)
                    row["max_concurrency"] = conc
                    row.update(_logged_capacity(rec_handler.records[n0:]))
                    mbs = min(g.kv_cache_spec.block_size for g in sched.kv_cache_groups)
                    row["kv_tokens_019_formula"] = (
                        sched.num_blocks // len(sched.kv_cache_groups) * mbs)
                    row["kv_tokens_034_formula"] = int(conc * vc.model_config.max_model_len)
                    saved = vc.model_config.max_model_len
                    at = {}
                    try:
                        for n in (1024, 8192, 32768):
                            vc.model_config.max_model_len = n
                            at[str(n)] = get_max_concurrency(vc, sched)
                    finally:
                        vc.model_config.max_model_len = saved
                    row["max_concurrency_at"] = at
            except ValueError as e:
                row["error"] = str(e)
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                row["error"] = f"{type(e).__name__}: {e}"
                row["error_detail"] = describe_error(e)
            if groups and hasattr(plan, "_estimate_max_model_len_from_groups"):
                try:
                    # as the engine's check: the budget less the null block
                    bpb = bytes_per_block()
                    usable = budget - bpb if bpb is not None else budget
                    row["estimate_max_model_len"] = plan._estimate_max_model_len_from_groups(
                        *lead, vc, groups, usable)
                except Exception as e:  # noqa: BLE001
                    row["estimate_max_model_len"] = f"<error {type(e).__name__}: {e}>"
            rows.append(row)
        out["budgets"] = rows
        try:
            vc.validate_block_size()
            out["validate_block_size"] = "ok"
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            out["validate_block_size"] = describe_error(e)
    out["logs"] = fmt_records(rec_handler.records, with_logger=True)
    return out


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--gpu-name", default="NVIDIA H200")
    ap.add_argument("--capability", default="9.0")
    ap.add_argument("--gpu-mem-mib", type=int, default=143771)
    ap.add_argument("--num-gpus", type=int, default=8)
    ap.add_argument("--usage-context", default="OPENAI_API_SERVER")
    ap.add_argument("--budgets-gib", default=",".join(map(str, DEFAULT_BUDGETS_GIB)))
    ap.add_argument("--cache-dir", default=os.environ.get(
        "ORACLE_CACHE", os.path.expanduser("~/.cache/vllm-release-oracle")))
    ap.add_argument("--no-build", action="store_true", help="skip (b) and (c)")
    ap.add_argument("--only", help="run only cases whose name contains this")
    ap.add_argument("--shard", default="0/1", help="i/n: run every n-th case from i")
    ap.add_argument("--all-logs", action="store_true")
    ap.add_argument("--extra-path", action="append", default=[],
                    help="a folder of packages put in front of the venv's (e.g. an older "
                         "transformers, installed with pip --target)")
    ap.add_argument("--splice-into", metavar="BASE",
                    help="then replace these cases in BASE (a results file of the same release) "
                         "by this run's answers, BASE's top level saying so under `spliced`")
    ap.add_argument("--why", default="", help="with --splice-into: the reason, recorded")
    ns = ap.parse_args(argv)
    budgets = [float(x) if "." in x else int(x) for x in ns.budgets_gib.split(",")]

    setup_environment(ns)
    import vllm  # noqa: F401
    for h in logging.getLogger("vllm").handlers:
        if isinstance(h, logging.StreamHandler) and h.stream is sys.stdout:
            h.setStream(sys.stderr)
    from vllm.config import ModelConfig, VllmConfig
    from vllm.config.pooler import PoolerConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext
    import vllm.model_executor.models.config  # noqa: F401
    for h in logging.getLogger("vllm").handlers:
        if isinstance(h, logging.StreamHandler) and h.stream is sys.stdout:
            h.setStream(sys.stderr)

    state: dict[str, Any] = {}
    orig_try_verify = VllmConfig.try_verify_and_update_config
    orig_model_verify = ModelConfig._try_verify_and_update_model_config

    def try_verify_observer(self):
        state["stage"] = "VllmConfig.try_verify_and_update_config"
        try:
            return orig_try_verify(self)
        finally:
            if sys.exc_info()[0] is None:
                state["stage"] = "VllmConfig.__post_init__ (after try_verify)"
            try:
                state["after_verify"] = snapshot(self)
            except Exception as e:  # noqa: BLE001
                state["after_verify"] = {"__error__": repr(e)}

    def model_verify_observer(self):
        state["stage"] = "ModelConfig._try_verify_and_update_model_config"
        try:
            return orig_model_verify(self)
        finally:
            if sys.exc_info()[0] is None:
                state["stage"] = "ModelConfig.__post_init__ (after model verify)"

    VllmConfig.try_verify_and_update_config = try_verify_observer
    ModelConfig._try_verify_and_update_model_config = model_verify_observer

    # Observation only: every record a vllm.* logger emits passes through
    # Logger.handle; vLLM re-applies its dictConfig (which drops handlers
    # added to the "vllm" logger) while the config is created.
    rec = ListHandler()
    _orig_handle = logging.Logger.handle

    def _recording_handle(self, record):
        if record.name == "vllm" or record.name.startswith("vllm."):
            rec.records.append(record)
        return _orig_handle(self, record)

    logging.Logger.handle = _recording_handle

    with open(ns.cases) as f:
        raw = json.load(f)
    cases = raw["cases"] if isinstance(raw, dict) else raw
    si, sn = (int(x) for x in ns.shard.split("/"))
    cases = [c for i, c in enumerate(cases) if i % sn == si]
    if ns.only:
        cases = [c for c in cases if ns.only in c.get("name", "")]
    base_dir = os.path.dirname(os.path.abspath(ns.cases))

    def build_kwargs(case):
        cdir = case["config_dir"]
        if not os.path.isabs(cdir):
            cdir = os.path.normpath(os.path.join(base_dir, cdir))
        kwargs: dict[str, Any] = {"model": cdir, "skip_tokenizer_init": True}
        implied: dict[str, Any] = {"skip_tokenizer_init": True}
        try:
            cj = json.load(open(os.path.join(cdir, "config.json")))
            ac = (cj.get("auto_map") or {}).get("AutoConfig")
            if isinstance(ac, str) and "trust_remote_code" not in (case.get("args") or {}):
                mod_file = ac.split("--")[-1].rsplit(".", 1)[0] + ".py"
                if os.path.exists(os.path.join(cdir, mod_file)):
                    kwargs["trust_remote_code"] = implied["trust_remote_code"] = True
        except Exception:  # noqa: BLE001
            pass
        for k, v in (case.get("args") or {}).items():
            if k == "pooler_config" and isinstance(v, dict):
                v = PoolerConfig(**v)
            kwargs[k] = v
        world = (kwargs.get("tensor_parallel_size") or 1) * (
            kwargs.get("pipeline_parallel_size") or 1)
        if world > 1 and kwargs.get("distributed_executor_backend") is None:
            kwargs["distributed_executor_backend"] = implied[
                "distributed_executor_backend"] = "mp"
        return cdir, kwargs, implied

    results = []
    out_meta = {
        "vllm_version": vllm.__version__,
        "transformers_version": __import__("transformers").__version__,
        "torch_version": __import__("torch").__version__,
        "platform": {
            "class": f"{type(current_platform).__module__}.{type(current_platform).__qualname__}",
            "device_name": _try(current_platform.get_device_name),
            "device_capability": _try(lambda: tuple(current_platform.get_device_capability())),
            "device_total_memory": _try(current_platform.get_device_total_memory),
        },
        "usage_context": ns.usage_context,
        "budgets_gib": budgets,
    }

    # no machine paths in the output: the venv, the cache dir and the steering
    # repo root are replaced by placeholders / relative paths
    scrub = [(sys.prefix.rstrip("/") + "/", "$VENV/"),
             (os.path.abspath(ns.cache_dir).rstrip("/") + "/", "$ORACLE_CACHE/"),
             (REPO + "/", ""),
             (os.path.normpath(os.path.join(ORACLE_DIR, "..")) + "/", "")]
    scrub += [(os.path.abspath(p).rstrip("/") + "/", f"$EXTRA_PATH{i}/")
              for i, p in enumerate(ns.extra_path)]

    def compact(res: dict) -> dict:
        """What a test compares: no timings, no compilation config, `final` only."""
        res = {k: v for k, v in res.items() if not k.startswith("t_") and k != "after_verify"}
        if isinstance(res.get("final"), dict):
            res["final"] = {k: v for k, v in res["final"].items()
                            if k != "compilation_config"}
        if isinstance(res.get("post_load"), dict):
            res["post_load"] = {k: v for k, v in res["post_load"].items()
                                if not k.startswith("t_")}
        return res

    def dump():
        tmp = ns.output + ".tmp"
        text = json.dumps({**out_meta, "results": [compact(r) for r in results]},
                          separators=(",", ":"), default=str)
        for a, b in scrub:
            text = text.replace(a, b)
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, ns.output)

    for case in cases:
        t0 = time.perf_counter()
        cdir, kwargs, implied = build_kwargs(case)
        state.clear()
        rec.records.clear()
        clear_once_caches()
        saved_env = {}
        for k, v in (case.get("env") or {}).items():
            saved_env[k] = os.environ.get(k)
            os.environ[k] = str(v)
        uc_name = case.get("usage_context", ns.usage_context)
        uc = None if uc_name in (None, "", "none", "None") else UsageContext[uc_name]
        res: dict[str, Any] = {"name": case.get("name", os.path.basename(cdir)),
                               "config_dir": case["config_dir"],
                               "args": jsonable(case.get("args") or {}),
                               "implied_args": implied}
        vc = None
        try:
            vc = EngineArgs(**kwargs).create_engine_config(usage_context=uc)
            res["error"] = None
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            res["error"] = describe_error(e)
            res["error"]["stage"] = state.get("stage", "before ModelConfig verify")
        cfg_recs = [r for r in rec.records if _is_cfg_logger(r.name)]
        res["logs"] = fmt_records(cfg_recs, with_logger=True)
        if ns.all_logs:
            res["all_logs"] = fmt_records(rec.records, with_logger=True)
        res["after_verify"] = state.get("after_verify")
        res["final"] = snapshot(vc) if vc is not None else None
        if vc is not None:
            res["page_sizes"] = page_sizes34(vc)
        res["t_config_s"] = round(time.perf_counter() - t0, 3)

        if vc is not None and not ns.no_build:
            model = None
            try:
                init_dist_once(vc)
                tpp = TPPatch(vc.parallel_config.tensor_parallel_size)
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                tpp = None
                res["post_load"] = {"real_class_built": False,
                                    "build_error": describe_error(e),
                                    "why_not_built": "distributed init failed"}
                res["kv"] = None
            if tpp is not None:
                with tpp:
                    try:
                        post, model = build_and_update(vc, rec)
                    except BaseException as e:  # noqa: BLE001
                        if isinstance(e, KeyboardInterrupt):
                            raise
                        post = {"real_class_built": False, "build_error": describe_error(e),
                                "build_tb_tail": traceback.format_exc()[-1200:]}
                    res["post_load"] = post
                    if post.get("real_class_built") and post.get("error") is None:
                        try:
                            res["kv"] = kv_planning(vc, budgets, rec)
                        except BaseException as e:  # noqa: BLE001
                            if isinstance(e, KeyboardInterrupt):
                                raise
                            res["kv"] = {"error": describe_error(e),
                                         "tb_tail": traceback.format_exc()[-1200:]}
                    else:
                        res["kv"] = None
            del model
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        vc = None
        gc.collect()
        res["t_total_s"] = round(time.perf_counter() - t0, 3)
        results.append(res)
        pl = res.get("post_load") or {}
        status = ("ERROR " + res["error"]["type"]) if res["error"] else "ok"
        built = "built" if pl.get("real_class_built") else (
            "not-built" if "post_load" in res else "-")
        print(f"[oracle {out_meta['vllm_version']}] {res['name']}: {status} {built} "
              f"bs={pl.get('after', {}).get('block_size')} ({res['t_total_s']} s)",
              file=sys.stderr, flush=True)
        dump()
    dump()
    if ns.splice_into:
        splice(ns.splice_into, ns.output, ns.why)
    return 0


def splice(base_path: str, patch_path: str, why: str) -> None:
    """Every answer of PATCH replaces the answer of the same name in BASE (order kept)."""
    with open(base_path) as f:
        base = json.load(f)
    with open(patch_path) as f:
        patch = json.load(f)
    if patch["vllm_version"] != base["vllm_version"]:
        raise SystemExit(f"{patch_path} is vLLM {patch['vllm_version']}, "
                         f"{base_path} {base['vllm_version']}")
    answers = {r["name"]: r for r in patch["results"]}
    names = [r["name"] for r in base["results"]]
    missing = sorted(set(answers) - set(names))
    if missing:
        raise SystemExit(f"not in {base_path}: {missing}")
    base["results"] = [answers.get(n, r) for n, r in zip(names, base["results"])]
    base.setdefault("spliced", []).append({
        "cases": sorted(answers), "transformers_version": patch["transformers_version"],
        "why": why})
    tmp = base_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(base, separators=(",", ":"), default=str) + "\n")
    os.replace(tmp, base_path)
    print(f"{len(answers)} answers replaced in {base_path}", file=sys.stderr)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # everything is written; skip the interpreter's teardown, where threads vLLM started
    # (and the gloo world) can keep the process alive long after the last answer
    os._exit(code)
