"""``gpu-validation``: the last stage; Triton kernels prove the resolved config.

From the resolved config it derives what the engine's kernels will meet — every distinct
attention head size with the KV heads per tensor-parallel rank, the block size, the KV
dtype; the Mamba family's per-rank state shapes and dtypes; the hybrid page layout after
padding — runs the Triton kernels of :mod:`enginecfg.kernels` on fresh random inputs of
those shapes, compares them with a float64 reference within per-dtype tolerances, and
publishes each result as a ``validation_checked`` event.  A failed check rejects the run
before the config is frozen.  :func:`build_plan` gives the checks as :class:`GpuCheck` values,
each naming its kernel check by a :class:`~enginecfg.kernels.kinds.KernelCheck` (torch-free;
the kernels run it by that name, importing torch only then).

Modes: ``auto`` (validate when a CUDA device is present, else skip with the reason),
``require-gpu`` (no GPU is a failure), ``interpret`` (Triton's interpreter on the CPU, on
scaled-down batch, head counts and sequence lengths but the config's head sizes, block
size and dtypes), ``off``.  torch and triton are imported only here, only when checking.

The state-precision check runs the SSM (or gated-delta) update for a few hundred steps in
the resolved state dtype beside a float64 state and warns when the state's relative error
passes :data:`STATE_ERROR_WARN`.
"""

from __future__ import annotations

import glob
import importlib.util
import math
import os
import threading
import time
from types import MappingProxyType
from typing import Any, Mapping

import attrs

from enginecfg.kernels.kinds import KernelCheck
from enginecfg.pipeline.errors import ConfigRejectedError, InvalidInputError
from enginecfg.pipeline.models import derive, mamba_state
from enginecfg.pipeline.models.pages import page_facts
from enginecfg.pipeline.stage import Stage

#: relative state error after the precision run above which a warning is issued
STATE_ERROR_WARN = 1e-2

_KV_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}
#: fp8 cache strings -> the fp8 format the kernels read them in
_FP8_KV = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2",
           "fp8_inc": "fp8_e4m3", "fp8_ds_mla": "fp8_e4m3"}


def _cuda_present() -> bool:
    """Is there an NVIDIA device, decided without importing torch?"""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def _missing_packages() -> list[str]:
    return [m for m in ("torch", "triton") if importlib.util.find_spec(m) is None]


_PREFETCH: threading.Thread | None = None


def _prefetch_body() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.init()
        import triton  # noqa: F401

        import enginecfg.kernels.checks  # noqa: F401
    except Exception:  # noqa: BLE001 - the stage itself reports what is missing
        pass


def start_prefetch() -> None:
    """Import torch, start CUDA and import the kernels on a background thread, once per
    process, so that they overlap with loading the config and the earlier stages (torch's
    import alone is 3-4 s on an H200 host; see bench/NOTES.md).  Only when this stage
    will run on a GPU."""
    global _PREFETCH
    if _PREFETCH is not None:
        return
    _PREFETCH = threading.Thread(target=_prefetch_body, name="enginecfg-gpu-prefetch", daemon=True)
    _PREFETCH.start()


def _join_prefetch() -> None:
    if _PREFETCH is not None:
        _PREFETCH.join()


def attention_head_sizes(cfg) -> list[int]:
    """Every distinct attention head size of the model (Gemma 4 has two)."""
    return derive.attention_head_sizes(cfg.model_config)


def _kv_dtype(cfg) -> tuple[str, str | None]:
    """(dtype the KV cache is checked in, note).  fp8 caches are checked in fp8: the
    kernels read the fp8 bytes and dequantise with per-tensor scales, as vLLM does."""
    mc, cc = cfg.model_config, cfg.cache_config
    if cc.cache_dtype == "auto":
        return mc.dtype, None
    if cc.cache_dtype in _KV_DTYPES:
        return cc.cache_dtype, None
    if cc.cache_dtype in _FP8_KV:
        fp8 = _FP8_KV[cc.cache_dtype]
        note = None if fp8 == cc.cache_dtype or cc.cache_dtype == "fp8" else (
            f"{cc.cache_dtype} KV cache is checked as {fp8} with per-tensor scales")
        return fp8, note
    return mc.dtype, f"{cc.cache_dtype} KV cache is checked in the model dtype {mc.dtype}"


