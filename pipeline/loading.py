"""Files plus vLLM's knowledge become an :class:`EngineConfig`: the one place that builds one.

``load_pretrained`` reads ``config.json`` from a model folder, a lone file or a Hugging Face
repo (see :mod:`.hf.sources`) together with the files beside it that vLLM reads (safetensors
headers, tokenizer and sentence-transformers settings), validates the engine arguments,
obtains the transformers view of the config (see :mod:`.hf.cache`: built once per config
content, never in this process unless transformers is already imported) and derives
``ModelConfig``: architecture, text config, dtype, max_model_len, head size, KV heads, MLA,
hybrid / attention-free, Mamba prefix-caching support, chunk size, sliding window, and the
sentence-transformers pooling settings.  The steps that depend on pooling decisions (chunked
prefill, prefix caching) are stages.  A folder loaded again is answered from
:mod:`.loadmemo` when every file it read is the same.

:class:`EngineConfig` is the engine's :class:`~enginecfg.pipeline.config.BaseEngineConfig`
with these loaders as its constructors (``from_pretrained``, ``from_pretrained_many``,
``from_hf_config``).
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Hashable

import attrs

from enginecfg.pipeline.config import (
    AttentionConfig, BaseEngineConfig, CacheConfig, ModelConfig, ParallelConfig, PoolerConfig,
    SchedulerConfig,
)
from enginecfg.pipeline.engine_args import check_engine_args, check_names, parse_engine_args
from enginecfg.pipeline.errors import ConfigRejectedError, InvalidInputError
from enginecfg.pipeline.hf import (
    VLLM_CLASSES, VLLM_REGISTERED_TYPES, HFConfigView, ModelSource, missing, open_source, remember_bytes, snapshot_for,
    snapshot_for_bytes, snapshot_of_object, snapshots_for, start_worker, typed,
)
from enginecfg.pipeline.jsonvalue import to_json
from enginecfg.pipeline.loadmemo import LOADS
from enginecfg.pipeline.models import architectures, derive, mamba_state, model_files, vllm_registry
from enginecfg.pipeline.arg_order import POST, add_pending
from enginecfg.pipeline.models.engine_defaults import (
    CHUNKED_LOCAL_ATTENTION_WARNING, DEFAULT_BLOCK_SIZE, HYBRID_MANAGER_NEEDED_ERROR,
    hybrid_kv_cache_manager_must_be_off,
)
from enginecfg.pipeline.models.weights_dtype import dtype_from_headers

__all__ = ["EngineConfig", "load_pretrained", "load_pretrained_many", "prefetch_pretrained", "load_hf_config"]


@attrs.define(slots=True, kw_only=True)
class EngineConfig(BaseEngineConfig):
    """Everything one engine start needs decided, in vLLM's section layout.

    Build it with :meth:`from_pretrained` (a model folder, ``config.json`` or hub repo id) or
    :meth:`from_hf_config` (a transformers config object or a dict); hand it to
    ``Pipeline().run(cfg)``, which verifies and corrects it and then freezes it.
    """

    @classmethod
    def from_pretrained(cls, path: Any, revision: str | None = None, **engine_args: Any) -> "EngineConfig":
        """A model folder, a ``config.json``, or a Hugging Face repo id (``org/name``, at
        ``revision``), resolved with vLLM's engine arguments.

        What vLLM refuses while it builds its model config is raised here (a config it cannot
        read, the model config's own arguments, max_model_len); an engine argument vLLM
        checks later is kept with the config and refused by :meth:`Pipeline.run` at vLLM's
        step, so that a config vLLM refuses earlier for another reason gives that answer,
        as ``Pipeline().resolve(path, **engine_args)`` does."""
        return load_pretrained(path, engine_args, revision=revision, defer_argument_errors=True)

    @classmethod
    def from_pretrained_many(cls, paths: Any, **engine_args: Any) -> "list[EngineConfig]":
        """:meth:`from_pretrained` of each path, in order, with the same engine arguments.

        The transformers snapshots of all configs not cached yet are built in one request
        to the worker, so N new configs cost one round trip, not N.  The first path that
        cannot be loaded raises, as its own :meth:`from_pretrained` would; engine-argument
        errors wait for the run, as there.
        """
        return load_pretrained_many(paths, engine_args)

    @classmethod
    def from_hf_config(cls, config: Any, **engine_args: Any) -> "EngineConfig":
        """A transformers config object, or a dict read as its ``config.json`` would be
        (engine-argument errors wait for the run, as with :meth:`from_pretrained`)."""
        return load_hf_config(config, engine_args)


# -- reading the config file -----------------------------------------------------------------

def _parse_config(file: str | Path, raw: bytes) -> dict[str, Any]:
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


def _eager(cfg: EngineConfig, defer: bool) -> EngineConfig:
    """Raise the first engine-argument error now, unless the caller defers it to the moment
    vLLM reports it (``from_pretrained`` and the pipeline's ``resolve`` do)."""
    if cfg.pending_errors and not defer:
        raise cfg.pending_errors[0][1]
    return cfg


def _override_paths(overrides: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted field: value}`` of an ``hf_overrides`` mapping (a nested config's fields by
    its name: ``text_config.num_attention_heads``)."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if isinstance(value, dict):
            out.update(_override_paths(value, f"{prefix}{key}."))
        out[f"{prefix}{key}"] = value
    return out


def _blaming_overrides(load: Callable[..., Any]) -> Callable[..., Any]:
    """*load*, whose refusal of a model-config field that ``--hf-overrides`` set says so (the
    value is the caller's, not config.json's)."""
    @functools.wraps(load)
    def loaded(path: Any, engine_args: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return load(path, engine_args, *args, **kwargs)
        except InvalidInputError as exc:
            field = exc.field or ""
            given = engine_args.get("hf_overrides") if isinstance(engine_args, dict) else None
            if field.startswith("hf_config.") and isinstance(given, (dict, str)) and given:
                try:
                    paths = _override_paths(parse_engine_args({"hf_overrides": given})["hf_overrides"])
                except InvalidInputError:
                    raise exc from None
                name = field[len("hf_config."):]
                if name in paths:
                    exc.message = (exc.message.replace(" in config.json", "", 1)
                                   + f" (the value --hf-overrides sets: {name}={paths[name]!r})")
                    exc.args = (exc.message,)
            raise
    return loaded


@_blaming_overrides
def load_pretrained(path: Any, engine_args: dict[str, Any], revision: str | None = None, *,
                    defer_argument_errors: bool = False, registry: Any = None,
                    arguments: Any = None, adapt: Callable[[EngineConfig], EngineConfig] | None = None,
                    adapt_key: Hashable = None) -> EngineConfig:
    """A config from a model folder, a ``config.json`` or a Hugging Face repo id.

    Besides ``config.json`` the files vLLM 0.19.0 reads while building its config are read
    from the same source (see :mod:`.hf.sources` and :mod:`.models.model_files`), and every one
    is recorded with its sha256 in the config's ``source``.

    *path* may also be a :class:`ModelSource` opened before (it carries its revision): a
    caller loading one model under many settings (``plan``) opens and reads it once.

    Engine-argument errors are raised after the model config was read (vLLM reports a config
    it cannot build first); with ``defer_argument_errors`` (what ``from_pretrained`` and the
    pipeline's ``resolve`` pass) they are kept in ``pending_errors`` for :meth:`Pipeline.run`
    to raise at vLLM's step (:mod:`.arg_order`).

    *registry*: the model registry of the release whose rules load it
    (:class:`~enginecfg.pipeline.models.vllm_registry.Registry`; default vLLM 0.19.0's), which
    decides what an architecture it does not register resolves to, or that it is refused.
    *arguments*: that release's engine arguments, ``(table, phases)`` (see
    :func:`~enginecfg.pipeline.engine_args.check_engine_args`; default 0.19.0's).
    *adapt*: what a release changes in a config once it is loaded (a pure function of the
    config, ``adapt(cfg) -> cfg``), applied after any engine-argument error not deferred was
    raised; the load memo keeps the adapted config, keyed with *adapt_key* (what *adapt*
    depends on besides the config: its release and rules), so a load it answers is not
    adapted again.
    """
    check_names(engine_args)  # vLLM's EngineArgs refuses an unknown name before anything
    registry = registry or vllm_registry.REGISTRY
    if isinstance(path, ModelSource):
        if revision is not None:
            raise InvalidInputError(f"invalid revision (--revision): got {revision!r} with a model source "
                                    f"already opened; allowed: none (the source carries its revision)",
                                    field="revision")
        source, path, revision = path, path.given, path.revision
    else:
        source = open_source(path, revision)
    raw = source.config_bytes()
    file = source.describe("config.json")
    overrides = engine_args.get("hf_overrides")
    if isinstance(overrides, (dict, str)) and overrides:
        raw = _overridden(file, raw, engine_args)
    parsed: list[dict[str, Any]] = []

    def parse() -> dict[str, Any]:
        if not parsed:
            parsed.append(_parse_config(file, raw))
        return parsed[0]
    try:
        args, deferred = check_engine_args(engine_args, *(arguments or ()))
    except InvalidInputError:
        parse()  # vLLM reads config.json before its model config checks its own arguments
        raise
    memo_key = None if deferred or source.kind == "hub" else LOADS.key(path, revision, engine_args)
    if memo_key is not None:
        memo_key = (memo_key, registry.memo_key) if adapt is None else (memo_key, registry.memo_key, adapt_key)
    if memo_key is not None:
        known = LOADS.get(memo_key, source, raw, engine_args)
        if known is not None:
            return known
    snap = snapshot_for_bytes(raw, parse)
    if "error" in snap and not parsed:
        parse()  # a refused config: name the field where a section has the wrong type
    if b'"auto_map"' in raw and not parsed:
        parse()  # a config naming custom code: what transformers decides about it
    cfg = _build(source.model, parsed[0] if parsed else None, snap, engine_args, args,
                 source=source, deferred=deferred, registry=registry)
    if adapt is not None:
        cfg = adapt(_eager(cfg, defer_argument_errors))
        if memo_key is not None:
            LOADS.put(memo_key, source, raw, cfg)
        return cfg
    if memo_key is not None:
        LOADS.put(memo_key, source, raw, cfg)
    return _eager(cfg, defer_argument_errors)


def _overridden(file: str, raw: bytes, engine_args: dict[str, Any]) -> bytes:
    """config.json as vLLM reads it with ``hf_overrides``: each field replaced before anything
    is read from the config; a JSON object for a nested config (a field holding an object
    with a ``model_type``, such as ``text_config``) updates that config's fields.  Everything
    derived from the config is then derived from the overridden one."""
    overrides = parse_engine_args({"hf_overrides": engine_args["hf_overrides"]})["hf_overrides"]
    config = _parse_config(file, raw)
    if not isinstance(config, dict):
        return raw  # refused as it is, where the config is read
    for key, value in overrides.items():
        nested = config.get(key)
        if isinstance(value, dict) and isinstance(nested, dict) and "model_type" in nested:
            config[key] = {**nested, **value}
        else:
            config[key] = value
    return json.dumps(config).encode()


def _readable_configs(paths: list[Any]) -> list[tuple[bytes, dict[str, Any]]]:
    """(bytes, parsed dict) of every local path that loads; the others (and Hugging Face repo
    ids, fetched in their turn) are left to :func:`load_pretrained`, which reports them."""
    out = []
    for path in paths:
        try:
            if not isinstance(path, (str, os.PathLike)) or not Path(path).exists():
                continue
            source = open_source(path)
            raw = source.config_bytes()
            out.append((raw, _parse_config(source.describe("config.json"), raw)))
        except InvalidInputError:
            continue
    return out


def prefetch_pretrained(paths: list[Any], *, wait: bool = True) -> int:
    """Obtain the snapshots of every readable config among *paths* in one worker request.

    Afterwards ``load_pretrained`` of any of them finds its snapshot in memory.  With
    ``wait=False`` only the worker is started (if a snapshot is missing), so that its
    transformers import runs while the caller does something else.  Returns how many
    snapshots were missing from both caches.
    """
    configs = _readable_configs(paths)
    todo = missing([d for _, d in configs])
    if not wait:
        if todo:
            start_worker()
        return len(todo)
    for (raw, _), snap in zip(configs, snapshots_for([d for _, d in configs])):
        remember_bytes(raw, snap)
    return len(todo)


def load_pretrained_many(paths: Any, engine_args: dict[str, Any]) -> list[EngineConfig]:
    """``load_pretrained`` of each path, in order, their snapshots fetched in one request
    (engine-argument errors kept for the run, as ``from_pretrained`` keeps them)."""
    if isinstance(paths, (str, bytes, os.PathLike)) or not hasattr(paths, "__iter__"):
        raise InvalidInputError.for_value("paths", paths, "a list of model folders or config.json files")
    paths = list(paths)
    check_names(engine_args)  # an unknown argument fails before any work
    prefetch_pretrained(paths)
    return [load_pretrained(p, engine_args, defer_argument_errors=True) for p in paths]


def _as_read_from_json(config: dict[str, Any]) -> dict[str, Any]:
    """The caller's dict read as its config.json would be (the transformers worker sees it so).

    A value that contains itself, nesting deeper than Python recurses, or a key JSON cannot
    hold is bad input, not a ``RecursionError`` / ``TypeError`` from deep inside the loader.
    """
    try:
        return to_json(config, strict=True)
    except RecursionError:
        reason = "it is nested too deeply (or contains itself)"
    except TypeError as exc:
        reason = " ".join(str(exc).split())
    raise InvalidInputError(f"invalid hf_config: {reason}; allowed: a dict of JSON data", field="hf_config")


def load_hf_config(config: Any, engine_args: dict[str, Any]) -> EngineConfig:
    args, deferred = check_engine_args(engine_args)
    if isinstance(config, dict):
        return _build("<dict>", _as_read_from_json(config), None, engine_args, args, deferred=deferred)
    if hasattr(config, "to_dict") and hasattr(config, "attribute_map"):
        snap = snapshot_of_object(config)
        model = str(typed.attr(config, "_name_or_path", typed.ANY) or "<hf_config>")  # a label
        return _build(model, None, snap, engine_args, args, deferred=deferred)
    raise InvalidInputError(f"invalid hf config: got {type(config).__name__}; allowed: a transformers "
                            f"PretrainedConfig or a dict", field="hf_config")


#: nested sections of a config.json that transformers builds objects from
_SECTIONS = ("quantization_config", "text_config", "vision_config", "llm_config",
             "rope_scaling", "rope_parameters")


def _check_sections(raw: dict[str, Any]) -> None:
    """transformers refused the config: a section that is no JSON object is named as bad
    input (transformers crashes on some of them, e.g. a list quantization_config), in the
    sub-configs too, and so is a ``layer_types`` that cannot be iterated over (the config
    classes check each entry)."""
    for name in _SECTIONS:
        typed.key(raw, "hf_config", name, typed.OBJECT)
    for sub in ("text_config", "vision_config", "llm_config"):
        inner = typed.key(raw, "hf_config", sub, typed.ANY)  # its type was checked just above
        if isinstance(inner, dict):
            for name in _SECTIONS:
                typed.key(inner, f"hf_config.{sub}", name, typed.OBJECT)
            typed.key(inner, f"hf_config.{sub}", "layer_types", typed.LIST, typed.STR, typed.OBJECT)


def _env_flag(name: str) -> bool:
    """A vLLM switch read from the environment as vLLM reads it: ``1`` or ``true`` (any case)."""
    return os.environ.get(name, "0").strip().lower() in ("1", "true")


def _env_int_switch(name: str, default: int) -> bool:
    """A vLLM switch read as an integer (``0`` off; vLLM's default when unset or unreadable)."""
    try:
        return bool(int(os.environ.get(name, str(default))))
    except ValueError:
        return bool(default)


_FIELD_ERROR = re.compile(r"Validation error for field '([^']+)'")


#: what a config class raises when it crashes on a value (vLLM crashes the same way)
_CRASHES = ("TypeError", "AttributeError", "KeyError", "IndexError", "ZeroDivisionError")


def _raise_load_error(err: dict[str, Any]) -> None:
    """transformers refused the config: a field of the wrong type is bad input (naming the
    field), and so is a config class crashing on a value; any other refusal (a class-level
    validator, as vLLM saw too) is vLLM's answer."""
    message = err["message"]
    if err.get("type") == "InvalidInputError":  # refused before transformers saw it (hf.limits)
        raise InvalidInputError(message, field=err.get("field"), stage="loading")
    m = _FIELD_ERROR.search(message)
    if m:
        raise InvalidInputError(f"invalid hf_config.{m[1]} in config.json: " + " ".join(message.split()),
                                field=f"hf_config.{m[1]}", stage="loading")
    if err.get("type") in _CRASHES:
        raise InvalidInputError(
            f"invalid hf_config in config.json: the config class cannot read it ({err['type']}: "
            f"{' '.join(message.split())}); allowed: the field types the model's config.json "
            f"documents", field="hf_config", stage="loading")
    raise ConfigRejectedError(message, field="config.json", stage="loading",
                              vllm_type=err.get("type", "ValueError"))


def _check_custom_code(model: str, raw: dict[str, Any] | None, snap: dict[str, Any], args: dict[str, Any]) -> None:
    """What transformers' ``AutoConfig`` decides, while vLLM loads the config, about a config
    whose ``auto_map`` names its own config class (custom code): without
    ``trust_remote_code``, a model type that neither transformers nor vLLM has a class for is
    refused (the custom code is the only way to build it).  With it, vLLM runs that code;
    enginecfg never does, and reads the config as it is."""
    if args.get("trust_remote_code") or not isinstance(raw, dict) or not isinstance(raw.get("auto_map"), dict):
        return
    ref, model_type = raw["auto_map"].get("AutoConfig"), raw.get("model_type")
    if isinstance(ref, str) and not (isinstance(model_type, str) and model_type in VLLM_REGISTERED_TYPES) \
            and snap.get("class") == "PreTrainedConfig":  # no class of transformers' either
        raise ConfigRejectedError(
            f"The repository {model} contains custom code which must be executed to correctly load the "
            f"model. You can inspect the repository content at {model} .\n You can inspect the repository "
            f"content at https://hf.co/{model}.\nPlease pass the argument `trust_remote_code=True` to allow "
            f"custom code to be run.", field="trust_remote_code")


def _build(model: str, raw: dict[str, Any] | None, snap: dict[str, Any] | None,
           given_args: dict[str, Any], args: dict[str, Any], source: ModelSource | None = None,
           deferred: list | None = None, registry: Any = None) -> EngineConfig:
    if snap is None:
        snap = snapshot_for(raw)
    _check_custom_code(model, raw, snap, args)
    if "error" in snap:
        if raw is not None:
            _check_sections(raw)
        _raise_load_error(snap["error"])
    messages: list[tuple[str, str]] = []
    if raw is not None and isinstance(snap.get("model_type"), str) and snap["model_type"] in VLLM_CLASSES:
        # vLLM's class leaves a text or vision config that is no JSON object unset, and vLLM
        # then fails reading it: bad input, named
        for section in ("text_config", "vision_config"):
            typed.key(raw, "hf_config", section, typed.OBJECT)
    snapshot = derive.vllm_view(snap, raw)
    hf = HFConfigView(snapshot)
    if source is not None and typed.attr(hf, "quantization_config", typed.ANY) is None:
        # ModelOpt 0.29 and earlier keep the quantization beside config.json: vLLM puts the
        # file's whole content on the config object as its quantization_config
        quant_file = model_files.hf_quant_config(source)
        if quant_file is not None:
            hf = HFConfigView(dict(snapshot, attrs=dict(snapshot["attrs"], quantization_config=quant_file)))
    text = hf.get_text_config()
    if text is not hf and not typed.has(text, "num_attention_heads"):
        raise ConfigRejectedError(
            "The text_config extracted from the model config does not have `num_attention_heads` attribute. "
            "This indicates a mismatch between the model config and vLLM's expectations. Please ensure that "
            "the model config is compatible with vLLM.", field="hf_config.text_config.num_attention_heads")
    # the release's own config class fills in what config.json leaves out (0.34.0's Kimi-Linear
    # class: max_position_embeddings 4096) before anything is derived from the config
    (registry or vllm_registry.REGISTRY).fill_class_defaults(text)
    derive.check_model_ints(text)
    for view in (hf, text):
        typed.attr(view, "model_type", typed.STR, expect="a string (a model type name)")
    top_type = typed.attr(hf, "model_type", typed.STR)
    archs = typed.attr(hf, "architectures", typed.ANY)  # architectures.lookup checks it
    defaulted = False
    if not archs:
        # vLLM reads ``architectures or []`` and, for none, the model type's default class
        default = snap.get("default_architecture")
        if default is None:
            raise InvalidInputError(
                "invalid hf_config.architectures: absent; allowed: a list of architecture names "
                "(config.json has no 'architectures' and its model_type is not known to transformers)",
                field="hf_config.architectures")
        archs = [default]
        defaulted = True
    arch, info = architectures.lookup(archs)
    fallback = None
    if info is architectures.GENERIC_ATTENTION:  # no class enginecfg knows: does vLLM register one?
        fallback = (registry or vllm_registry.REGISTRY).resolve(archs, hf, text)
    named = arch
    if fallback is not None:
        arch = fallback.backend_class  # what vLLM reports as the architecture it resolved
    # the files vLLM reads next, in its order: the sentence-transformers tokenizer settings,
    # transformers' image-processor files, the sentence-transformers modules
    encoder = model_files.sentence_transformers_encoder(source) if source is not None else None
    if source is not None:
        model_files.image_processor_files(source)
    # a sentence-transformers checkpoint (modules.json with a Pooling module) is a pooling
    # model whatever its architecture; a generative one is then converted to embedding
    st_pooling = model_files.sentence_transformers_pooling(source) if source is not None else None
    # the default class transformers names for a model type is its bare ``*Model``: vLLM's
    # suffix table makes that a pooling model, converted to embedding
    suffix_pooling = defaulted and not info.is_pooling and architectures.default_is_embedding(named)
    runner = args.get("runner", "auto")
    if runner in ("generate", "draft"):
        if info.is_pooling:
            # vLLM has no generative class to run: 0.19.0 fails in the model's config hook
            # (AttributeError), 0.34.0 in ModelConfig's validation (an assertion)
            raise InvalidInputError.for_value(
                "runner", runner, f"auto or pooling: {named} is a pooling model only, and vLLM fails while it "
                                  f"builds the config of a pooling class under --runner {runner}", flag="--runner")
        # a named generative runner: no conversion to a pooling model
        st_pooling, suffix_pooling = None, False
    pooling = info.is_pooling or st_pooling is not None or suffix_pooling
    convert_type = "embed" if (st_pooling is not None or suffix_pooling) and not info.is_pooling else "none"
    if args.get("runner") == "pooling" and not pooling:
        # --runner pooling: a generative class runs as a pooling model, converted as vLLM's
        # suffix table says for the pooling runner (embedding where it says nothing)
        pooling = True
        convert_type = architectures.pooling_convert_type(named)
    hybrid = architectures.is_hybrid(info, hf)
    tp = args.get("tensor_parallel_size", 1)
    is_mla = derive.is_mla(text)
    use_mla = is_mla and os.environ.get("VLLM_MLA_DISABLE", "0") in ("", "0", "false", "False")
    weights = None if source is None else (lambda: dtype_from_headers(source.safetensors_headers()))
    dtype = derive.resolve_dtype(args.get("dtype", "auto"), hf, text, top_type, pooling, messages,
                                 weights_dtype=weights)
    disable_sw = args.get("disable_sliding_window", False)
    # compared with 0 here; the length derivation and ModelConfig's validator check it
    sliding_window = typed.attr(text, "sliding_window", typed.ANY)
    if sliding_window == 0:  # vLLM: a window of 0 means none
        disable_sw = True
        text.sliding_window = sliding_window = None
    tokenizer_max = None
    if source is not None and pooling and typed.attr(hf, "position_embedding_type", typed.ANY) == "absolute":
        tok = model_files.tokenizer_config(source)
        if tok:
            tokenizer_max = tok.get("model_max_length")
    max_len = derive.max_model_len(text, args.get("max_model_len"), messages,
                                   sliding_window=sliding_window if disable_sw else None,
                                   tokenizer_max=tokenizer_max,
                                   encoder_max=encoder.get("max_seq_length") if encoder else None,
                                   allow_long=_env_flag("VLLM_ALLOW_LONG_MAX_MODEL_LEN"))
    if disable_sw:
        text.sliding_window = sliding_window = None
    head_size = derive.head_size(hf, text, top_type, is_mla)
    total_kv = derive.total_kv_heads(text, top_type)
    derive.check_buildable(text, top_type, attention_free=info.is_attention_free, is_mla=is_mla,
                           head_size=head_size, total_kv_heads=total_kv)
    num_kv = 1 if use_mla else max(1, total_kv // tp)
    chunk = mamba_state.mamba_chunk_size(text)
    derive.number(text, "chunk_size" if typed.attr(text, "mamba_chunk_size", typed.INT) is None
                  else "mamba_chunk_size", chunk)
    heads = typed.attr(text, "num_attention_heads", typed.ANY)  # kept when an integer
    quant_method = derive.quantization(hf)

    mc = ModelConfig(
        model=model, architecture=arch, architectures=list(archs), model_type=top_type,
        hf_config=hf, hf_text_config=text, runner_type="pooling" if pooling else ("draft" if runner == "draft" else "generate"),
        convert_type=convert_type, sliding_window=sliding_window, disable_sliding_window=disable_sw,
        dtype=dtype, max_model_len=max_len, head_size=head_size, total_num_kv_heads=total_kv,
        num_kv_heads=num_kv, num_attention_heads=heads if isinstance(heads, int) else None,
        use_mla=use_mla, is_hybrid=hybrid, is_attention_free=info.is_attention_free,
        supports_mamba_prefix_caching=info.supports_mamba_prefix_caching, mamba_chunk_size=chunk,
        quantization=quant_method, arch_info=info, arch_fallback=fallback,
    )
    cache_dtype = derive.checkpoint_kv_cache_dtype(hf, args.get("kv_cache_dtype", "auto"), messages)
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
        block_size=DEFAULT_BLOCK_SIZE if block_size is None else block_size,
        user_specified_block_size=block_size is not None,
        cache_dtype=cache_dtype,
        calculate_kv_scales=args.get("calculate_kv_scales", False),
        enable_prefix_caching=args.get("enable_prefix_caching"),
        mamba_cache_mode=args.get("mamba_cache_mode", "none"),
        mamba_block_size=args.get("mamba_block_size"),
        mamba_ssm_cache_dtype=args.get("mamba_ssm_cache_dtype", "auto"),
        mamba_cache_dtype=args.get("mamba_cache_dtype", "auto"),
    )
    # vLLM decides the hybrid KV cache manager from what needs it off (here: chunked local
    # attention, when the switch for it is 0); an explicit "keep it on" that cannot be kept is
    # refused after the vllm-level hooks and the checks after them
    hybrid_manager_off = args.get("disable_hybrid_kv_cache_manager")
    needs_off = hybrid_kv_cache_manager_must_be_off(
        text, chunked_local_allowed=_env_int_switch("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", 1))
    if hybrid_manager_off is None:
        if needs_off:
            messages.append(("WARNING", CHUNKED_LOCAL_ATTENTION_WARNING))
        hybrid_manager_off = needs_off
    elif hybrid_manager_off is False and needs_off:
        deferred = add_pending(list(deferred or ()), POST, ConfigRejectedError(
            HYBRID_MANAGER_NEEDED_ERROR, field="scheduler_config.disable_hybrid_kv_cache_manager"))
    pooler = None
    if pooling:
        st = st_pooling or {}
        pooler = PoolerConfig(seq_pooling_type=st.get("seq_pooling_type", "LAST"),
                              tok_pooling_type=st.get("tok_pooling_type", "ALL"),
                              use_activation=st.get("use_activation"))
    return EngineConfig(
        model_config=mc, cache_config=cc,
        attention_config=AttentionConfig(backend=args.get("attention_backend")),
        parallel_config=ParallelConfig(tensor_parallel_size=tp,
                                       pipeline_parallel_size=args.get("pipeline_parallel_size", 1)),
        scheduler_config=SchedulerConfig(enable_chunked_prefill=args.get("enable_chunked_prefill"),
                                         max_num_batched_tokens=args.get("max_num_batched_tokens"),
                                         max_num_seqs=args.get("max_num_seqs"),
                                         disable_hybrid_kv_cache_manager=hybrid_manager_off),
        pooler_config=pooler, engine_args=dict(given_args), load_messages=messages,
        source=source.provenance() if source is not None else None,
        pending_errors=list(deferred or ()),
    )
