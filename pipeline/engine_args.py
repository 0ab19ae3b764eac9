"""The engine arguments enginecfg takes: vLLM 0.19.0's ``EngineArgs`` names, one table.

Each :class:`EngineArg` holds what both the loader and the command line need: the name,
the ``vllm serve`` flags, the value kind, the allowed choices (exactly vLLM's), whether None
is allowed, how vLLM reads the flag's text, and a help text (vLLM's, in our words).  Python
values are type-checked against it here (:func:`parse_engine_args`, :func:`check_engine_args`);
the CLI builds its engine flags from it, so there is no second list of flag names.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from enginecfg.pipeline.arg_order import split_engine_args
from enginecfg.pipeline.config import ATTENTION_BACKENDS, CACHE_DTYPES, MAMBA_CACHE_MODES, MAMBA_DTYPES
from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.jsonvalue import BOOL, INT, OBJECT, STR
from enginecfg.pipeline.suggest import did_you_mean

__all__ = ["EngineArg", "ENGINE_ARGS", "DTYPE_CHOICES", "human_readable_int", "human_readable_int_or_auto",
           "parse_flag_text", "to_flags", "parse_engine_args", "check_engine_args", "check_names",
           "ACCEPTED_BY_VLLM", "refusal", "given_flag", "arg_for_field", "config_value_error",
           "release_table"]

#: ``--dtype``'s choices (what the model config resolves them to: config.RESOLVED_DTYPES)
DTYPE_CHOICES = ("auto", "half", "float16", "bfloat16", "float", "float32")


@attrs.frozen
class EngineArg:
    """One engine argument."""

    name: str                      #: vLLM's EngineArgs name, e.g. ``max_model_len``
    flags: tuple[str, ...]         #: ``vllm serve`` option strings, long form first
    kind: str                      #: "int", "bool" or "str"
    help: str                      #: what it does, for ``enginecfg run --help``
    choices: tuple[str, ...] | None = None   #: the allowed strings (None: any / see help)
    nullable: bool = False         #: may the Python API pass None ("unset")
    #: how vLLM reads the flag's text: "int", "human_readable_int", "human_readable_int_or_auto"
    parser: str | None = None
    #: where the resolved value lives in the config (``cache_config.block_size``)
    config_field: str = ""
    #: the bound the release's config class checks while it is built, as pydantic states it:
    #: ``("greater than", 0)``, ``("greater than or equal to", 1)`` (None: no bound of vLLM's)
    bound: tuple[str, int | float] | None = None
    #: the release's config class checks the choices itself (a pydantic Literal): a value
    #: outside them is refused in its words, with the choices in the Literal's order, which
    #: this holds (empty: no Literal; :attr:`choices` keeps the parser's order)
    literal: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        """The flags as people write them: ``-tp/--tensor-parallel-size``."""
        return "/".join(sorted(self.flags, key=len))


_SUFFIXES = "k/m/g/t (x 1000) or K/M/G/T (x 1024): 32k = 32000, 32K = 32768, 25.6k = 25600"

_ARGS = (
    EngineArg("block_size", ("--block-size",), INT, nullable=True, parser="int", help=(
        "Tokens per KV-cache block. Unset: 16, which hybrid attention/Mamba models grow until "
        "one attention page holds one Mamba state page. A positive integer: vLLM accepts 0 and "
        "below while it builds its config; enginecfg refuses them after vLLM's checks.")),
    EngineArg("kv_cache_dtype", ("--kv-cache-dtype",), STR, choices=tuple(sorted(CACHE_DTYPES)), help=(
        "Data type of the KV cache. 'auto': the model's dtype, or the checkpoint's own KV-cache "
        "quantization. fp8 means fp8_e4m3; fp8_inc is for Intel Gaudi. Models that default to fp8 "
        "(DeepSeek V3.2) take bfloat16 to opt out.")),
    EngineArg("enable_prefix_caching", ("--enable-prefix-caching",), BOOL, nullable=True, help=(
        "Reuse the KV blocks of prompts that share a prefix. Unset: on where the model supports "
        "it (decoder models).")),
    EngineArg("enable_chunked_prefill", ("--enable-chunked-prefill",), BOOL, nullable=True, help=(
        "Split long prompts into chunks of at most --max-num-batched-tokens. Unset: on where the "
        "model supports it.")),
    EngineArg("mamba_cache_mode", ("--mamba-cache-mode",), STR, choices=tuple(sorted(MAMBA_CACHE_MODES)),
              help=(
        "How Mamba states are kept for prefix caching. none: not at all (prefix caching off); "
        "all: the state at every block boundary (the default with prefix caching, where the model "
        "supports it); align: only a scheduler step's last state, when it falls on a block "
        "boundary.")),
    EngineArg("mamba_block_size", ("--mamba-block-size",), INT, nullable=True, parser="int",
              bound=("greater than", 0), help=(
        "Tokens per Mamba cache block. Needs prefix caching; a multiple of 8 (the causal_conv1d "
        "kernel's alignment).")),
    EngineArg("mamba_ssm_cache_dtype", ("--mamba-ssm-cache-dtype",), STR, choices=tuple(sorted(MAMBA_DTYPES)),
              literal=MAMBA_DTYPES, help=(
        "Data type of the Mamba SSM state alone (the conv state follows --mamba-cache-dtype). "
        "'auto': as --mamba-cache-dtype.")),
    EngineArg("mamba_cache_dtype", ("--mamba-cache-dtype",), STR, choices=tuple(sorted(MAMBA_DTYPES)),
              literal=MAMBA_DTYPES, help=(
        "Data type of the whole Mamba cache, conv and SSM state. 'auto': from the model config.")),
    EngineArg("calculate_kv_scales", ("--calculate-kv-scales",), BOOL, help=(
        "Deprecated. Compute the fp8 KV-cache scales (k_scale, v_scale) at run time instead of "
        "loading them from the checkpoint (or using 1.0).")),
    EngineArg("attention_backend", ("--attention-backend",), STR, nullable=True, help=(
        "The attention backend; 'auto' (or unset) lets vLLM choose. Case does not matter. One of: "
        + ", ".join(ATTENTION_BACKENDS) + ".")),
    EngineArg("tensor_parallel_size", ("--tensor-parallel-size", "-tp"), INT, parser="int", help=(
        "Number of tensor-parallel groups: the GPUs each layer is split over.")),
    EngineArg("pipeline_parallel_size", ("--pipeline-parallel-size", "-pp"), INT, parser="int", help=(
        "Number of pipeline-parallel groups: the stages the layers are split into.")),
    EngineArg("max_model_len", ("--max-model-len",), INT, nullable=True, parser="human_readable_int_or_auto",
              help=(
        "Context length, prompt plus output. Unset: derived from the model config. Takes "
        + _SUFFIXES + "; -1 or auto: the longest that fits in GPU memory (enginecfg, which sees "
        "no GPU memory, uses the model's own maximum).")),
    EngineArg("dtype", ("--dtype",), STR, choices=tuple(sorted(DTYPE_CHOICES)), help=(
        "Data type of weights and activations. auto: FP16 for FP32 and FP16 checkpoints, BF16 for "
        "BF16 ones; half and float16: FP16; bfloat16; float and float32: FP32.")),
    EngineArg("max_num_batched_tokens", ("--max-num-batched-tokens",), INT, nullable=True,
              parser="human_readable_int", help=(
        "Most tokens one scheduler step processes. Unset: 8192 (an H200), and at least "
        "max_model_len without chunked prefill, which then refuses a smaller value. Takes "
        + _SUFFIXES + ".")),
    EngineArg("max_num_seqs", ("--max-num-seqs",), INT, nullable=True, parser="int", help=(
        "Most requests one scheduler step serves. Unset: 1024 (an H200), at most "
        "--max-num-batched-tokens.")),
    EngineArg("disable_sliding_window", ("--disable-sliding-window",), BOOL, help=(
        "Ignore the model's sliding window: attention over the whole context, and the context "
        "capped at the window's size.")),
    EngineArg("hf_overrides", ("--hf-overrides",), OBJECT, nullable=True, parser="json", help=(
        "Fields of the model's config to replace, as a JSON object (a dict from Python): vLLM "
        "applies them to the config before it reads anything from it, so every figure derived "
        "from the config (max_model_len and its refusals, head sizes, KV heads, layer pattern, "
        "Mamba state and page sizes, the KV-cache figures) is computed from the overridden "
        "config. A value that is an object and names a nested config (text_config) updates "
        "that config's fields; any other value replaces the field.")),
    EngineArg("trust_remote_code", ("--trust-remote-code",), BOOL, help=(
        "Allow the model's own code (a config.json whose auto_map names a module). Without it, "
        "a config whose model type only custom code defines is refused, as vLLM refuses it; "
        "enginecfg never runs that code: it reads the config as it is.")),
    EngineArg("runner", ("--runner",), STR, choices=("auto", "draft", "generate", "pooling"), help=(
        "The model runner. auto: as the architecture says; pooling: a generative model runs as a "
        "pooling model (converted to embedding unless its class name says classification), with "
        "the last token's state pooled.")),
    EngineArg("disable_hybrid_kv_cache_manager", ("--disable-hybrid-kv-cache-manager",), BOOL, nullable=True,
              help=(
        "Give every layer one KV-cache layout (sliding-window layers then keep the whole context; "
        "a model with Mamba or linear-attention layers cannot be served so). Unset: vLLM keeps "
        "the hybrid manager on unless the config needs it off.")),
)

_CONFIG_FIELDS = {
    "block_size": "cache_config.block_size", "kv_cache_dtype": "cache_config.cache_dtype",
    "enable_prefix_caching": "cache_config.enable_prefix_caching",
    "enable_chunked_prefill": "scheduler_config.enable_chunked_prefill",
    "mamba_cache_mode": "cache_config.mamba_cache_mode", "mamba_block_size": "cache_config.mamba_block_size",
    "mamba_ssm_cache_dtype": "cache_config.mamba_ssm_cache_dtype",
    "mamba_cache_dtype": "cache_config.mamba_cache_dtype",
    "calculate_kv_scales": "cache_config.calculate_kv_scales", "attention_backend": "attention_config.backend",
    "tensor_parallel_size": "parallel_config.tensor_parallel_size",
    "pipeline_parallel_size": "parallel_config.pipeline_parallel_size",
    "max_model_len": "model_config.max_model_len", "dtype": "model_config.dtype",
    "max_num_batched_tokens": "scheduler_config.max_num_batched_tokens",
    "disable_sliding_window": "model_config.disable_sliding_window",
    "max_num_seqs": "scheduler_config.max_num_seqs",
    "disable_hybrid_kv_cache_manager": "scheduler_config.disable_hybrid_kv_cache_manager",
    "runner": "model_config.runner_type",
}

#: name -> :class:`EngineArg`, in the order ``enginecfg run --help`` lists them
ENGINE_ARGS: dict[str, EngineArg] = {a.name: attrs.evolve(a, config_field=_CONFIG_FIELDS.get(a.name, ""))
                                     for a in _ARGS}


def to_flags(args: dict[str, Any]) -> list[str]:
    """``vllm serve`` flags for engine arguments: ``{"block_size": 16}`` -> ``["--block-size", "16"]``.

    Booleans are ``--x`` / ``--no-x``; None (unset) gives no flag; unknown names are skipped.
    """
    out: list[str] = []
    for name, value in args.items():
        arg = ENGINE_ARGS.get(name)
        if arg is None or value is None:
            continue
        if arg.kind == BOOL:
            out.append(arg.flags[0] if value else "--no-" + arg.flags[0][2:])
        elif arg.kind == OBJECT:
            out += [arg.flags[0], value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))]
        else:
            out += [arg.flags[0], str(value)]
    return out

_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_readable_int(text: str) -> int:
    """Read an integer as vLLM 0.19.0's CLI does: ``32k`` = 32000, ``32K`` = 32768.

    Lower-case suffixes are powers of 1000 and take decimals (``25.6k`` = 25600, truncated
    after a float multiplication, as vLLM does); upper-case ones are powers of 1024 and take
    whole numbers only.  Anything else is Python's ``int()``.  Raises ``ValueError``.
    """
    text = text.strip()
    m = _HUMAN.fullmatch(text)
    if m:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:
            raise ValueError(f"decimals are not allowed with the binary suffix {suffix}; "
                             f"did you mean {number}{suffix.lower()}?")
        return int(number) * _BINARY[suffix]
    return int(text)


def human_readable_int_or_auto(text: str) -> int:
    """As :func:`human_readable_int`, and ``-1`` or ``auto`` (any case) mean -1."""
    stripped = text.strip()
    if stripped == "-1" or stripped.lower() == "auto":
        return -1
    return human_readable_int(stripped)


def parse_flag_text(arg: EngineArg, text: str) -> Any:
    """The value of *arg*'s flag given as *text*, read as vLLM reads it (``ValueError`` if not)."""
    if arg.parser == "human_readable_int_or_auto":
        return human_readable_int_or_auto(text)
    if arg.parser == "human_readable_int":
        return human_readable_int(text)
    if arg.parser == "int":
        return int(text)
    if arg.parser == "json":
        return _json_object(text)
    return text