#: where the checks may run (``Pipeline(gpu_validation=...)``, ``--gpu-validation``)
MODES = ("auto", "require-gpu", "interpret", "off")


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class GpuCheck:
    """One kernel check a resolved config implies: its name in the validation record, the
    kernel check it runs (:class:`~enginecfg.kernels.kinds.KernelCheck`), the dtype checked,
    the shapes the record states, the arguments the check is called with, and a note."""

    name: str
    check: KernelCheck
    dtype: str
    shapes: Mapping[str, Any] = attrs.field(converter=_read_only)
    args: Mapping[str, Any] = attrs.field(converter=_read_only)
    detail: str | None = None

    @property
    def kernel(self) -> str:
        """The kernel proved, as the record names it (``paged_decode_attention``)."""
        return self.check.kernel


@attrs.frozen
class PageLayout:
    """The KV-cache page layout the kernels meet, where it is not the config's: the block size
    the attention layers declare their KV cache with (``block_size``, the KV manager's block),
    the block the attention kernels address (``kernel_block_size``: a divisor of it, when the
    backends cannot take the whole block and vLLM views each page as several kernel blocks;
    None: the block itself) and the padded Mamba page (None: no padding)."""

    block_size: int
    kernel_block_size: int | None = None
    mamba_page_size_padded: int | None = None

    @property
    def kernel_block(self) -> int:
        return self.kernel_block_size or self.block_size


def mla_facts(cfg) -> dict[str, int] | None:
    """kv_lora_rank, qk_rope_head_dim and query heads per rank of an MLA model, or None."""
    return derive.mla_dims(cfg.model_config, cfg.parallel_config.tensor_parallel_size)


