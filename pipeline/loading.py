"""Load a model config and derive the model facts exactly as vLLM 0.19.0 does.

``load_pretrained`` reads a local ``config.json`` (or a folder holding one), validates the
engine arguments, obtains the transformers view of the config (see :mod:`.hfcache`: built
once per config content, never in this process unless transformers is already imported)
and derives ``ModelConfig``: architecture, text config, dtype, max_model_len, head size,
KV heads, MLA, hybrid / attention-free, Mamba prefix-caching support, chunk size.  The
steps that depend on pooling decisions (chunked prefill, prefix caching) are stages.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from enginecfg.pipeline import architectures, mamba_state
from enginecfg.pipeline.config import (
    ATTENTION_BACKENDS, CACHE_DTYPES, MAMBA_CACHE_MODES, MAMBA_DTYPES, AttentionConfig,
    CacheConfig, EngineConfig, ModelConfig, ParallelConfig, PoolerConfig, SchedulerConfig,
)
from enginecfg.pipeline.dtypes import canonical_dtype
from enginecfg.pipeline.errors import ConfigRejectedError, EngineCfgError, InvalidInputError
from enginecfg.pipeline.hfcache import snapshot_for, snapshot_for_bytes
from enginecfg.pipeline.hfsnapshot import is_snapshot, snapshot_of
from enginecfg.pipeline.hfview import HFConfigView

__all__ = ["load_pretrained", "load_hf_config", "ENGINE_ARGS", "parse_engine_args"]

# -- engine arguments (vLLM EngineArgs names) ------------------------------------------------

_INT, _BOOL, _STR = "int", "bool", "str"

#: name -> (kind, allowed choices or None, may be None, CLI flag)
ENGINE_ARGS: dict[str, tuple[str, tuple | None, bool, str]] = {
    "block_size": (_INT, None, True, "--block-size"),
    "kv_cache_dtype": (_STR, CACHE_DTYPES, False, "--kv-cache-dtype"),
    "enable_prefix_caching": (_BOOL, None, True, "--enable-prefix-caching"),
    "enable_chunked_prefill": (_BOOL, None, True, "--enable-chunked-prefill"),
    "mamba_cache_mode": (_STR, MAMBA_CACHE_MODES, False, "--mamba-cache-mode"),
    "mamba_block_size": (_INT, None, True, "--mamba-block-size"),
    "mamba_ssm_cache_dtype": (_STR, MAMBA_DTYPES, False, "--mamba-ssm-cache-dtype"),
    "mamba_cache_dtype": (_STR, MAMBA_DTYPES, False, "--mamba-cache-dtype"),
    "calculate_kv_scales": (_BOOL, None, False, "--calculate-kv-scales"),
    "attention_backend": (_STR, None, True, "--attention-backend"),
    "tensor_parallel_size": (_INT, None, False, "-tp/--tensor-parallel-size"),
    "pipeline_parallel_size": (_INT, None, False, "-pp/--pipeline-parallel-size"),
    "max_model_len": (_INT, None, True, "--max-model-len"),
    "dtype": (_STR, ("auto", "half", "float16", "bfloat16", "float", "float32"), False, "--dtype"),
    "max_num_batched_tokens": (_INT, None, True, "--max-num-batched-tokens"),
}


def _bad(name: str, value: Any, allowed: str) -> InvalidInputError:
    flag = ENGINE_ARGS[name][3]
    return InvalidInputError(f"invalid {name} ({flag}): got {value!r}; allowed: {allowed}", field=name)


def parse_engine_args(engine_args: dict[str, Any]) -> dict[str, Any]:
    """Type-check the caller's engine arguments; returns them normalised (backend upper-cased)."""
    out: dict[str, Any] = {}
    for name, value in engine_args.items():
        if name not in ENGINE_ARGS:
            raise InvalidInputError(
                f"unknown engine argument {name!r}; known: {', '.join(sorted(ENGINE_ARGS))}", field=name)
        kind, choices, nullable, _ = ENGINE_ARGS[name]
        if value is None:
            if not nullable:
                raise _bad(name, value, "a value (None is not allowed)")
            out[name] = None
            continue
        if kind == _INT:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _bad(name, value, "an integer")
            if name == "max_model_len":
                if value != -1 and value < 1:
                    raise _bad(name, value, "a positive integer, or -1 for the model's maximum")
            elif value < 1:
                raise _bad(name, value, "a positive integer")
        elif kind == _BOOL:
            if not isinstance(value, bool):
                raise _bad(name, value, "true or false")
        else:
            if not isinstance(value, str):
                raise _bad(name, value, "a string" + (f": one of {', '.join(choices)}" if choices else ""))
            if name == "attention_backend":
                value = _parse_backend(value)
            elif name == "dtype" and value not in choices:
                raise InvalidInputError(
                    f"Unknown dtype: {value!r}: invalid dtype (--dtype); allowed: {', '.join(choices)}",
                    field="dtype")
            elif choices is not None and value not in choices:
                raise _bad(name, value, ", ".join(choices))
        out[name] = value
    return out


