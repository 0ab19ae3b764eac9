"""The model facts vLLM 0.19.0 derives while it builds its model config.

Pure functions over the transformers view of a config (:class:`~enginecfg.pipeline.hf.view.HFConfigView`)
and the tables behind them: the dtype (with vLLM's casting log lines), max_model_len (rope
scaling, the long-context override refusal), the attention head size, the KV heads, MLA, the
quantisation method and its dtypes, the KV-cache dtype a ModelOpt checkpoint asks for, and the
Gemma 4 per-layer attributes read back the way vLLM 0.19.0 saw them. Messages are appended to
the caller's list as ``(level, text)`` in vLLM's order.
"""

from __future__ import annotations

import math
from typing import Any

from enginecfg.pipeline.errors import ConfigRejectedError, InvalidInputError
from enginecfg.pipeline.hf import HFConfigView, is_snapshot, typed
from enginecfg.pipeline.jsonvalue import to_json
from enginecfg.pipeline.models.dtypes import canonical_dtype

__all__ = ["vllm_view", "MLA_MODEL_TYPES", "MODELOPT_METHODS", "QUANTIZATION_DTYPES", "PYDANTIC_INTS", "DEVICE",
           "field_name", "number", "check_model_ints", "opt_int", "resolve_dtype", "derived_max_len",
           "max_model_len", "ROPE_NULL_FACTOR_WARNING",
           "head_size", "total_kv_heads", "checkpoint_kv_cache_dtype", "quantization", "gemma4_head_dims",
           "attention_head_sizes", "is_mla", "mla_dims", "BUILDABLE_DIMENSIONS", "check_buildable"]

# -- the vLLM 0.19 view of a transformers 5.23 snapshot --------------------------------------

def vllm_view(snap: dict[str, Any], raw: dict[str, Any] | None) -> dict[str, Any]:
    """The snapshot as vLLM 0.19.0 read it, with per-layer attributes read back globally.

    transformers 5.23 made Gemma 4's ``head_dim`` / ``num_key_value_heads`` per-layer
    (reading them globally raises) and dropped ``global_head_dim``; vLLM 0.19.0 read them
    as plain attributes (transformers 5.5).  The sliding-attention layers carry the global
    ``head_dim`` / ``num_key_value_heads`` values, the full-attention layers the
    ``global_head_dim`` / ``num_global_key_value_heads`` ones.
    """
    cached = snap.get("vllm_view")
    if cached is not None:
        return cached
    view = to_json(snap)  # JSON-shaped: copied without deepcopy's bookkeeping
    _unlayer(view, raw)
    snap["vllm_view"] = view
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
MLA_MODEL_TYPES = {"AXK1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp", "glm_moe_dsa",
                    "glm4_moe_lite", "glm4_moe_lite_mtp", "kimi_k2", "kimi_linear", "longcat_flash",
                    "pangu_ultra_moe", "pangu_ultra_moe_mtp", "bailing_hybrid"}
_USER_DTYPES = {"half": "float16", "float16": "float16", "float": "float32", "float32": "float32",
                "bfloat16": "bfloat16"}
#: ModelOpt ``quant_algo`` -> the quantization method vLLM names it
MODELOPT_METHODS = {"NVFP4": "modelopt_fp4", "MXFP8": "modelopt_mxfp8", "MIXED_PRECISION": "modelopt_mixed"}
#: quantization method -> the model dtypes it supports (vLLM refuses others after verification)
QUANTIZATION_DTYPES = {"modelopt": ("bfloat16", "float16"),
                       "modelopt_fp4": ("bfloat16", "float16", "float8_e4m3fn"),
                       "modelopt_mxfp8": ("bfloat16",),
                       "modelopt_mixed": ("bfloat16", "float16")}
GEMMA4_MODEL_TYPES = ("gemma4", "gemma4_text")


def field_name(view: HFConfigView, name: str) -> str:
    return typed.field_of(view, name)


def number(view: HFConfigView, name: str, value: Any, *, allow_float: bool = False) -> Any:
    """``value`` (read from attribute ``name``) checked as an integer (or any number).

    true and false are 1 and 0, as in vLLM's arithmetic on them."""
    value = typed.check(field_name(view, name), value, typed.NUMBER if allow_float else typed.INT,
                        typed.BOOL, optional=False,
                        expect="a number" if allow_float else "an integer")
    return int(value) if isinstance(value, bool) else value