class GpuValidationStage(Stage):
    name = "gpu-validation"
    vllm_step = "final"  # enginecfg's own step: after every check of vLLM's
    facts = ("validation",)

    def __init__(self) -> None:
        self.mode = "auto"

    def configure(self, pipeline) -> None:
        mode = pipeline.options_for(self.name)
        if mode is None:
            mode = "auto"
        if mode not in MODES:
            raise InvalidInputError.for_value("gpu_validation", mode, ", ".join(MODES), flag="--gpu-validation")
        self.mode = mode
        if mode in ("auto", "require-gpu") and _cuda_present() and not _missing_packages():
            start_prefetch()

    # -- deciding where to run ----------------------------------------------------------
    def _device(self) -> tuple[str | None, str | None]:
        """(device, reason to skip)."""
        if self.mode == "off":
            return None, "GPU validation is off (--gpu-validation off)"
        missing = _missing_packages()
        if missing:
            reason = f"{' and '.join(missing)} not installed (pip install 'enginecfg[gpu]')"
            if self.mode == "auto":
                return None, reason
            raise ConfigRejectedError(f"GPU validation ({self.mode}) cannot run: {reason}",
                                      field="gpu_validation", vllm_type="GpuValidationError")
        if self.mode == "interpret":
            os.environ["TRITON_INTERPRET"] = "1"
            return "cpu", None
        _join_prefetch()
        if not _cuda_present():
            reason = "no CUDA device present"
            if self.mode == "auto":
                return None, reason
            raise ConfigRejectedError(f"GPU validation (require-gpu) cannot run: {reason}",
                                      field="gpu_validation", vllm_type="GpuValidationError")
        import torch

        if not torch.cuda.is_available():
            reason = "torch sees no usable CUDA device"
            if self.mode == "auto":
                return None, reason
            raise ConfigRejectedError(f"GPU validation (require-gpu) cannot run: {reason}",
                                      field="gpu_validation", vllm_type="GpuValidationError")
        return "cuda", None

    def run(self, cfg, ctx) -> None:
        device, reason = self._device()
        doc: dict[str, Any] = {"mode": self.mode, "device": device, "status": "skipped", "reason": reason,
                               "checks": []}
        ctx.record("validation", doc)
        if device is None:
            return
        if device == "cuda":
            import torch

            doc["device"] = torch.cuda.get_device_name(0)
        plan = self.plan_for(cfg, ctx, interpret=device == "cpu")
        if isinstance(plan, str):
            doc["reason"] = plan
            return
        if not plan:
            doc["reason"] = "no kernel check applies to this config"
            return
        failed = []
        for check in plan:
            entry = self._run_check(check, device, doc["device"], ctx)
            doc["checks"].append(entry)
            if not entry["passed"]:
                failed.append(entry)
        doc["status"] = "failed" if failed else "passed"
        if failed:
            first = failed[0]
            raise ConfigRejectedError(
                f"GPU validation failed: check {first['check']} ({first['kernel']}, {first['dtype']}, "
                f"{first['shapes']}): max error {first['max_error']} over tolerance {first['tolerance']}"
                + (f"; {first['detail']}" if first.get("detail") else ""),
                field=f"validation.{first['check']}", vllm_type="GpuValidationError")
        for entry in doc["checks"]:
            if entry["kernel"] == "state_precision" and entry.get("state_error", 0) > STATE_ERROR_WARN:
                ctx.warn(f"{entry['check']}: the {entry['dtype']} SSM state drifts to a relative error of "
                         f"{entry['state_error']:.3g} after {entry['shapes']['steps']} decode steps "
                         f"(threshold {STATE_ERROR_WARN:g}); float32 keeps it at the float64 reference's level")

    def plan_for(self, cfg, ctx, *, interpret: bool) -> "list[GpuCheck] | str":
        """The checks of this run (a string: why none can be planned).  0.19.0 lays the pages
        out at config time: the config's block size and padded Mamba page."""
        return build_plan(cfg, interpret=interpret)

    def _run_check(self, check: GpuCheck, device: str, device_name: str, ctx) -> dict[str, Any]:
        from enginecfg.kernels.checks import run_check

        t0 = time.perf_counter()
        shapes = dict(check.shapes)
        base = {"check": check.name, "kernel": check.kernel, "shapes": shapes, "dtype": check.dtype}
        if check.check.measures_precision:
            res = run_check(check.check, device=device, **check.args)
            err = res.final_state_error
            entry = {**base, "max_error": err, "tolerance": None, "passed": True,
                     "seconds": time.perf_counter() - t0, "state_error": err, "growth": res.growth,
                     "detail": check.detail}
        else:
            try:
                res = run_check(check.check, device=device, **check.args)
                entry = {**base, "max_error": res.max_error, "tolerance": res.tolerance,
                         "passed": bool(res.passed), "seconds": res.seconds, "detail": check.detail}
            except Exception as exc:  # a kernel that cannot run these shapes fails the check
                entry = {**base, "max_error": None, "tolerance": None, "passed": False,
                         "seconds": time.perf_counter() - t0,
                         "detail": f"{type(exc).__name__}: {exc}"}
        if isinstance(entry["max_error"], float) and not math.isfinite(entry["max_error"]):
            entry["passed"] = False  # NaN or inf never passes, a precision run included
            entry["detail"] = f"non-finite error ({entry['max_error']})"
            entry["max_error"] = None
        ctx.validation_checked(check=entry["check"], kernel=entry["kernel"], shapes=entry["shapes"],
                               dtype=entry["dtype"], max_error=entry["max_error"],
                               tolerance=entry["tolerance"], passed=entry["passed"], device=device_name,
                               seconds=entry["seconds"], detail=entry.get("detail"))
        return entry