def _parse_backend(value: str) -> str | None:
    if value in ("", "None") or value.lower() == "auto":
        return None
    name = value.upper()
    if name not in ATTENTION_BACKENDS:
        raise InvalidInputError(
            f"Unknown attention backend: {name!r}. Valid options are: {', '.join(ATTENTION_BACKENDS)} "
            f"(attention_backend, --attention-backend)", field="attention_backend")
    return name


# -- reading the config file -----------------------------------------------------------------

def _config_file(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidInputError(f"invalid model: got {path!r}; allowed: a path to a model folder or config.json",
                                field="model")
    p = Path(path)
    file = p / "config.json" if p.is_dir() else p
    if not file.exists():
        what = f"{p} has no config.json" if p.is_dir() else f"{p} does not exist"
        raise InvalidInputError(f"invalid model: {what}; allowed: a model folder holding config.json, "
                                f"or a config.json file", field="model")
    return file


def _read_bytes(file: Path) -> bytes:
    """The file's bytes; a FIFO or device is refused, not read (it would block or never end).

    Opened non-blocking and checked with ``fstat`` on the open descriptor, so a file swapped
    for a FIFO after the check cannot hang the read either.
    """
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise InvalidInputError(f"invalid model: cannot read {file}: not a regular file; allowed: "
                                        f"a config.json file", field="model")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read()
        finally:
            os.close(fd)
    except OSError as exc:
        raise InvalidInputError(f"invalid model: cannot read {file}: {exc.strerror or exc}", field="model") from None


def _parse_config(file: Path, raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)  # Python's json accepts Infinity/NaN, as published hub files need
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"invalid config.json: {file} is not UTF-8 text ({exc.reason})",
                                field="config.json") from None
    except RecursionError:
        raise InvalidInputError(f"invalid config.json: {file} is nested too deeply to read; allowed: "
                                f"a JSON object of ordinary depth", field="config.json") from None
    except ValueError as exc:
        msg = getattr(exc, "msg", str(exc))
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise InvalidInputError(f"invalid config.json: {file} is not valid JSON: {msg}{where}",
                                field="config.json") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"invalid config.json: {file} holds a JSON {type(data).__name__}; "
                                f"allowed: a JSON object", field="config.json")
    return data


def load_pretrained(path: Any, engine_args: dict[str, Any]) -> EngineConfig:
    args = parse_engine_args(engine_args)
    file = _config_file(path)
    raw = _read_bytes(file)
    parsed: list[dict[str, Any]] = []

    def parse() -> dict[str, Any]:
        if not parsed:
            parsed.append(_parse_config(file, raw))
        return parsed[0]
    snap = snapshot_for_bytes(raw, parse)
    return _build(str(path), parsed[0] if parsed else None, snap, engine_args, args)