#: text-config fields vLLM's ModelConfig copies into integer fields (pydantic, lax: an
#: integral float or a numeric string converts; null, a fraction or other text is refused)
PYDANTIC_INTS = {"hidden_size": "hidden_size", "num_attention_heads": "total_num_attention_heads",
                 "vocab_size": "vocab_size", "num_hidden_layers": "total_num_hidden_layers"}


def _lax_int(value: Any) -> bool:
    if isinstance(value, (bool, int)):
        return True
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, str):
        try:
            int(value.strip())
        except ValueError:
            return False
        return True
    return False


def check_model_ints(text: HFConfigView) -> None:
    """The text-config fields vLLM's ModelConfig validates as integers (when present)."""
    for name, vllm_field in PYDANTIC_INTS.items():
        if typed.has(text, name):
            typed.attr(text, name, typed.INT, typed.NUMBER, typed.BOOL, typed.STR, optional=False,
                       allowed=_lax_int,
                       expect=f"an integer (vLLM's ModelConfig.{vllm_field} is an int field)")


def opt_int(view: HFConfigView, name: str, default: Any = None) -> Any:
    """Attribute ``name``: an integer, or None when absent or null (true and false are 1
    and 0, as in vLLM's arithmetic on them)."""
    value = typed.attr(view, name, typed.INT, typed.BOOL, default=default, expect="an integer or null")
    return int(value) if isinstance(value, bool) else value


class _NotADtype:
    """A config ``dtype`` that is a JSON value other than text (true, 7, an object ...).

    vLLM takes it as the config's dtype as it is: no platform supports it, so it falls back
    to the preferred dtype with its warning, printing the value as Python does."""

    def __init__(self, value: Any):
        self.value = value

    def __str__(self) -> str:
        return str(self.value)


def _shown(dtype: Any) -> str:
    """A config dtype as vLLM's log lines print it (``torch.bfloat16``, or the odd value)."""
    return f"torch.{dtype}" if isinstance(dtype, str) else str(dtype)


def _config_dtype(hf: HFConfigView, text: HFConfigView) -> Any:
    """The dtype the config itself decides (top level, text, vision or encoder config), or None.

    A canonical dtype name, or :class:`_NotADtype` for a value that is not text."""
    candidates = [(hf, "dtype"), (text, "dtype")]
    for sub in ("vision_config", "encoder_config"):
        sv = typed.attr(hf, sub, typed.ANY)  # only a sub-config has a dtype to read
        if isinstance(sv, HFConfigView):
            candidates.append((sv, "dtype"))
    for view, name in candidates:
        value = typed.attr(view, name, typed.ANY)  # checked against the dtype names below
        if value is None:
            continue
        if not isinstance(value, str):
            return _NotADtype(value)
        canon = canonical_dtype(value)
        if canon not in ("float32", "float16", "bfloat16"):
            raise InvalidInputError.for_value(field_name(view, "torch_dtype"), value,
                                              "float32, float16 or bfloat16")
        return canon
    return None


#: the device vLLM's dtype fallback warning names (enginecfg resolves for one H200)
DEVICE = "'NVIDIA H200' (with compute capability 9.0)"


