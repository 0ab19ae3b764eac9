"""The checkpoint's quantization config, read as vLLM 0.19.0 reads it.

While it builds the model config, vLLM takes ``quantization_config`` (a JSON object) and
lower-cases its ``quant_method`` (a string; anything else crashes it).  After the
verification hooks it builds the quantization config itself; for ModelOpt checkpoints
(``quant_method`` "modelopt") that parse refuses, in this order: a missing ``quant_algo``, an
``ignore`` list that is not a list, a ``group_size`` that is no integer, an algorithm it does
not know (any value: it upper-cases ``str(quant_algo)``), and for ``MIXED_PRECISION`` an empty
``quantized_layers`` mapping.  Where vLLM crashes on a value of the wrong type instead, the
typed reads here refuse it as bad input naming the field.
"""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.errors import ConfigRejectedError

__all__ = ["QUANT_FIELD", "MODELOPT_ALGOS", "quant_config", "quant_method", "check_modelopt"]

QUANT_FIELD = "hf_config.quantization_config"
#: the ``quant_algo`` values vLLM's ModelOpt config accepts, in its order (its message lists them)
MODELOPT_ALGOS = ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4", "MXFP8",
                  "MIXED_PRECISION")


def quant_config(hf: Any) -> dict[str, Any] | None:
    """``quantization_config``: a JSON object, or None when absent."""
    return typed.attr(hf, "quantization_config", typed.OBJECT)


def quant_method(hf: Any) -> str | None:
    """The quantization method as vLLM names it while building the model config (lower case)."""
    quant = quant_config(hf)
    if quant is None:
        return None
    method = typed.key(quant, QUANT_FIELD, "quant_method", typed.STR, default="")
    return (method or "").lower() or None


def check_modelopt(hf: Any) -> None:
    """vLLM's ModelOpt quantization-config parse for a ``config.json`` quantization_config."""
    if quant_method(hf) != "modelopt":
        return
    quant = quant_config(hf)
    # any value, as vLLM reads them: it tests the algorithm for truth and upper-cases its
    # text, checks the exclusions and the group size with messages of its own
    algo = typed.key(quant, QUANT_FIELD, "quant_algo", typed.ANY)
    if not algo:
        raise ConfigRejectedError("Missing 'quant_algo' in quantization config",
                                  field=f"{QUANT_FIELD}.quant_algo")
    algo = str(algo).upper()
    ignore = typed.key(quant, QUANT_FIELD, "ignore", typed.ANY, default=[])
    if not isinstance(ignore, list):
        raise ConfigRejectedError(f"exclude_modules must be a list, got {type(ignore)}",
                                  field=f"{QUANT_FIELD}.ignore")
    group = typed.key(quant, QUANT_FIELD, "group_size", typed.ANY)
    if group is not None and not isinstance(group, int):
        try:
            int(group)
        except (ValueError, TypeError, OverflowError):
            raise ConfigRejectedError(f"group_size must be an integer, got {type(group)}",
                                      field=f"{QUANT_FIELD}.group_size") from None
    if algo not in MODELOPT_ALGOS:
        raise ConfigRejectedError(
            f"ModelOpt currently only supports: {list(MODELOPT_ALGOS)} quantizations in vLLM. "
            "Please check the `hf_quant_config.json` file for your model's quant configuration.",
            field=f"{QUANT_FIELD}.quant_algo")
    if algo == "MIXED_PRECISION":
        layers = typed.key(quant, QUANT_FIELD, "quantized_layers", typed.ANY, default={})
        if not layers:
            raise ConfigRejectedError(
                "MIXED_PRECISION quant_algo requires a non-empty 'quantized_layers' mapping in "
                "the quantization config.", field=f"{QUANT_FIELD}.quantized_layers")
        field = f"{QUANT_FIELD}.quantized_layers"
        typed.check(field, layers, typed.OBJECT, optional=False,
                    allowed_text="layer name -> {\"quant_algo\": ...}")
        for name, info in layers.items():
            typed.check(f"{field}.{name}", info, typed.OBJECT, optional=False)
            typed.key(info, f"{field}.{name}", "quant_algo", typed.STR, optional=False)
