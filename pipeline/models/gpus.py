"""The GPUs deployments run on, as the figures and the start-up step need them.

A GPU is an input like the engine arguments: its memory sizes the KV cache (vLLM takes a share
of the memory the device reports, ``--gpu-memory-utilization``), and its compute capability
decides which attention backends exist on it when the engine starts (FlashAttention 3 on
Hopper, FlashInfer first on Blackwell, no FP8 KV cache on Triton below 8.9, ...).

``memory_bytes`` is the total the CUDA driver reports for the card (what PyTorch's
``torch.cuda.mem_get_info()`` gives as its second value, and what vLLM 0.19.0's worker takes
as the card's total, ``MemorySnapshot.total_memory``), not the marketing figure.  Where a
figure was read off a real card the row says so in ``measured``: the H200 reports
150,109,880,320 bytes (139.80 GiB) to CUDA, 615 MiB less than the 143,771 MiB ``nvidia-smi``
lists, which the driver keeps for itself.  The other rows hold the totals ``nvidia-smi``
lists for the card (``listed``), which overstate what CUDA reports by about that much; a
figure read on the card itself (``--gpu-memory``) is the exact one.

``free_at_start_bytes`` is what the card had free once a process had created its CUDA
context on an otherwise idle card (measured where ``measured`` says so): vLLM's worker
refuses to start when that is below what ``--gpu-memory-utilization`` requests.
"""

from __future__ import annotations

from typing import Callable

import attrs

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.models.backends import head_size_rules
from enginecfg.pipeline.suggest import did_you_mean

__all__ = ["preset_of", "Gpu", "GPUS", "DEFAULT_GPU", "find_gpu", "custom_gpu", "BACKEND_HEAD_SIZES", "backend_serves",
           "selected_backend_error"]

_MIB = 2**20


@attrs.frozen
class Gpu:
    """One GPU model: its name, the memory the driver reports, its compute capability."""

    #: the preset's name as ``--gpu`` takes it (``H200``, ``H100-80GB``, ...)
    name: str
    #: what the device reports as its total memory, in bytes
    memory_bytes: int
    #: compute capability ``(major, minor)``, e.g. ``(9, 0)`` for Hopper
    capability: tuple[int, int]
    #: the name the device reports (``torch.cuda.get_device_name()``)
    device_name: str = ""
    #: other spellings ``--gpu`` accepts
    aliases: tuple[str, ...] = ()
    #: where the memory figure comes from (a measurement on a real card, or the card's listing)
    measured: str = ""
    #: the total ``nvidia-smi`` lists for the card, in MiB
    listed_mib: int = 0
    #: free memory once a process's CUDA context exists on an idle card (None: not measured)
    free_at_start_bytes: int | None = None
    #: the GPU has no memory of its own and shares the system's (DGX Spark): its total is that
    #: pool, and vLLM reads the free memory from the OS
    unified: bool = False

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    @property
    def capability_text(self) -> str:
        return f"{self.capability[0]}.{self.capability[1]}"

    @property
    def basis(self) -> str:
        """Where ``memory_bytes`` comes from, in words."""
        return self.measured or f"as nvidia-smi lists the card ({self.listed_mib:,} MiB)"

    def to_dict(self) -> dict:
        return {"name": self.name, "device_name": self.device_name, "memory_bytes": self.memory_bytes,
                "memory_gib": round(self.memory_gib, 2), "capability": self.capability_text,
                "basis": self.basis, "aliases": list(self.aliases), "unified": self.unified}


def _gpu(name: str, mib: int, cap: tuple[int, int], device: str, *aliases: str, measured: str = "",
         memory_bytes: int | None = None, free_at_start: int | None = None, unified: bool = False) -> Gpu:
    return Gpu(name, memory_bytes if memory_bytes is not None else mib * _MIB, cap, device, tuple(aliases),
               measured, mib, free_at_start, unified)


#: measured on an NVIDIA H200 (driver 580.159.04, PyTorch 2.11.0+cu130): mem_get_info() right
#: after the CUDA context was created
_H200_MEASURED = ("torch.cuda.mem_get_info() on an NVIDIA H200, driver 580.159.04: 150,109,880,320 bytes "
                  "total; 149,557,477,376 free once the CUDA context exists")

