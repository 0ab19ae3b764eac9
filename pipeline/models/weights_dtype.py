"""The model dtype vLLM 0.19.0 reads from safetensors headers when the config does not say it.

When neither the config nor its text / vision / encoder sub-config has a ``dtype``
(``torch_dtype``), vLLM collects the dtype of every tensor listed in the safetensors headers
and takes the "common broadcastable" one: the dtype that the most of the others cast to
without loss.  A BF16 checkpoint with a few F32 tensors (Mamba's ``A_log``) therefore reads
as float32, which ``--dtype auto`` then turns into bfloat16.

The cast rules are torch's (``finfo`` / ``iinfo`` ranges and resolution), written down here
as a table so that no torch import is needed.  Names are safetensors' dtype codes; results
are torch dtype names.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["SAFETENSORS_DTYPES", "dtype_from_headers", "common_dtype"]

#: safetensors code -> torch dtype name (the codes safetensors 0.8 maps to torch)
SAFETENSORS_DTYPES: dict[str, str] = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
    "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn", "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2": "float8_e5m2",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "C64": "complex64", "U64": "uint64", "U32": "uint32",
    "U16": "uint16",
}

# torch dtype name -> (precision level, min, max, resolution or None for integers)
# level: 0 bool, 1 integer, 2 floating point, 3 complex (torch's is_floating_point /
# is_complex); min/max/resolution are torch.finfo / torch.iinfo values.
_FACTS: dict[str, tuple[int, float, float, float | None]] = {
    "bool": (0, 0, 1, None),
    "uint8": (1, 0, 255, None),
    "uint16": (1, 0, 65535, None),
    "uint32": (1, 0, 4294967295, None),
    "uint64": (1, 0, 18446744073709551615, None),
    "int8": (1, -128, 127, None),
    "int16": (1, -32768, 32767, None),
    "int32": (1, -2147483648, 2147483647, None),
    "int64": (1, -9223372036854775808, 9223372036854775807, None),
    "float64": (2, -1.7976931348623157e+308, 1.7976931348623157e+308, 1e-15),
    "float32": (2, -3.4028234663852886e+38, 3.4028234663852886e+38, 1e-06),
    "float16": (2, -65504.0, 65504.0, 0.001),
    "bfloat16": (2, -3.3895313892515355e+38, 3.3895313892515355e+38, 0.01),
    "float8_e4m3fn": (2, -448.0, 448.0, 1.0),
    "float8_e4m3fnuz": (2, -240.0, 240.0, 1.0),
    "float8_e5m2": (2, -57344.0, 57344.0, 1.0),
    "float8_e5m2fnuz": (2, -57344.0, 57344.0, 1.0),
    "complex64": (3, 0, 0, None),
}


def _lossless(src: str, tgt: str) -> bool:
    if src == tgt:
        return True
    s_level, s_min, s_max, s_res = _FACTS[src]
    t_level, t_min, t_max, t_res = _FACTS[tgt]
    if s_level != t_level:
        return s_level < t_level
    if s_res is None or t_res is None:  # integers (complex64 is alone at its level)
        return s_min >= t_min and s_max <= t_max
    return s_min >= t_min and s_max <= t_max and s_res >= t_res


def common_dtype(dtypes: Iterable[str]) -> str:
    """The dtype the most of *dtypes* cast to losslessly (vLLM's common broadcastable dtype).

    On a tie vLLM takes whichever comes first in a Python set of torch dtypes, an order
    that is not defined; enginecfg then takes the wider-ranged / finer one deterministically
    (the order of :data:`SAFETENSORS_DTYPES`).
    """
    pool = [d for d in SAFETENSORS_DTYPES.values() if d in set(dtypes)]
    return max(pool, key=lambda tgt: sum(_lossless(src, tgt) for src in pool))


def dtype_from_headers(headers: dict[str, dict[str, Any]]) -> str | None:
    """The common dtype of every tensor in the safetensors *headers*, or None if none is known.

    Every entry of a header counts, ``__metadata__`` included, as vLLM reads them: an entry
    whose ``dtype`` is not a safetensors code torch knows is skipped.
    """
    found: set[str] = set()
    for header in headers.values():
        for info in header.values():
            code = info.get("dtype") if isinstance(info, dict) else None
            if isinstance(code, str) and code in SAFETENSORS_DTYPES:
                found.add(SAFETENSORS_DTYPES[code])
    return common_dtype(found) if found else None