def _json_object(text: str) -> dict[str, Any]:
    """A JSON object given as text (``ValueError`` if it is not one)."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"a JSON object is needed, not {type(value).__name__}")
    return value


# -- Python values ---------------------------------------------------------------------------

def parse_engine_args(engine_args: dict[str, Any]) -> dict[str, Any]:
    """Type-check the caller's engine arguments; returns them normalised (backend upper-cased).

    Raises the first bad one in vLLM's order of checks, though before the model config is read
    (the loader instead defers each error to its moment: :func:`check_engine_args`)."""
    good, deferred = check_engine_args(engine_args)
    if deferred:
        raise deferred[0][1]
    return good


def check_engine_args(engine_args: dict[str, Any], table: dict[str, EngineArg] | None = None,
                      phases: dict[str, str] | None = None,
                      ) -> tuple[dict[str, Any], list[tuple[str, InvalidInputError]]]:
    """Every engine argument checked: the good ones normalised, and the errors vLLM reports
    later, as ``(phase, error)`` in its order (:mod:`.arg_order`; an unknown name or a
    model-config error is raised now), with enginecfg's own refusals of values vLLM accepts
    last (those values are kept: vLLM's checks run on them).

    *table*: the release's arguments (:func:`release_table`; default 0.19.0's
    :data:`ENGINE_ARGS`); *phases*: the release's own step for an argument's error, where it
    differs from 0.19.0's."""
    table = ENGINE_ARGS if table is None else table
    return split_engine_args(engine_args, lambda name, value: _parse_one(name, value, table), table,
                             lambda name, value: None if table[name].bound else refusal(name, value), phases)