#: deviceQuery on an RTX 3090 (CUDA 11.8): "Total amount of global memory: 24268 MBytes (25447170048
#: bytes)", the figure ``torch.cuda.get_device_properties(0).total_memory`` reports (a public setup
#: guide; the same bytes appear in several projects' hard-coded RTX 3090 totals)
_RTX3090_MEASURED = ("deviceQuery / torch.cuda.get_device_properties() on an RTX 3090 (driver for CUDA 11.8): "
                     "25,447,170,048 bytes (24,268 MiB); nvidia-smi lists 24,576 MiB")
#: deviceQuery on an RTX 5090 (driver for CUDA 12.8), NVIDIA/nccl issue #1637: "32120 MBytes
#: (33680457728 bytes)"; another host with driver 570.133.04 printed 33,677,180,928
_RTX5090_MEASURED = ("deviceQuery on an RTX 5090, driver for CUDA 12.8 (github.com/NVIDIA/nccl/issues/1637): "
                     "33,680,457,728 bytes (32,120 MiB); another driver reports 3 MiB less")
#: ``torch.cuda.get_device_properties()`` on an L40S printed
#: ``_CudaDeviceProperties(name='NVIDIA L40S', major=8, minor=9, total_memory=45589MB, ...)`` (a public
#: notebook; torch prints whole MiB), 479 MiB below the 46,068 MiB nvidia-smi lists
_L40S_MEASURED = ("torch.cuda.get_device_properties() on an L40S: total_memory=45589MB (whole MiB); nvidia-smi "
                  "lists 46,068 MiB")
#: DGX Spark's GB10 has no memory of its own: CUDA reports the unified LPDDR5X pool, 121.69 GiB as
#: vLLM's start-up check prints it (vLLM reads the free memory from the OS there, not from CUDA);
#: nvidia-smi lists no memory for it
_GB10_BYTES = round(121.69 * 2**30)
_GB10_MEASURED = ("the unified memory pool CUDA reports on a DGX Spark, 121.69 GiB as vLLM's start-up message "
                  "prints it (rounded to 0.01 GiB); shared with the CPU, and vLLM takes the OS's available "
                  "memory as the free memory there")

#: the cards deployments use, by preset name (memory as the driver reports it where measured,
#: else as ``nvidia-smi`` lists it)
GPUS: dict[str, Gpu] = {g.name: g for g in (
    _gpu("H200", 143771, (9, 0), "NVIDIA H200", "H200-141GB", measured=_H200_MEASURED,
         memory_bytes=150_109_880_320, free_at_start=149_557_477_376),
    _gpu("H100-80GB", 81559, (9, 0), "NVIDIA H100 80GB HBM3", "H100", "H100-SXM"),
    _gpu("H100-PCIE", 81559, (9, 0), "NVIDIA H100 PCIe"),
    _gpu("H100-NVL", 95830, (9, 0), "NVIDIA H100 NVL"),
    _gpu("H20", 97871, (9, 0), "NVIDIA H20"),
    _gpu("B200", 183359, (10, 0), "NVIDIA B200"),
    _gpu("A100-80GB", 81920, (8, 0), "NVIDIA A100-SXM4-80GB", "A100"),
    _gpu("A100-40GB", 40960, (8, 0), "NVIDIA A100-SXM4-40GB"),
    _gpu("L40S", 46068, (8, 9), "NVIDIA L40S", measured=_L40S_MEASURED, memory_bytes=45589 * _MIB),
    _gpu("L40", 46068, (8, 9), "NVIDIA L40"),
    _gpu("L4", 23034, (8, 9), "NVIDIA L4"),
    _gpu("A10G", 23028, (8, 6), "NVIDIA A10G", "A10"),
    _gpu("RTX-4090", 24564, (8, 9), "NVIDIA GeForce RTX 4090", "4090"),
    _gpu("RTX-3090", 24576, (8, 6), "NVIDIA GeForce RTX 3090", "3090", measured=_RTX3090_MEASURED,
         memory_bytes=25_447_170_048),
    _gpu("RTX-5090", 32607, (12, 0), "NVIDIA GeForce RTX 5090", "5090", measured=_RTX5090_MEASURED,
         memory_bytes=33_680_457_728),
    _gpu("RTX-A6000", 49140, (8, 6), "NVIDIA RTX A6000", "A6000"),
    _gpu("RTX-PRO-6000", 97887, (12, 0), "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
         "RTX PRO 6000 Blackwell", "PRO6000"),
    _gpu("GB10", 0, (12, 1), "NVIDIA GB10", "DGX Spark", "Spark", measured=_GB10_MEASURED,
         memory_bytes=_GB10_BYTES, unified=True),
    _gpu("GB200", 189471, (10, 0), "NVIDIA GB200"),
    _gpu("GB300", 284208, (10, 3), "NVIDIA GB300"),
)}

