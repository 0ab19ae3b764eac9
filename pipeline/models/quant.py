"""The checkpoint's quantization config, read as vLLM 0.19.0 reads it.

The config is ``config.json``'s ``quantization_config`` or, where that has none, the whole of
``hf_quant_config.json`` (ModelOpt 0.29 and earlier write their settings there; the loader
puts it on the config, as vLLM does).  While it builds the model config, vLLM names the
method: a ModelOpt producer's nested ``quantization.quant_algo`` makes it ``modelopt`` (the
FP8 algorithms) or ``modelopt_fp4`` (NVFP4) and any other algorithm is refused; else
``quant_method`` lower-cased (a string; anything else crashes it).  After the verification
hooks it builds the quantization config itself; for ModelOpt checkpoints that parse refuses,
in this order: a missing ``quant_algo``, a KV-cache algorithm that is no string, an
exclusion list that is not a list, a ``group_size`` that is no integer, an algorithm it does
not know (any value: it upper-cases ``str(quant_algo)``), then what the method's own class
needs (an NVFP4 ``hf_quant_config.json`` must name its group size, KV-cache algorithm and
exclusions; ``MIXED_PRECISION`` a non-empty ``quantized_layers`` mapping), and it logs that
the format is experimental.  Where vLLM crashes on a value of the wrong type instead, the
typed reads here refuse it as bad input naming the field.
"""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.errors import ConfigRejectedError

__all__ = ["QUANT_FIELD", "MODELOPT_ALGOS", "MODELOPT_FP8_ALGOS", "quant_config", "quant_method", "check_modelopt"]

QUANT_FIELD = "hf_config.quantization_config"
#: the ``quant_algo`` values vLLM's ModelOpt config accepts, in its order (its message lists them)
MODELOPT_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "MXFP8",
                  "MIXED_PRECISION")
#: the FP8 algorithms of ModelOpt (the ``modelopt`` method)
MODELOPT_FP8_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO")
#: what an NVFP4 ``hf_quant_config.json`` (the nested format) must name
_NVFP4_FIELDS = ("group_size", "kv_cache_quant_algo", "exclude_modules")
_FP8_WARNING = ("Detected ModelOpt fp8 checkpoint (quant_algo={}). Please note that the format is "
                "experimental and could change.")
_NVFP4_WARNING = ("Detected ModelOpt NVFP4 checkpoint. Please note that the format is experimental and "
                  "could change in future.")
_MXFP8_WARNING = ("Detected ModelOpt MXFP8 checkpoint. Please note that the format is experimental and "
                  "could change in future.")


def quant_config(hf: Any) -> dict[str, Any] | None:
    """``quantization_config``: a JSON object, or None when absent."""
    return typed.attr(hf, "quantization_config", typed.OBJECT)


def _modelopt_producer_algo(quant: dict[str, Any]) -> Any:
    """The nested ``quantization.quant_algo`` of a config ModelOpt says it produced, or None."""
    producer = typed.key(quant, QUANT_FIELD, "producer", typed.OBJECT, default={})
    # the name is compared with "modelopt": any value
    if typed.key(producer, f"{QUANT_FIELD}.producer", "name", typed.ANY) != "modelopt":
        return None
    inner = typed.key(quant, QUANT_FIELD, "quantization", typed.OBJECT, default={})
    return typed.key(inner, f"{QUANT_FIELD}.quantization", "quant_algo", typed.ANY)  # upper-cased as text


def quant_method(hf: Any) -> str | None:
    """The quantization method as vLLM names it while building the model config (lower case)."""
    quant = quant_config(hf)
    if quant is None:
        return None
    algo = _modelopt_producer_algo(quant)
    if algo is not None:
        upper = str(algo).upper()
        if upper in MODELOPT_FP8_ALGOS:
            return "modelopt"
        if upper == "NVFP4":
            return "modelopt_fp4"
        raise ConfigRejectedError(f"Unknown ModelOpt quant algo: {algo}",
                                  field=f"{QUANT_FIELD}.quantization.quant_algo")
    method = typed.key(quant, QUANT_FIELD, "quant_method", typed.STR, default="")
    return (method or "").lower().replace("compressed_tensors", "compressed-tensors") or None