def _json_copy(config: dict[str, Any]) -> dict[str, Any]:
    """The caller's dict read as its config.json would be (the transformers worker sees it so).

    A cycle, nesting deeper than JSON decoding allows, or a key JSON cannot hold is bad input,
    not a ``ValueError`` / ``RecursionError`` / ``TypeError`` from deep inside the loader.
    """
    try:
        return json.loads(json.dumps(config, default=str))
    except RecursionError:
        reason = "it is nested too deeply"
    except (ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split())
    raise InvalidInputError(f"invalid hf_config: {reason}; allowed: a dict of JSON data", field="hf_config")


def load_hf_config(config: Any, engine_args: dict[str, Any]) -> EngineConfig:
    args = parse_engine_args(engine_args)
    if isinstance(config, dict):
        return _build("<dict>", _json_copy(config), None, engine_args, args)
    if hasattr(config, "to_dict") and hasattr(config, "attribute_map"):
        snap = snapshot_of(config)
        try:
            from enginecfg.pipeline._hfworker import default_architecture

            snap["default_architecture"] = default_architecture(snap.get("model_type"))
        except Exception:
            snap["default_architecture"] = None
        model = str(getattr(config, "_name_or_path", "") or "<hf_config>")
        return _build(model, None, snap, engine_args, args)
    raise InvalidInputError(f"invalid hf config: got {type(config).__name__}; allowed: a transformers "
                            f"PretrainedConfig or a dict", field="hf_config")


# -- the vLLM 0.19 view of a transformers 5.23 snapshot --------------------------------------

def _vllm_view(snap: dict[str, Any], raw: dict[str, Any] | None) -> dict[str, Any]:
    """The snapshot as vLLM 0.19.0 read it, with per-layer attributes read back globally.

    transformers 5.23 made Gemma 4's ``head_dim`` / ``num_key_value_heads`` per-layer
    (reading them globally raises) and dropped ``global_head_dim``; vLLM 0.19.0 read them
    as plain attributes (transformers 5.5).  The sliding-attention layers carry the global
    ``head_dim`` / ``num_key_value_heads`` values, the full-attention layers the
    ``global_head_dim`` / ``num_global_key_value_heads`` ones.
    """
    cached = snap.get("_vllm_view")
    if cached is not None:
        return cached
    view = copy.deepcopy(snap)
    _unlayer(view, raw)
    snap["_vllm_view"] = view
    return view


def _unlayer(snap: dict[str, Any], raw: dict[str, Any] | None) -> None:
    for name, value in snap["attrs"].items():
        if is_snapshot(value):
            _unlayer(value, raw.get(name) if isinstance(raw, dict) and isinstance(raw.get(name), dict) else None)
    per_layer = snap.get("per_layer")
    raises = snap.get("raises") or {}
    if not per_layer or not raises:
        return
    layer_types = snap["attrs"].get("layer_types") or []
    sliding = next((i for i, t in enumerate(layer_types) if t == "sliding_attention"), None)
    full = next((i for i, t in enumerate(layer_types) if t == "full_attention"), None)
    first = sliding if sliding is not None else 0
    for name in list(raises):
        if name in per_layer[first]:
            snap["attrs"][name] = per_layer[first][name]
            del raises[name]
    if full is not None and full < len(per_layer):
        layer = per_layer[full]
        if "head_dim" in layer and "global_head_dim" not in snap["attrs"]:
            snap["attrs"]["global_head_dim"] = layer["head_dim"]
        if "num_key_value_heads" in layer and "num_global_key_value_heads" not in snap["attrs"]:
            snap["attrs"]["num_global_key_value_heads"] = layer["num_key_value_heads"]


# -- derivations -----------------------------------------------------------------------------

_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
_NO_FP16_MODEL_TYPES = {"gemma2", "gemma3", "gemma3_text", "plamo2", "glm4"}
_ZERO_HEAD_MODEL_TYPES = {"mamba", "falcon_mamba", "timm_wrapper", "medusa"}
_MLA_MODEL_TYPES = {"AXK1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp", "glm_moe_dsa",
                    "glm4_moe_lite", "glm4_moe_lite_mtp", "kimi_k2", "kimi_linear", "longcat_flash",
                    "pangu_ultra_moe", "pangu_ultra_moe_mtp", "bailing_hybrid"}