def build_plan(cfg, *, interpret: bool, layout: PageLayout | None = None) -> list[GpuCheck]:
    """The kernel checks a config implies, with their arguments (scaled down to interpret).
    *layout*: the page layout when the config's fields do not hold it (a release that lays
    pages out when the engine starts); the attention kernels then run on its kernel block,
    over sequences that cross one KV manager block."""
    mc, cc = cfg.model_config, cfg.cache_config
    tp = cfg.parallel_config.tensor_parallel_size
    plan: list[GpuCheck] = []
    block = cc.block_size if layout is None else layout.kernel_block
    span = block if layout is None else layout.block_size  # the tokens of one KV manager block
    split = {} if layout is None or layout.kernel_block == layout.block_size else {
        "manager_block_size": layout.block_size}
    kv_dtype, kv_note = _kv_dtype(cfg)
    heads = mc.num_attention_heads
    fp8 = kv_dtype.startswith("fp8")
    mla = mla_facts(cfg) if not mc.is_attention_free else None
    if mla:
        h = min(mla["num_heads"], 3) if interpret else mla["num_heads"]
        seq_lens = [span + 3, 5] if interpret else [2 * span + 7, span + 1, 33, 1]
        args = {"kv_lora_rank": mla["kv_lora_rank"], "qk_rope_head_dim": mla["qk_rope_head_dim"],
                "num_heads": h, "block_size": block, "kv_dtype": kv_dtype, "seq_lens": seq_lens,
                "q_dtype": mc.dtype}
        plan.append(GpuCheck(f"mla-decode-attention-{mla['kv_lora_rank']}+{mla['qk_rope_head_dim']}",
                             KernelCheck.MLA_ATTENTION, kv_dtype,
                             shapes={**{k: v for k, v in args.items() if k != "q_dtype"}, **split}, args=args,
                             detail=kv_note))
    elif not mc.is_attention_free and mc.head_size and not mc.use_mla and heads:
        kv_heads = mc.num_kv_heads
        q_heads = max(kv_heads, heads // tp)
        group = max(1, q_heads // kv_heads)
        if interpret:
            kv_heads, q_heads = 1, min(group, 2)
            seq_lens = [span + 3, 5]
        else:
            seq_lens = [2 * span + 7, span + 1, 33, 1]
        for hs in attention_head_sizes(cfg):
            shapes = {"head_size": hs, "num_kv_heads": kv_heads, "num_q_heads": q_heads, "block_size": block,
                      **split, "seq_lens": seq_lens}
            args = {"head_size": hs, "num_kv_heads": kv_heads, "num_q_heads": q_heads,
                    "block_size": block, "kv_dtype": kv_dtype, "seq_lens": seq_lens}
            if fp8:
                args["q_dtype"] = mc.dtype
            plan.append(GpuCheck(f"paged-decode-attention-h{hs}" + ("-fp8" if fp8 else ""),
                                 KernelCheck.PAGED_ATTENTION_FP8 if fp8 else KernelCheck.PAGED_ATTENTION,
                                 kv_dtype, shapes=shapes, args=args, detail=kv_note))
        hs = attention_head_sizes(cfg)[-1]
        if fp8:  # the prefill kernel reads 16/32-bit caches: its check stays in the model dtype
            kv_dtype = mc.dtype
            kv_note = f"prefill checked in the model dtype {mc.dtype}; the fp8 cache is checked by decode"
        q_lens = [4, 3] if interpret else [64, 17]
        p_lens = [span + 4, 9] if interpret else [span + 64, 40]
        plan.append(GpuCheck(
            f"paged-prefill-chunk-h{hs}", KernelCheck.PAGED_PREFILL, kv_dtype,
            shapes={"head_size": hs, "block_size": block, **split, "seq_lens": p_lens, "query_lens": q_lens},
            args={"head_size": hs, "num_kv_heads": kv_heads, "num_q_heads": q_heads, "block_size": block,
                  "kv_dtype": kv_dtype, "seq_lens": p_lens, "query_lens": q_lens},
            detail=kv_note))
    plan += _mamba_plan(cfg, interpret, layout)
    return plan


def _mamba_plan(cfg, interpret: bool, layout: PageLayout | None = None) -> list[GpuCheck]:
    mc, cc = cfg.model_config, cfg.cache_config
    info = mc.arch_info
    if info is None or info.state_kind is None:
        return []
    facts = page_facts(cfg)
    # the recipe's named dimensions: heads, groups and state sizes are read, never worked back
    shapes = mamba_state.state_shapes(info, mc.hf_config, mc.hf_text_config,
                                      cfg.parallel_config.tensor_parallel_size)
    dtypes = facts["mamba_state_dtypes"]
    plan: list[GpuCheck] = []
    batch = 2 if interpret else 64
    kind = info.state_kind
    if kind in ("mamba2", "gated_delta_net", "mamba1", "short_conv") and shapes:
        conv_dim = shapes[0].dim("conv_dim")
        width = shapes[0].dim("conv_width") + 1
        dim = min(conv_dim, 64) if interpret else conv_dim
        plan.append(GpuCheck("conv1d-state-update", KernelCheck.CAUSAL_CONV1D_UPDATE, dtypes[0],
                             shapes={"batch": batch, "conv_dim": dim, "kernel_width": width},
                             args={"batch": batch, "conv_dim": dim, "kernel_width": width,
                                   "state_dtype": dtypes[0], "io_dtype": mc.dtype}))
    if kind == "mamba2" and len(shapes) == 2:
        temporal = shapes[1]
        nheads, head_dim, dstate = temporal.dim("heads"), temporal.dim("head_dim"), temporal.dim("state_size")
        groups = temporal.meta["groups"]
        if interpret:
            nheads, groups = min(nheads, 2), 1
            head_dim, dstate = min(head_dim, 16), min(dstate, 16)
        args = {"batch": batch, "nheads": nheads, "head_dim": head_dim, "dstate": dstate, "ngroups": groups,
                "state_dtype": dtypes[1], "io_dtype": mc.dtype}
        plan.append(GpuCheck("mamba2-state-update", KernelCheck.SELECTIVE_STATE_UPDATE, dtypes[1],
                             shapes=args, args=args))
        steps = 12 if interpret else 300
        plan.append(GpuCheck("mamba2-state-precision", KernelCheck.STATE_PRECISION, dtypes[1],
                             shapes={"steps": steps},
                             args={"kernel": "mamba2", "state_dtype": dtypes[1], "steps": steps}))
    if kind == "gated_delta_net" and len(shapes) == 2:
        temporal = shapes[1]
        nv, dv, dk = temporal.dim("v_heads"), temporal.dim("head_v_dim"), temporal.dim("head_k_dim")
        nk = temporal.meta["k_heads"]
        if interpret:
            ratio = nv // nk
            nk, nv, dk, dv = 1, min(ratio, 2), min(dk, 16), min(dv, 16)
        args = {"batch": batch, "num_k_heads": nk, "num_v_heads": nv, "head_k_dim": dk, "head_v_dim": dv,
                "state_dtype": dtypes[1], "io_dtype": mc.dtype}
        plan.append(GpuCheck("gated-delta-step", KernelCheck.GATED_DELTA, dtypes[1], shapes=args, args=args))
        plan.append(GpuCheck("gated-delta-step-packed", KernelCheck.GATED_DELTA_PACKED, dtypes[1],
                             shapes=dict(args, packed=True), args=args))
        steps = 12 if interpret else 300
        plan.append(GpuCheck("gated-delta-state-precision", KernelCheck.STATE_PRECISION, dtypes[1],
                             shapes={"steps": steps},
                             args={"kernel": "gated_delta", "state_dtype": dtypes[1], "steps": steps}))
    if mc.is_hybrid and facts["mamba_page_size"]:
        block = cc.block_size if layout is None else layout.block_size
        padded = cc.mamba_page_size_padded if layout is None else layout.mamba_page_size_padded
        page = padded or block * facts["attn_page_size_1_token"]
        attn_block = block * facts["attn_page_size_1_token"]
        from enginecfg.pipeline.models.dtypes import dtype_size

        state_bytes = [math.prod(s) * dtype_size(d) for s, d in zip(shapes, dtypes)]
        plan.append(GpuCheck("hybrid-page-layout", KernelCheck.PAGE_LAYOUT, "uint8",
                             shapes={"page_size": page, "attn_block_bytes": attn_block,
                                     "mamba_state_bytes": state_bytes},
                             args={"page_size_bytes": page, "attn_block_bytes": attn_block,
                                   "mamba_state_bytes": state_bytes, "num_pages": 2 if interpret else 3}))
    return plan