def release_table(choices: dict[str, tuple[str, ...]] | None = None,
                  bounds: dict[str, tuple[str, int | float]] | None = None) -> dict[str, EngineArg]:
    """The engine arguments of a later release: 0.19.0's with that release's choices (given in
    its config class's Literal order; its parser offers them sorted) and config-class bounds
    where they differ."""
    choices, bounds = choices or {}, bounds or {}
    return {name: attrs.evolve(arg, choices=tuple(sorted(choices[name])) if name in choices else arg.choices,
                               bound=bounds.get(name, arg.bound), literal=choices.get(name, arg.literal))
            for name, arg in ENGINE_ARGS.items()}


#: arguments whose nonpositive values vLLM 0.19.0 accepts while it builds its config (and then
#: fails on, or serves nonsense with, once the engine starts): enginecfg keeps the value for
#: vLLM's checks and refuses it after them (:func:`refusal`), with what is allowed
ACCEPTED_BY_VLLM = {"block_size": "a positive integer",
                    "max_model_len": "a positive integer, or -1 for the model's maximum"}


def refusal(name: str, value: Any) -> InvalidInputError | None:
    """enginecfg's own refusal of a value vLLM accepts while it builds its config, or None."""
    allowed = ACCEPTED_BY_VLLM.get(name)
    if allowed is None or not isinstance(value, int) or isinstance(value, bool) or value >= 1:
        return None
    if name == "max_model_len" and value == -1:
        return None
    return _bad(name, value, allowed)