def check_modelopt(hf: Any, method: str | None) -> list[str]:
    """vLLM's ModelOpt quantization-config parse for the checkpoint's quantization config,
    where the model config's quantization *method* is a ModelOpt one: its refusals are raised,
    its log lines returned (``WARNING`` level, in vLLM's order)."""
    if method not in ("modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed"):
        return []
    quant = quant_config(hf)
    if quant is None:
        return []
    nested = "quantization" in quant
    if nested:  # hf_quant_config.json's format: {"quantization": {"quant_algo": ...}}
        field = f"{QUANT_FIELD}.quantization"
        inner = typed.key(quant, QUANT_FIELD, "quantization", typed.ANY)
        if not isinstance(inner, dict):
            raise ConfigRejectedError("Expected 'quantization' to be a dictionary in config", field=field)
        algo = typed.key(inner, field, "quant_algo", typed.ANY)
        kv_algo = typed.key(inner, field, "kv_cache_quant_algo", typed.ANY)
        exclude = typed.key(inner, field, "exclude_modules", typed.ANY, default=[])
        exclude_field = f"{field}.exclude_modules"
        group = typed.key(inner, field, "group_size", typed.ANY)
    else:  # config.json's format: {"quant_algo": ..., "quant_method": "modelopt"}
        field = QUANT_FIELD
        inner = quant
        algo = typed.key(quant, field, "quant_algo", typed.ANY)
        scheme = typed.key(quant, field, "kv_cache_scheme", typed.ANY)
        kv_algo = "FP8" if isinstance(scheme, dict) and scheme.get("type") == "float" \
            and scheme.get("num_bits") == 8 else None
        exclude = typed.key(quant, field, "ignore", typed.ANY, default=[])
        exclude_field = f"{field}.ignore"
        group = typed.key(quant, field, "group_size", typed.ANY)
    # any value, as vLLM reads them: it tests the algorithm for truth and upper-cases its
    # text, checks the exclusions and the group size with messages of its own
    if not algo:
        raise ConfigRejectedError("Missing 'quant_algo' in quantization config", field=f"{field}.quant_algo")
    algo = str(algo).upper()
    if kv_algo is not None and not isinstance(kv_algo, str):
        raise ConfigRejectedError(f"kv_cache_quant_algo must be a string, got {type(kv_algo)}",
                                  field=f"{field}.kv_cache_quant_algo")
    if not isinstance(exclude, list):
        raise ConfigRejectedError(f"exclude_modules must be a list, got {type(exclude)}", field=exclude_field)
    if group is not None and not isinstance(group, int):
        try:
            int(group)
        except (ValueError, TypeError, OverflowError):
            raise ConfigRejectedError(f"group_size must be an integer, got {type(group)}",
                                      field=f"{field}.group_size") from None
    if algo not in MODELOPT_ALGOS:
        raise ConfigRejectedError(
            f"ModelOpt currently only supports: {list(MODELOPT_ALGOS)} quantizations in vLLM. "
            "Please check the `hf_quant_config.json` file for your model's quant configuration.",
            field=f"{field}.quant_algo")
    if method == "modelopt":
        warnings = [_FP8_WARNING.format(algo)] if "FP8" in algo else []
        if algo not in MODELOPT_FP8_ALGOS:
            raise ConfigRejectedError(f"Unsupported ModelOpt FP8 quant_algo for vLLM: {algo}. Supported: FP8 / "
                                      f"FP8_PER_CHANNEL_PER_TOKEN / FP8_PB_WO.", field=f"{field}.quant_algo")
        return warnings
    if method == "modelopt_fp4":
        if "NVFP4" not in algo:
            return []
        if nested:
            missing = [name for name in _NVFP4_FIELDS if name not in inner]
            if missing:
                raise ConfigRejectedError(f"NVFP4 quantization requires the following fields in "
                                          f"hf_quant_config.json: {missing}", field=field)
        return [_NVFP4_WARNING]
    if method == "modelopt_mxfp8":
        if "MXFP8" not in algo:
            raise ConfigRejectedError("MXFP8 quantization requires a serialized checkpoint. Dynamic "
                                      "quantization is not supported.", field=f"{field}.quant_algo")
        return [_MXFP8_WARNING]
    # MIXED_PRECISION: the per-layer algorithms, and an FP8 and an NVFP4 config beside them
    layers_field = f"{field}.quantized_layers"
    layers = typed.key(inner, field, "quantized_layers", typed.ANY, default={})
    if not layers:
        raise ConfigRejectedError(
            "MIXED_PRECISION quant_algo requires a non-empty 'quantized_layers' mapping in "
            "the quantization config.", field=layers_field)
    typed.check(layers_field, layers, typed.OBJECT, optional=False,
                allowed_text="layer name -> {\"quant_algo\": ...}")
    for name, info in layers.items():
        typed.check(f"{layers_field}.{name}", info, typed.OBJECT, optional=False)
        typed.key(info, f"{layers_field}.{name}", "quant_algo", typed.STR, optional=False)
    return [_FP8_WARNING.format("FP8"), _NVFP4_WARNING]