def resolve_dtype(user: str, hf: HFConfigView, text: HFConfigView, model_type: str | None,
                  pooling: bool, messages: list, weights_dtype: Any = None) -> str:
    """The model dtype as vLLM 0.19.0 resolves it, appending its log lines to *messages*.

    When the config does not decide the dtype, ``weights_dtype()`` (if given) is asked for the
    checkpoint's: the common dtype of its safetensors tensors, or None (then float32).  It is
    only called in that case, as vLLM only reads the headers then.
    """
    config_dtype = _config_dtype(hf, text)
    if config_dtype is None and weights_dtype is not None:
        config_dtype = weights_dtype()
    if config_dtype is None:
        config_dtype = "float32"
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
            messages.append(("WARNING", f"Your device {DEVICE} doesn't support {_shown(config_dtype)}. "
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
            messages.append(("INFO", f"Upcasting {_shown(config_dtype)} to torch.{dtype}."))
        elif config_dtype == "float32":
            messages.append(("INFO", f"Downcasting torch.{config_dtype} to torch.{dtype}."))
        else:
            messages.append(("WARNING", f"Casting {_shown(config_dtype)} to torch.{dtype}."))
    return dtype


def _rope_entries(text: HFConfigView, rope: dict) -> list[tuple[str, dict]]:
    """``(dotted field, entry)`` of each rope entry: one, or one per layer type (nested).

    vLLM indexes each entry (``entry["rope_type"]``): an entry that is no JSON object is a
    crash there, bad input here."""
    field = field_name(text, "rope_parameters")
    if rope and all(isinstance(v, dict) for v in rope.values()):
        return [(f"{field}.{k}", v) for k, v in rope.items()]
    return [(field, typed.check(field, rope, typed.OBJECT))]


#: the warning vLLM logs when a RoPE entry's scaling factor is null (it then uses 1.0)
ROPE_NULL_FACTOR_WARNING = (
    "The model's RoPE configuration has a null scaling factor which is unexpected. This likely "
    "indicates a bug in the model's HuggingFace config.json. Please notify the model vendor. "
    "Falling back the value to 1.0. ")
_LONG_LEN_CAUTION = (
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative "
    "position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model "
    "uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA "
    "array out-of-bounds error.")


def derived_max_len(text: HFConfigView) -> tuple[float, str | None]:
    """The model's own maximum length and the key it came from, as vLLM keeps them: the
    smallest of the known length keys (``model_max_length``, when set, wins), always as a
    float (vLLM stores the pair in a field typed ``tuple[float, str | None]``; ``inf`` when
    the config has none of the keys)."""
    derived: Any = math.inf
    key = None
    for name in _MAX_LEN_KEYS:
        value = typed.attr(text, name, typed.ANY)
        if value is None:
            continue
        value = number(text, name, value, allow_float=True)
        if value < derived:
            derived, key = value, name
    model_max_length = typed.attr(text, "model_max_length", typed.ANY)
    if model_max_length:
        derived = number(text, "model_max_length", model_max_length, allow_float=True)
        key = "model_max_length"
    return float(derived), key


def max_model_len(text: HFConfigView, user: int | None, messages: list, *, sliding_window: Any = None,
                  tokenizer_max: Any = None, encoder_max: Any = None, allow_long: bool = False) -> int:
    """max_model_len as vLLM 0.19.0 derives and checks it.

    ``sliding_window``: the window when ``disable_sliding_window`` is on (it caps the length);
    ``tokenizer_max``: ``tokenizer_config.json``'s ``model_max_length`` (pooling models with
    absolute positions); ``encoder_max``: sentence-transformers' ``max_seq_length``, which
    replaces the derived length after rope scaling (the error message keeps the config key);
    ``allow_long``: ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set (a longer user length is then a
    warning, not an error).

    The derived length keeps the Python type each of vLLM's steps gives it, because the
    error message prints it as Python does: a float from the start (:func:`derived_max_len`),
    replaced by an integer from the config where vLLM replaces it (the sliding window, a
    smaller tokenizer length, yarn's ``original_max_position_embeddings``, the
    sentence-transformers length), and multiplied by the RoPE factor (1.0 unless the entry
    names one) whenever the config has ``rope_parameters``: ``8192.0``, ``16384``.
    """
    derived, key = derived_max_len(text)
    if sliding_window is not None:
        window = number(text, "sliding_window", sliding_window, allow_float=True)
        if window < derived:
            derived, key = window, "sliding_window"
    if tokenizer_max is not None:
        tok = number(text, "tokenizer_config.model_max_length", tokenizer_max, allow_float=True)
        if tok < derived:  # min() keeps the first of two equal values
            derived = tok
    if math.isinf(derived):
        if user is not None and user != -1:
            return user
        messages.append(("WARNING", "The model's config.json does not contain any of the keys to determine "
                                    "the original maximum length of the model. Assuming the model's maximum "
                                    "length is 2048."))
        derived = 2048
    # vLLM iterates over the entries of rope_parameters: anything but a JSON object (or
    # null) is a crash there, bad input here
    rope = typed.attr(text, "rope_parameters", typed.OBJECT)
    longrope = False
    model_type = typed.attr(text, "model_type", typed.ANY) or ""
    if rope is not None:
        # vLLM looks for "gemma3" in the text model type: a null one is a crash there
        model_type = typed.attr(text, "model_type", typed.STR, optional=False)
    if rope is not None and "gemma3" not in str(model_type):
        factor: Any = 1.0
        for field, entry in _rope_entries(text, rope):
            # rope_type (or its old name "type") is compared with known names: any value
            rope_type = typed.key(entry, field, "rope_type", typed.ANY,
                                  default=typed.key(entry, field, "type", typed.ANY))
            if rope_type == "longrope":
                longrope = True
            if rope_type in ("su", "longrope", "llama3"):
                continue
            if "factor" in entry:
                factor = typed.key(entry, field, "factor", typed.NUMBER, typed.BOOL)
                if factor is not None:
                    factor = number(text, "rope_parameters.factor", factor, allow_float=True)
            if rope_type == "yarn":
                omp = typed.key(entry, field, "original_max_position_embeddings", typed.NUMBER,
                                typed.BOOL)
                if omp is not None:
                    derived = number(text, "rope_parameters.original_max_position_embeddings", omp,
                                     allow_float=True)
        if factor is None:
            messages.append(("WARNING", ROPE_NULL_FACTOR_WARNING))
            factor = 1.0
        derived = derived * factor
    if encoder_max is not None:
        derived = number(text, "sentence_transformers.max_seq_length", encoder_max, allow_float=True)
    if user is None or user == -1:
        omp = typed.attr(text, "original_max_position_embeddings", typed.NUMBER, typed.BOOL) \
            if longrope else None
        if omp is not None:
            return int(number(text, "original_max_position_embeddings", omp, allow_float=True))
        return int(derived)
    if user > derived:
        mml = typed.attr(text, "model_max_length", typed.ANY)  # compared, and printed as given
        if not (isinstance(mml, (int, float)) and not isinstance(mml, bool) and mml >= user):
            # the derived length printed as Python prints it (8192.0, 16384)
            msg = (f"User-specified max_model_len ({user}) is greater than the derived max_model_len "
                   f"({key}={derived} or model_max_length={mml} in model's config.json).")
            if allow_long:
                messages.append(("WARNING", f"{msg} {_LONG_LEN_CAUTION}"))
            else:
                raise ConfigRejectedError(
                    f"{msg} To allow overriding this maximum, set the env var "
                    f"VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {_LONG_LEN_CAUTION}", field="max_model_len")
    return int(user)


def head_size(hf: HFConfigView, text: HFConfigView, top_model_type: str | None, is_mla: bool) -> int:
    if top_model_type in _ZERO_HEAD_MODEL_TYPES:
        return 0
    if top_model_type == "zamba2":
        return opt_int(hf, "attention_head_dim", 0) or 0
    if top_model_type in GEMMA4_MODEL_TYPES:
        hd, ghd = gemma4_head_dims(text)
        if hd is None or ghd is None:
            raise InvalidInputError(
                f"invalid {field_name(text, 'head_dim' if hd is None else 'global_head_dim')}: got None; "
                f"allowed: an integer", field=field_name(text, "head_dim" if hd is None else "global_head_dim"))
        size = max(number(text, "head_dim", hd), number(text, "global_head_dim", ghd))
        if size:
            return size
    if is_mla:
        kv_lora = number(text, "kv_lora_rank", typed.attr(text, "kv_lora_rank", typed.ANY))
        return kv_lora + (opt_int(text, "qk_rope_head_dim", 0) or 0)
    for name in ("head_dim", "hidden_size_per_head"):
        value = opt_int(text, name)
        if value is not None:
            return value
    heads = opt_int(text, "num_attention_heads")
    if heads == 0:
        return 0
    hidden = opt_int(text, "hidden_size")
    if heads is None or hidden is None:
        missing = "num_attention_heads" if heads is None else "hidden_size"
        raise InvalidInputError(f"invalid {field_name(text, missing)}: absent; allowed: an integer "
                                f"(needed to derive the attention head size)", field=field_name(text, missing))
    return hidden // heads


def total_kv_heads(text: HFConfigView, top_model_type: str | None) -> int:
    if top_model_type in _ZERO_HEAD_MODEL_TYPES:
        return 0
    # Falcon's two flags are tested for truth, as vLLM tests them: any value
    if top_model_type == "falcon" and typed.attr(text, "multi_query", typed.ANY) \
            and not typed.attr(text, "new_decoder_architecture", typed.ANY):
        return 1
    for name in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num"):
        if typed.has(text, name):
            return number(text, name, typed.attr(text, name, typed.ANY))
    return opt_int(text, "num_attention_heads", 0) or 0


def checkpoint_kv_cache_dtype(hf: HFConfigView, user: str, messages: list) -> str:
    if user != "auto":
        return user
    from enginecfg.pipeline.models.quant import QUANT_FIELD, quant_config, quant_method

    method = quant_method(hf)
    if not (method or "").startswith("modelopt"):
        return user
    quant = quant_config(hf)
    field = QUANT_FIELD
    inner = typed.key(quant, field, "quantization", typed.ANY)
    inner = inner if isinstance(inner, dict) else {}  # a flat ModelOpt config has none
    algo, algo_field = None, None
    # the first set one of the four places, as the checkpoint's KV-cache scheme (any value:
    # a scheme vLLM does not know is warned about below, not refused)
    for where, obj, name in ((f"{field}.quantization", inner, "kv_cache_scheme"),
                             (field, quant, "kv_cache_scheme"),
                             (f"{field}.quantization", inner, "kv_cache_quant_algo"),
                             (field, quant, "kv_cache_quant_algo")):
        value = typed.key(obj, where, name, typed.ANY)
        if value:
            algo, algo_field = value, f"{where}.{name}"
            break
    if algo is None:
        return "auto"
    if isinstance(algo, str) and algo.lower() == "fp8":
        return "fp8_e4m3"
    if isinstance(algo, dict) and typed.key(algo, algo_field, "num_bits", typed.ANY) == 8 \
            and typed.key(algo, algo_field, "type", typed.ANY) == "float" \
            and typed.key(algo, algo_field, "dynamic", typed.ANY) is False:
        return "fp8_e4m3"
    messages.append(("WARNING", f"kv cache quantization algorithm {algo!r} of the checkpoint is not "
                                f"supported; using kv_cache_dtype 'auto'"))
    return "auto"


def quantization(hf: HFConfigView) -> str | None:
    """The checkpoint's quantization method, as vLLM names it (ModelOpt by its algorithm).

    A quantization_config that is not an object, or a quant_method that is not a string, is
    refused here, naming the field (vLLM crashes on both while building the model config)."""
    from enginecfg.pipeline.models.quant import QUANT_FIELD, quant_config, quant_method

    method = quant_method(hf)
    if method == "modelopt":
        # compared with the known algorithms; check_modelopt refuses the others as vLLM does
        algo = typed.key(quant_config(hf), QUANT_FIELD, "quant_algo", typed.ANY)
        if isinstance(algo, str) and algo.upper() in MODELOPT_METHODS:
            return MODELOPT_METHODS[algo.upper()]
    return method

def gemma4_head_dims(text: HFConfigView, absent: Any = 0) -> tuple[Any, Any]:
    """Gemma 4's two attention head sizes: sliding layers' ``head_dim``, global layers'
    ``global_head_dim`` (as read through :func:`vllm_view`; *absent* when missing: the model
    config derivation reads 0, vLLM's backend hook None)."""
    # any value: the callers check them (the derivation as integers, the backend hook
    # compares them)
    return (typed.attr(text, "head_dim", typed.ANY, default=absent),
            typed.attr(text, "global_head_dim", typed.ANY, default=absent))


def attention_head_sizes(model_config: Any) -> list[int]:
    """Every distinct attention head size of a resolved model config (Gemma 4 has two)."""
    sizes = {model_config.head_size} if model_config.head_size else set()
    text = model_config.hf_text_config
    if text is not None and model_config.model_type in GEMMA4_MODEL_TYPES:
        sizes.update(v for v in gemma4_head_dims(text) if isinstance(v, int) and v > 0)
    return sorted(sizes)


def is_mla(text: HFConfigView) -> bool:
    """Does the text config describe multi-head latent attention (DeepSeek-style)?"""
    return typed.attr(text, "model_type", typed.ANY) in MLA_MODEL_TYPES \
        and typed.attr(text, "kv_lora_rank", typed.ANY) is not None


def mla_dims(model_config: Any, tp: int) -> dict[str, int] | None:
    """The latent KV layout of an MLA model: ``kv_lora_rank``, ``qk_rope_head_dim`` and the
    query heads per tensor-parallel rank; None when the model does not use MLA."""
    if not model_config.use_mla:
        return None
    text = model_config.hf_text_config
    # read after the derivation checked both (head_size): any value, shape-checked below
    lora = typed.attr(text, "kv_lora_rank", typed.ANY) if text is not None else None
    rope = (typed.attr(text, "qk_rope_head_dim", typed.ANY) if text is not None else 0) or 0
    heads = model_config.num_attention_heads
    if not isinstance(lora, int) or lora <= 0 or not isinstance(rope, int) or not heads:
        return None
    return {"kv_lora_rank": lora, "qk_rope_head_dim": rope, "num_heads": max(1, heads // tp)}


#: text-config sizes and counts a model is built from: each, where the config sets it, must be
#: at least 1 (vLLM 0.19.0 takes 0 and below without a word and resolves a model no engine
#: can build: no layers, no vocabulary, attention with no heads, a state of no width).
#: ``attention``: only read where the model has attention layers.
BUILDABLE_DIMENSIONS: tuple[tuple[str, str, bool], ...] = (
    ("hidden_size", "the width of every layer", False),
    ("num_hidden_layers", "the number of layers", False),
    ("vocab_size", "the vocabulary size", False),
    ("num_attention_heads", "the query heads of an attention layer", True),
    ("num_key_value_heads", "the key/value heads of an attention layer", True),
    ("head_dim", "the size of one attention head", True),
    ("linear_conv_kernel_dim", "the width of a linear-attention layer's convolution", False),
    ("linear_key_head_dim", "the size of one linear-attention key head", False),
    ("linear_value_head_dim", "the size of one linear-attention value head", False),
    ("linear_num_key_heads", "the key heads of a linear-attention layer", False),
    ("linear_num_value_heads", "the value heads of a linear-attention layer", False),
)

#: the attributes the KV-head count is read from, in the order :func:`total_kv_heads` reads them
_KV_HEAD_NAMES = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")


def check_buildable(text: HFConfigView, top_model_type: str | None, *, attention_free: bool, is_mla: bool,
                    head_size: int, total_kv_heads: int) -> None:
    """Refuse a model config no engine could build, naming the field, as bad input.

    vLLM 0.19.0 builds its config from such a one (0 attention heads, -1 layers, a vocabulary
    of 0) and reports KV-cache figures for a model that cannot exist; enginecfg refuses it
    where it is loaded: every size or count of :data:`BUILDABLE_DIMENSIONS` the config sets
    must be a positive integer (its type was checked before), the attention head size
    derived from them must be positive, and the query heads must split evenly over the
    key/value heads (each KV head serves a whole number of query heads; vLLM's attention
    layer asserts it when the model is built).  Models without attention layers, and MLA
    models (one latent KV head), are not held to the attention rules."""
    has_attention = not attention_free and top_model_type not in _ZERO_HEAD_MODEL_TYPES
    for name, what, attention_only in BUILDABLE_DIMENSIONS:
        if attention_only and not has_attention:
            continue
        value = typed.attr(text, name, typed.ANY)
        if value is None or not isinstance(value, (int, float)):
            continue  # absent, or a type refused (or ignored) where it is read
        if value < 1:
            raise InvalidInputError.for_value(
                field_name(text, name), value,
                f"a positive integer ({what}: no engine builds a model with {value} of it)")
    if not has_attention:
        return
    if head_size is not None and head_size < 1 and not is_mla:
        name = "head_dim" if typed.has(text, "head_dim") else "hidden_size"
        raise InvalidInputError.for_value(
            field_name(text, name), typed.attr(text, name, typed.ANY),
            f"a value that gives attention heads of at least 1 (the head size derived is {head_size})")
    heads = typed.attr(text, "num_attention_heads", typed.ANY)
    if is_mla or not isinstance(heads, int) or heads < 1 or total_kv_heads < 1:
        return
    heads = int(heads)  # true is 1, as in vLLM's arithmetic on it
    if heads % total_kv_heads:
        kv_name = next((n for n in _KV_HEAD_NAMES if typed.has(text, n)), "num_key_value_heads")
        raise InvalidInputError.for_value(
            field_name(text, kv_name), total_kv_heads,
            f"a divisor of num_attention_heads ({heads}): each key/value head serves a whole "
            f"number of query heads")