#: the GPU every figure assumes unless told otherwise
DEFAULT_GPU = GPUS["H200"]


def _norm(text: str) -> str:
    return "".join(ch for ch in text.upper() if ch.isalnum())


#: names found before, as given -> their preset (the presets are frozen values, never changed)
_FOUND: dict[str, Gpu] = {}


def find_gpu(name: str) -> Gpu:
    """The preset called *name* (case, ``-``, ``_`` and spaces do not matter; an alias or the
    device's own name works too); an unknown name is refused with the presets listed."""
    if name.__class__ is str:
        found = _FOUND.get(name)
        if found is not None:
            return found
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError.for_value("gpu", name, "one of " + ", ".join(GPUS), flag="--gpu")
    key = _norm(name)
    for gpu in GPUS.values():
        if key in {_norm(gpu.name), _norm(gpu.device_name), *(_norm(a) for a in gpu.aliases)}:
            if name.__class__ is str and len(_FOUND) < 256:
                _FOUND[name] = gpu
            return gpu
    raise InvalidInputError(f"invalid GPU (--gpu): got {name!r}{did_you_mean(name, GPUS)}; allowed: "
                            + ", ".join(f"{g.name} ({g.memory_gib:.1f} GiB, sm {g.capability_text})"
                                        for g in GPUS.values())
                            + "; or --gpu-memory GIB for another card", field="gpu")


def preset_of(gpu: Gpu) -> tuple[str, float | None]:
    """The preset a card is, and its memory in GiB where it is not the preset's own (a card
    made by :func:`custom_gpu`): what ``--gpu`` and ``--gpu-memory`` would say for it."""
    if gpu.name in GPUS and GPUS[gpu.name] == gpu:
        return gpu.name, None
    base = gpu.name.split(" (", 1)[0]
    if base in GPUS and GPUS[base].capability == gpu.capability:
        return base, gpu.memory_bytes / 2**30
    raise InvalidInputError(f"invalid GPU: got {gpu.name!r}, which is neither a preset nor made from one by "
                            "custom_gpu(); allowed: " + ", ".join(GPUS), field="gpu")


def custom_gpu(memory_gib: float, like: Gpu = DEFAULT_GPU) -> Gpu:
    """A card of *memory_gib* GiB that starts the engine as *like* does (``--gpu-memory``)."""
    return attrs.evolve(like, name=f"{like.name} ({memory_gib:g} GiB)", memory_bytes=int(memory_gib * 2**30),
                        aliases=(), measured=f"given with --gpu-memory {memory_gib:g}", free_at_start_bytes=None)


#: the attention head sizes each backend vLLM 0.19.0 lets a caller choose can serve (its
#: ``supports_head_size``, ``v1/attention/backends``): the selector's table's, and those of the
#: backends it never picks (:func:`enginecfg.pipeline.models.backends.head_size_rules`)
BACKEND_HEAD_SIZES: dict[str, Callable[[int], bool]] = head_size_rules()


def backend_serves(backend: str, head_size: int) -> bool | None:
    """Whether the attention *backend* serves layers of *head_size* (None: not known here)."""
    check = BACKEND_HEAD_SIZES.get(backend)
    return None if check is None else check(head_size)


def selected_backend_error(backend: str, head_size: int) -> str | None:
    """The error vLLM 0.19.0 stops with when it builds an attention layer of *head_size* with a
    *backend* the caller chose that cannot serve it (``get_attn_backend_cls``), or None."""
    if backend_serves(backend, head_size) is not False:
        return None
    return (f"ValueError: Selected backend AttentionBackendEnum.{backend} is not valid for this "
            f"configuration. Reason: ['head_size not supported']")
