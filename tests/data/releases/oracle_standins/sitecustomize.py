"""Two more device answers for the release oracle (make_release_results.py puts this folder on
PYTHONPATH, so it also reaches the subprocesses vLLM starts to inspect model classes).

Releases before 0.34.0 ask Triton's active driver for its target while a model module is
imported (`fla/ops/utils.py: get_available_device`). On a machine without a GPU, Triton's
CUDA driver then fails building its C helper (no libcuda.so.1 on the linker path) with an
AssertionError vLLM does not catch, and the model class cannot be inspected. Here:

1. Triton's CUDA driver answers as on the emulated GPU: target ("cuda", capability from
   ORACLE_VLLM_CAPABILITY, warp 32), without building or loading anything.
2. torch.cuda.get_device_properties() answers from the variables the oracle's platform plugin
   reads (name, capability, memory, SM count), as tests/data/vllm-0.34.0/make_results_device.py
   does for 0.34.0: the same module then reads the device name and capability to tune its
   kernels. torch.cuda.is_available() stays False; nothing is allocated on a GPU.

Active only when the oracle's emulated CUDA platform is (ORACLE_VLLM_PLATFORM=cuda).
"""
import os
import types

if os.environ.get("ORACLE_VLLM_PLATFORM") == "cuda":
    try:
        from triton.backends.compiler import GPUTarget
        from triton.backends.driver import GPUDriver
        from triton.backends.nvidia import driver as _nv
    except Exception:  # noqa: BLE001  (no triton: nothing to answer)
        _nv = None
    if _nv is not None:
        _orig_init = _nv.CudaDriver.__init__

        def _init(self):
            try:
                _orig_init(self)
            except (AssertionError, ImportError, OSError, RuntimeError):
                GPUDriver.__init__(self)

        def _target(self):
            major, _, minor = os.environ.get("ORACLE_VLLM_CAPABILITY", "9.0").partition(".")
            return GPUTarget("cuda", int(major) * 10 + int(minor or 0), 32)

        _nv.CudaDriver.__init__ = _init
        _nv.CudaDriver.get_current_target = _target

    try:
        import torch
    except Exception:  # noqa: BLE001
        torch = None
    if torch is not None:
        def _device_properties(device=None):
            major, _, minor = os.environ.get("ORACLE_VLLM_CAPABILITY", "9.0").partition(".")
            return types.SimpleNamespace(
                name=os.environ.get("ORACLE_VLLM_GPU_NAME", "NVIDIA H200"),
                major=int(major), minor=int(minor or 0),
                total_memory=int(os.environ.get("ORACLE_VLLM_GPU_MEM_BYTES",
                                                str(143771 * 2**20))),
                multi_processor_count=int(os.environ.get("ORACLE_VLLM_NUM_SMS", "132")),
            )

        torch.cuda.get_device_properties = _device_properties