_USER_DTYPES = {"half": "float16", "float16": "float16", "float": "float32", "float32": "float32",
                "bfloat16": "bfloat16"}
_MODELOPT_METHODS = {"NVFP4": ("modelopt_fp4", ("bfloat16", "float16", "float8_e4m3fn")),
                     "MIXED_PRECISION": ("modelopt_mixed", ("bfloat16", "float16"))}


def _field(view: HFConfigView, name: str) -> str:
    path = view._path
    return f"hf_config.{path + '.' if path else ''}{name}"


def _number(view: HFConfigView, name: str, value: Any, *, allow_float: bool = False) -> Any:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if allow_float:
        ok = ok or (isinstance(value, float) and not math.isnan(value))
    if not ok:
        raise InvalidInputError.for_value(_field(view, name), value,
                                          "a number" if allow_float else "an integer")
    return value


def _opt_int(view: HFConfigView, name: str, default: Any = None) -> Any:
    value = view.get(name, default)
    if value is None:
        return None
    return _number(view, name, value)


def _config_dtype(hf: HFConfigView, text: HFConfigView) -> str:
    candidates = [(hf, "dtype"), (text, "dtype")]
    for sub in ("vision_config", "encoder_config"):
        sv = hf.get(sub)
        if isinstance(sv, HFConfigView):
            candidates.append((sv, "dtype"))
    for view, name in candidates:
        value = view.get(name)
        if value is None:
            continue
        canon = canonical_dtype(value) if isinstance(value, str) else None
        if canon not in ("float32", "float16", "bfloat16"):
            raise InvalidInputError.for_value(_field(view, "torch_dtype"), value,
                                              "float32, float16 or bfloat16")
        return canon
    return "float32"


def _resolve_dtype(user: str, hf: HFConfigView, text: HFConfigView, model_type: str | None,
                   pooling: bool, messages: list) -> str:
    config_dtype = _config_dtype(hf, text)
    supported = ["bfloat16", "float16", "float32"]
    if model_type in _NO_FP16_MODEL_TYPES:
        supported.remove("float16")
    if user == "auto":
        preferred = "float16" if pooling and "float16" in supported else supported[0]
        if config_dtype == "float32":
            dtype = preferred
        elif config_dtype in supported:
            dtype = config_dtype
        else:
            messages.append(("WARNING", f"Your device NVIDIA H200 doesn't support torch.{config_dtype}. "
                                        f"Falling back to torch.{preferred} for compatibility."))
            dtype = preferred
    else:
        dtype = _USER_DTYPES[user]
    if dtype == "float16" and model_type in _NO_FP16_MODEL_TYPES:
        raise ConfigRejectedError(
            f"The model type '{model_type}' does not support float16. Reason: Numerical instability. "
            f"Please use bfloat16 or float32 instead.", field="dtype")
    if dtype != config_dtype:
        if dtype == "float32":
            messages.append(("INFO", f"Upcasting torch.{config_dtype} to torch.{dtype}."))
        elif config_dtype == "float32":
            messages.append(("INFO", f"Downcasting torch.{config_dtype} to torch.{dtype}."))
        else:
            messages.append(("WARNING", f"Casting torch.{config_dtype} to torch.{dtype}."))
    return dtype


def _rope_entries(rope: Any) -> list[dict]:
    if not isinstance(rope, dict):
        return []
    if rope and all(isinstance(v, dict) for v in rope.values()):
        return list(rope.values())
    return [rope]


