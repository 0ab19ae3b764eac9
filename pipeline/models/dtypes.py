"""Dtype names and element sizes, as vLLM 0.19.0's string tables define them.

enginecfg never imports torch, so a dtype is a string here: the *canonical* name is the
attribute name torch gives the dtype (``"bfloat16"``, ``"uint8"``, ``"float8_e4m3fn"``),
and a *cache dtype string* is one of the keys users pass on vLLM's command line
(``"fp8"``, ``"half"``, ...).  Every fp8 cache string except ``fp8_inc`` is stored as
``uint8`` (one byte); that mapping decides attention and Mamba page sizes, so it is kept
exactly as vLLM has it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from enginecfg.pipeline.errors import ConfigRejectedError

__all__ = [
    "STR_DTYPE_BYTES",
    "DTYPE_NAME_BYTES",
    "canonical_dtype",
    "dtype_size",
    "kv_cache_torch_dtype",
    "attention_kv_dtype",
    "str_dtype",
]

#: Bytes per element of each canonical dtype name that a cache can hold.
DTYPE_NAME_BYTES: Mapping[str, int] = MappingProxyType({
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "uint8": 1,
    "int8": 1,
    "float8_e4m3fn": 1,
})

#: vLLM's string -> torch dtype table (``STR_DTYPE_TO_TORCH_DTYPE``): the string, the
#: canonical name of the dtype it maps to, and that dtype's element size.
STR_DTYPE_BYTES: Mapping[str, tuple[str, int]] = MappingProxyType({
    "float32": ("float32", 4),
    "half": ("float16", 2),
    "float16": ("float16", 2),
    "bfloat16": ("bfloat16", 2),
    "float": ("float32", 4),
    "fp8": ("uint8", 1),
    "fp8_e4m3": ("uint8", 1),
    "fp8_e5m2": ("uint8", 1),
    "int8": ("int8", 1),
    "fp8_inc": ("float8_e4m3fn", 1),
    "fp8_ds_mla": ("uint8", 1),
})


def _strip_torch_prefix(name: str) -> str:
    # "torch.bfloat16" is how a torch dtype prints; accept it so callers can pass either.
    return name[len("torch."):] if name.startswith("torch.") else name


def canonical_dtype(name: str) -> str | None:
    """The canonical dtype name ``name`` stands for as a *model* dtype, or None.

    A canonical name is returned as is; a table key (``"half"``) is mapped.  This is the
    "is it a torch.dtype or a table key" test of vLLM's ``get_kv_cache_torch_dtype``.
    """
    if not isinstance(name, str):
        return None
    name = _strip_torch_prefix(name)
    if name in DTYPE_NAME_BYTES:
        return name
    entry = STR_DTYPE_BYTES.get(name)
    return entry[0] if entry else None


def dtype_size(name: str) -> int:
    """Bytes per element of a canonical dtype name (or a table key).

    Raises KeyError for a name neither table knows: callers pass names they resolved
    themselves, so an unknown one is a programming error, not user input.
    """
    canon = canonical_dtype(name)
    if canon is None:
        raise KeyError(name)
    return DTYPE_NAME_BYTES[canon]


def str_dtype(value: str, *, field: str = "cache dtype") -> str:
    """``STR_DTYPE_TO_TORCH_DTYPE[value]`` as a canonical name.

    vLLM raises a bare KeyError for an unknown string; the rejection carries the key's
    repr (which is what the KeyError prints) and says which strings are known.
    """
    entry = STR_DTYPE_BYTES.get(value) if isinstance(value, str) else None
    if entry is None:
        raise ConfigRejectedError(
            f"{value!r} is not a known {field} (known: {', '.join(STR_DTYPE_BYTES)})",
            field=field, vllm_type="KeyError")
    return entry[0]


def kv_cache_torch_dtype(cache_dtype: str, model_dtype: str) -> str:
    """vLLM's ``get_kv_cache_torch_dtype`` over names.

    ``"auto"`` means the model dtype (a canonical name, or a table key); any other value
    must be a table key.  The rejection texts are vLLM's ValueError texts.
    """
    if not isinstance(cache_dtype, str):
        raise ConfigRejectedError(f"Invalid kv cache dtype: {cache_dtype}")
    if cache_dtype == "auto":
        canon = canonical_dtype(model_dtype)
        if canon is None:
            raise ConfigRejectedError(f"Invalid model dtype: {model_dtype}")
        return canon
    entry = STR_DTYPE_BYTES.get(cache_dtype)
    if entry is None:
        raise ConfigRejectedError(f"Invalid kv cache dtype: {cache_dtype}")
    return entry[0]


def attention_kv_dtype(cache_dtype: str, model_dtype: str) -> str:
    """The attention KV dtype the hybrid alignment sizes pages with.

    ``"auto"`` gives the model dtype; anything else goes through the string table, whose
    miss is vLLM's KeyError (the value is named in the message).
    """
    if cache_dtype == "auto":
        canon = canonical_dtype(model_dtype)
        if canon is None:
            raise ConfigRejectedError(f"Invalid model dtype: {model_dtype}")
        return canon
    return str_dtype(cache_dtype, field="cache_config.cache_dtype")
