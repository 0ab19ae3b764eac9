#!/usr/bin/env python3
"""shared/oracle34/run_oracle34.py, with four more stand-ins for what only a GPU provides.

On capability 10.0 vLLM 0.34.0 picks FlashInfer for most layers, and the FlashInfer
attention implementation touches the device while the layer is built; without a GPU every
such model class failed to build ("Found no NVIDIA driver"). This wrapper adds, in the spirit
of the oracle's own stubs (device queries answered, device buffers on the meta device):

1. torch.cuda.get_device_properties() answers from the environment variables the oracle's
   platform plugin reads (name, capability, memory, SM count): FlashInfer reads the SM count.
2. FlashInfer's shared multi-CTA counter buffer, which its implementation allocates on the
   "cuda" device explicitly (not on the current device, so the oracle's meta redirection
   does not reach it), is allocated on the meta device. Nothing reads it before a forward.
3. vllm.model_executor.models.cohere2_moe is imported before the oracle swaps
   torch.cuda.Stream for its stand-in factory during a build: the module evaluates the
   annotation `torch.cuda.Stream | None` at import, and a first import during a build (the
   FlashInfer MoE router imports it lazily) raised TypeError, an artefact of the oracle.

4. The CUTLASS MLA backend module allocates a 128 MiB workspace on the "cuda" device when it
   is imported, which happens while an MLA layer's backend is selected on capability 10.0.
   It is imported once beforehand with that one allocation on the meta device (torch.empty
   is swapped only for the duration of that import). Nothing reads it before a forward.

Then the unmodified oracle runs. The backend choice, the block sizes and every decision
remain vLLM's own code. Run with the 0.34 venv's python, with run_oracle34.py's arguments.
"""

import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "shared", "oracle34"))


def _device_properties(device=None):
    major, _, minor = os.environ.get("ORACLE_VLLM_CAPABILITY", "9.0").partition(".")
    return types.SimpleNamespace(
        name=os.environ.get("ORACLE_VLLM_GPU_NAME", "NVIDIA H200"),
        major=int(major), minor=int(minor or 0),
        total_memory=int(os.environ.get("ORACLE_VLLM_GPU_MEM_BYTES", str(143771 * 2**20))),
        multi_processor_count=int(os.environ.get("ORACLE_VLLM_NUM_SMS", "132")),
    )


def main(argv=None) -> int:
    sys.path.insert(0, ORACLE_DIR)
    import torch
    torch.cuda.get_device_properties = _device_properties
    import run_oracle34
    original_stubs = run_oracle34.install_build_stubs

    def install_build_stubs():
        original_stubs()
        import importlib
        importlib.import_module("vllm.model_executor.models.cohere2_moe")
        fi = importlib.import_module("vllm.v1.attention.backends.flashinfer")
        if not getattr(fi, "_oracle_meta_counter", False):
            def counter_buffer(min_bytes, device):
                if fi._fi_multi_ctas_kv_counter is None or \
                        fi._fi_multi_ctas_kv_counter.numel() < min_bytes:
                    fi._fi_multi_ctas_kv_counter = torch.zeros(
                        min_bytes, dtype=torch.uint8, device="meta")
                return fi._fi_multi_ctas_kv_counter
            fi._get_multi_ctas_kv_counter_buffer = counter_buffer
            fi._oracle_meta_counter = True
            run_oracle34.STUBS_USED["flashinfer_counter"] = "FlashInfer counter buffer on meta"

        if "vllm.v1.attention.backends.mla.cutlass_mla" not in sys.modules:
            # imported once, with its module-level CUDA workspace on meta
            original_empty = torch.empty

            def empty_on_meta(*args, **kwargs):
                device = kwargs.get("device")
                if device is not None and torch.device(device).type == "cuda":
                    kwargs["device"] = "meta"
                return original_empty(*args, **kwargs)
            torch.empty = empty_on_meta
            try:
                importlib.import_module("vllm.v1.attention.backends.mla.cutlass_mla")
            finally:
                torch.empty = original_empty
            run_oracle34.STUBS_USED["cutlass_mla_workspace"] = "CUTLASS MLA workspace on meta"

    run_oracle34.install_build_stubs = install_build_stubs
    return run_oracle34.main(argv)


if __name__ == "__main__":
    sys.exit(main())