def _max_model_len(text: HFConfigView, user: int | None, messages: list) -> int:
    derived = math.inf
    key = None
    for name in _MAX_LEN_KEYS:
        value = text.get(name)
        if value is None:
            continue
        value = _number(text, name, value, allow_float=True)
        if value < derived:
            derived, key = value, name
    model_max_length = text.get("model_max_length")
    if model_max_length:
        model_max_length = _number(text, "model_max_length", model_max_length, allow_float=True)
        derived, key = model_max_length, "model_max_length"
    rope = text.get("rope_parameters")
    longrope = False
    model_type = text.get("model_type") or ""
    if rope is not None and "gemma3" not in str(model_type):
        factor = 1.0
        for entry in _rope_entries(rope):
            rope_type = entry.get("rope_type", entry.get("type"))
            if rope_type == "longrope":
                longrope = True
            if rope_type in ("su", "longrope", "llama3"):
                continue
            if "factor" in entry:
                factor = entry["factor"]
                if factor is None:
                    messages.append(("WARNING", "rope_parameters factor is None; using 1.0"))
                    factor = 1.0
                factor = _number(text, "rope_parameters.factor", factor, allow_float=True)
            if rope_type == "yarn":
                omp = entry.get("original_max_position_embeddings")
                if omp is not None:
                    derived = _number(text, "rope_parameters.original_max_position_embeddings", omp,
                                      allow_float=True)
        derived = derived * factor
    if math.isinf(derived):
        if user is not None and user != -1:
            return user
        messages.append(("WARNING", "The model's config.json does not contain any of the keys to determine "
                                    "the original maximum length of the model. Assuming the model's maximum "
                                    "length is 2048."))
        return 2048
    if user is None or user == -1:
        if longrope and text.get("original_max_position_embeddings") is not None:
            return int(_number(text, "original_max_position_embeddings",
                               text.get("original_max_position_embeddings"), allow_float=True))
        return int(derived)
    if user > derived:
        mml = text.get("model_max_length")
        if not (isinstance(mml, (int, float)) and not isinstance(mml, bool) and mml >= user):
            raise ConfigRejectedError(
                f"User-specified max_model_len ({user}) is greater than the derived max_model_len "
                f"({key}={float(derived)} or model_max_length={mml} in model's config.json). To allow "
                f"overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. "
                f"VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
                f"relative position encoding (RoPE), positions exceeding derived_max_model_len lead to "
                f"nan. If the model uses absolute position encoding, positions exceeding "
                f"derived_max_model_len will cause a CUDA array out-of-bounds error.",
                field="max_model_len")
    return int(user)


def _head_size(hf: HFConfigView, text: HFConfigView, top_model_type: str | None, is_mla: bool) -> int:
    if top_model_type in _ZERO_HEAD_MODEL_TYPES:
        return 0
    if top_model_type == "zamba2":
        return _opt_int(hf, "attention_head_dim", 0) or 0
    if top_model_type in ("gemma4", "gemma4_text"):
        hd, ghd = text.get("head_dim", 0), text.get("global_head_dim", 0)
        if hd is None or ghd is None:
            raise InvalidInputError(
                f"invalid {_field(text, 'head_dim' if hd is None else 'global_head_dim')}: got None; "
                f"allowed: an integer", field=_field(text, "head_dim" if hd is None else "global_head_dim"))
        size = max(_number(text, "head_dim", hd), _number(text, "global_head_dim", ghd))
        if size:
            return size
    if is_mla:
        kv_lora = _number(text, "kv_lora_rank", text.get("kv_lora_rank"))
        return kv_lora + (_opt_int(text, "qk_rope_head_dim", 0) or 0)
    for name in ("head_dim", "hidden_size_per_head"):
        value = _opt_int(text, name)
        if value is not None:
            return value
    heads = _opt_int(text, "num_attention_heads")
    if heads == 0:
        return 0
    hidden = _opt_int(text, "hidden_size")
    if heads is None or hidden is None:
        missing = "num_attention_heads" if heads is None else "hidden_size"
        raise InvalidInputError(f"invalid {_field(text, missing)}: absent; allowed: an integer "
                                f"(needed to derive the attention head size)", field=_field(text, missing))
    return hidden // heads