def given_flag(field: str | None, engine_args: dict[str, Any]) -> str | None:
    """The flag behind a refused *field*, as the caller gave it (``--tensor-parallel-size 3``),
    or None when the field is no engine argument or the argument was not given.  *field* is an
    engine argument's name or the config field it sets (``parallel_config.tensor_parallel_size``)."""
    if not field:
        return None
    arg = ENGINE_ARGS.get(field) or next((a for a in ENGINE_ARGS.values() if a.config_field == field), None)
    if arg is None or engine_args.get(arg.name) is None:
        return None
    value = engine_args[arg.name]
    if arg.kind == BOOL:
        return arg.flags[0] if value else "--no-" + arg.flags[0][2:]
    return f"{arg.flags[0]} {value}"


def arg_for_field(field: str) -> EngineArg | None:
    """The engine argument that sets config *field* (``cache_config.block_size``), or None."""
    return next((a for a in ENGINE_ARGS.values() if a.config_field == field), None)


def config_value_error(field: str, value: Any, table: dict[str, EngineArg] | None = None) -> InvalidInputError | None:
    """The refusal the caller would get for giving *value* as the engine argument behind
    config *field* (``cache_config.block_size`` = 3 is checked as ``--block-size 3``), or None
    when it passes, or *field* is no engine argument's.

    The same checks, in the same words, as the caller's argument: its type, its choices (read
    where the argument check reads them), its range, and enginecfg's own refusal of a value
    vLLM accepts (:func:`refusal`).  What a plugin's stage sets is held to it
    (:mod:`enginecfg.pipeline.plugin_checks`)."""
    arg = arg_for_field(field)
    if arg is None or (value is None and arg.nullable):
        return None
    try:
        normalised = _parse_one(arg.name, value, ENGINE_ARGS if table is None else table)
    except InvalidInputError as exc:
        return exc
    return refusal(arg.name, normalised)


