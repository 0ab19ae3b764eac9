"""Small helpers shared by the kernel modules: dtype names, argument checks, sizes.

Kept apart so every kernel module validates its arguments the same way and raises the
project's own :class:`~enginecfg.pipeline.errors.InvalidInputError` naming the argument,
the value given and what is allowed.  This module imports torch; it is only ever
imported by the kernel submodules, never by ``enginecfg.kernels`` itself.
"""

from __future__ import annotations

from typing import Any

import torch

from enginecfg.pipeline.errors import InvalidInputError

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float64": torch.float64,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "float8_e5m2": torch.float8_e5m2,
}

#: dtypes a cache or a recurrent state may be kept in.
STORAGE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: 8-bit float KV-cache dtypes (read with per-tensor scales).
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def as_dtype(value: Any, field: str = "dtype") -> torch.dtype:
    """Accept a torch dtype or one of its usual names ("bfloat16", "bf16", "float32"...)."""
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str) and value.lower() in _DTYPES:
        return _DTYPES[value.lower()]
    raise InvalidInputError.for_value(field, value, ", ".join(sorted(_DTYPES)))


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def require(ok: bool, field: str, given: Any, allowed: str) -> None:
    """Raise InvalidInputError for ``field`` unless ``ok``."""
    if not ok:
        raise InvalidInputError.for_value(field, given, allowed)


def require_shape(t: torch.Tensor, field: str, shape: tuple[int | None, ...]) -> None:
    """Check a tensor's rank and the dimensions given (``None`` = any size)."""
    got = tuple(t.shape)
    ok = len(got) == len(shape) and all(s is None or s == g for s, g in zip(shape, got))
    if not ok:
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise InvalidInputError.for_value(f"{field}.shape", list(got), want)


def require_dtype(t: torch.Tensor, field: str, allowed: tuple[torch.dtype, ...]) -> None:
    """Check a tensor's dtype is one of ``allowed``."""
    if t.dtype not in allowed:
        raise InvalidInputError.for_value(
            f"{field}.dtype", dtype_name(t.dtype), ", ".join(dtype_name(d) for d in allowed)
        )


def require_same_device(field_tensors: dict[str, torch.Tensor | None]) -> torch.device:
    """All tensors given must live on one device; returns it."""
    devices = {name: t.device for name, t in field_tensors.items() if t is not None}
    first = next(iter(devices.values()))
    for name, dev in devices.items():
        if dev != first:
            raise InvalidInputError.for_value(f"{name}.device", str(dev), str(first))
    return first


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; a small stand-in elsewhere.

    Used only to size split-K work; in Triton's CPU interpreter the value merely decides
    how many splits the heuristic picks, so a small number keeps tests quick.
    """
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4