def _total_kv_heads(text: HFConfigView, top_model_type: str | None) -> int:
    if top_model_type in _ZERO_HEAD_MODEL_TYPES:
        return 0
    if top_model_type == "falcon" and text.get("multi_query") and not text.get("new_decoder_architecture"):
        return 1
    for name in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num"):
        if text.has(name):
            value = text.get(name)
            if value is None:
                raise InvalidInputError.for_value(_field(text, name), None, "an integer")
            return _number(text, name, value)
    return _opt_int(text, "num_attention_heads", 0) or 0


def _resolve_kv_cache_dtype(hf: HFConfigView, user: str, messages: list) -> str:
    if user != "auto":
        return user
    quant = hf.get("quantization_config")
    if not isinstance(quant, dict):
        return user
    method = quant.get("quant_method")
    if not (isinstance(method, str) and method.startswith("modelopt")):
        return user
    inner = quant.get("quantization") if isinstance(quant.get("quantization"), dict) else {}
    algo = None
    for value in (inner.get("kv_cache_scheme"), quant.get("kv_cache_scheme"),
                  inner.get("kv_cache_quant_algo"), quant.get("kv_cache_quant_algo")):
        if value:
            algo = value
            break
    if algo is None:
        return "auto"
    if isinstance(algo, str) and algo.lower() == "fp8":
        return "fp8_e4m3"
    if isinstance(algo, dict) and algo.get("num_bits") == 8 and algo.get("type") == "float" \
            and algo.get("dynamic") is False:
        return "fp8_e4m3"
    messages.append(("WARNING", f"kv cache quantization algorithm {algo!r} of the checkpoint is not "
                                f"supported; using kv_cache_dtype 'auto'"))
    return "auto"


def _quantization(hf: HFConfigView) -> tuple[str | None, tuple[str, ...] | None]:
    quant = hf.get("quantization_config")
    if not isinstance(quant, dict):
        return None, None
    method = quant.get("quant_method")
    if method == "modelopt":
        algo = quant.get("quant_algo")
        if algo in _MODELOPT_METHODS:
            return _MODELOPT_METHODS[algo]
    return (method if isinstance(method, str) else None), None


_FIELD_ERROR = re.compile(r"Validation error for field '([^']+)'")


def _raise_load_error(err: dict[str, Any]) -> None:
    """transformers refused the config: a field of the wrong type is bad input (naming the
    field); any other refusal (a class-level validator, as vLLM saw too) is vLLM's answer."""
    message = err["message"]
    m = _FIELD_ERROR.search(message)
    if m:
        raise InvalidInputError(f"invalid hf_config.{m[1]} in config.json: " + " ".join(message.split()),
                                field=f"hf_config.{m[1]}", stage="loading")
    raise ConfigRejectedError(message, field="config.json", stage="loading",
                              vllm_type=err.get("type", "ValueError"))