def check_names(engine_args: dict[str, Any]) -> None:
    """Refuse an argument name vLLM 0.19.0's ``EngineArgs`` does not have (or enginecfg does
    not take), naming the closest ones; vLLM refuses it before it reads anything."""
    for name in engine_args:
        if name not in ENGINE_ARGS:
            _parse_one(name, None)


def _bad(name: str, value: Any, allowed: str) -> InvalidInputError:
    flag = ENGINE_ARGS[name].flag  # (every release's table names the same flags)
    return InvalidInputError(f"invalid {name} ({flag}): got {value!r}; allowed: {allowed}", field=name)


def _parse_one(name: str, value: Any, table: dict[str, EngineArg] = ENGINE_ARGS) -> Any:
    """One engine argument, normalised, or :class:`InvalidInputError` naming it."""
    if name not in table:
        raise InvalidInputError(
            f"unknown engine argument {name!r}{did_you_mean(str(name), ENGINE_ARGS)}; known: "
            f"{', '.join(sorted(ENGINE_ARGS))}", field=name)
    arg = table[name]
    kind, choices, nullable = arg.kind, arg.choices, arg.nullable
    if value is None:
        if not nullable:
            raise _bad(name, value, "a value (None is not allowed)")
        return None
    if kind == INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(name, value, "an integer")
        if arg.bound is not None:
            _check_bound(arg, value)
        elif name not in ACCEPTED_BY_VLLM and value < 1:
            raise _bad(name, value, "a positive integer")
    elif kind == BOOL:
        if not isinstance(value, bool):
            raise _bad(name, value, "true or false")
    elif kind == OBJECT:
        if isinstance(value, str):
            try:
                value = _json_object(value)
            except ValueError as exc:
                raise _bad(name, value, f"a JSON object or a dict ({exc})") from None
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _bad(name, value, "a JSON object or a dict with text keys")
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
            if arg.literal:
                shown = [repr(c) for c in arg.literal]
                words = "Input should be " + (" or ".join([", ".join(shown[:-1]), shown[-1]]) if len(shown) > 1
                                              else shown[0])
                raise _bad(name, value, f"{', '.join(choices)} ({words})")
            raise _bad(name, value, ", ".join(choices))
    return value


_BOUND_TESTS = {"greater than": lambda v, b: v > b, "greater than or equal to": lambda v, b: v >= b,
                "less than or equal to": lambda v, b: v <= b}


def _check_bound(arg: EngineArg, value: Any) -> None:
    """Refuse a value outside the release's bound in pydantic's words, as vLLM reports it."""
    op, limit = arg.bound
    if not _BOUND_TESTS[op](value, limit):
        raise _bad(arg.name, value, f"an integer {op} {limit} (vLLM: Input should be {op} {limit})")


def _parse_backend(value: str) -> str | None:
    if value in ("", "None") or value.lower() == "auto":
        return None
    name = value.upper()
    if name not in ATTENTION_BACKENDS:
        raise InvalidInputError(
            f"Unknown attention backend: {name!r}. Valid options are: {', '.join(ATTENTION_BACKENDS)} "
            f"(attention_backend, --attention-backend)", field="attention_backend")
    return name