def _build(model: str, raw: dict[str, Any] | None, snap: dict[str, Any] | None,
           given_args: dict[str, Any], args: dict[str, Any]) -> EngineConfig:
    if snap is None:
        snap = snapshot_for(raw)
    if "error" in snap:
        _raise_load_error(snap["error"])
    messages: list[tuple[str, str]] = []
    hf = HFConfigView(_vllm_view(snap, raw))
    text = hf.get_text_config()
    if text is not hf and not text.has("num_attention_heads"):
        raise ConfigRejectedError(
            "The text_config extracted from the model config does not have `num_attention_heads` attribute. "
            "This indicates a mismatch between the model config and vLLM's expectations. Please ensure that "
            "the model config is compatible with vLLM.", field="hf_config.text_config.num_attention_heads")
    top_type = hf.get("model_type")
    for view in (hf, text):
        if not isinstance(view.get("model_type"), (str, type(None))):
            raise InvalidInputError.for_value(_field(view, "model_type"), view.get("model_type"),
                                              "a string (a model type name)")
    archs = hf.get("architectures")
    if archs is None:
        default = snap.get("default_architecture")
        if default is None:
            raise InvalidInputError(
                "invalid hf_config.architectures: absent; allowed: a list of architecture names "
                "(config.json has no 'architectures' and its model_type is not known to transformers)",
                field="hf_config.architectures")
        archs = [default]
    arch, info = architectures.lookup(archs)
    pooling = info.is_pooling
    hybrid = architectures.is_hybrid(info, hf)
    tp = args.get("tensor_parallel_size", 1)
    text_type = text.get("model_type")
    is_mla = text_type in _MLA_MODEL_TYPES and text.get("kv_lora_rank") is not None
    use_mla = is_mla and os.environ.get("VLLM_MLA_DISABLE", "0") in ("", "0", "false", "False")
    dtype = _resolve_dtype(args.get("dtype", "auto"), hf, text, top_type, pooling, messages)
    max_len = _max_model_len(text, args.get("max_model_len"), messages)
    head_size = _head_size(hf, text, top_type, is_mla)
    total_kv = _total_kv_heads(text, top_type)
    num_kv = 1 if use_mla else max(1, total_kv // tp)
    chunk = mamba_state.mamba_chunk_size(text)
    _number(text, "mamba_chunk_size" if text.get("mamba_chunk_size") is not None else "chunk_size", chunk)
    heads = text.get("num_attention_heads")
    quant_method, _ = _quantization(hf)

    mc = ModelConfig(
        model=model, architecture=arch, architectures=list(archs), model_type=top_type,
        hf_config=hf, hf_text_config=text, runner_type="pooling" if pooling else "generate",
        dtype=dtype, max_model_len=max_len, head_size=head_size, total_num_kv_heads=total_kv,
        num_kv_heads=num_kv, num_attention_heads=heads if isinstance(heads, int) else None,
        use_mla=use_mla, is_hybrid=hybrid, is_attention_free=info.is_attention_free,
        supports_mamba_prefix_caching=info.supports_mamba_prefix_caching, mamba_chunk_size=chunk,
        quantization=quant_method, arch_info=info,
    )
    cache_dtype = _resolve_kv_cache_dtype(hf, args.get("kv_cache_dtype", "auto"), messages)
    block_size = args.get("block_size")
    if args.get("calculate_kv_scales"):
        messages.append(("WARNING", "The `--calculate-kv-scales` option is deprecated and will be removed in "
                                    "v0.19. The scales will be loaded from the model checkpoint if available, "
                                    "otherwise they default to 1.0."))
    if cache_dtype.startswith("fp8"):
        messages.append(("INFO", "Using fp8 data type to store kv cache. It reduces the GPU memory footprint "
                                 "and boosts the performance. Meanwhile, it may cause accuracy drop without a "
                                 "proper scaling factor."))
    cc = CacheConfig(
        block_size=16 if block_size is None else block_size,
        user_specified_block_size=block_size is not None,
        cache_dtype=cache_dtype,
        calculate_kv_scales=args.get("calculate_kv_scales", False),
        enable_prefix_caching=args.get("enable_prefix_caching"),
        mamba_cache_mode=args.get("mamba_cache_mode", "none"),
        mamba_block_size=args.get("mamba_block_size"),
        mamba_ssm_cache_dtype=args.get("mamba_ssm_cache_dtype", "auto"),
        mamba_cache_dtype=args.get("mamba_cache_dtype", "auto"),
    )
    pooler = PoolerConfig(seq_pooling_type="LAST", tok_pooling_type="ALL") if pooling else None
    return EngineConfig(
        model_config=mc, cache_config=cc,
        attention_config=AttentionConfig(backend=args.get("attention_backend")),
        parallel_config=ParallelConfig(tensor_parallel_size=tp,
                                       pipeline_parallel_size=args.get("pipeline_parallel_size", 1)),
        scheduler_config=SchedulerConfig(enable_chunked_prefill=args.get("enable_chunked_prefill"),
                                         max_num_batched_tokens=args.get("max_num_batched_tokens")),
        pooler_config=pooler, engine_args=dict(given_args), load_messages=messages,
    )
