"""Loading the same model folder again: every file re-read and compared, nothing re-derived.

An engine (or a CI job, or ``plan``) that resolves one model again and again pays for the
model facts each time: the architecture lookup, the dtype, the lengths, the text config, the
sentence-transformers settings.  They are a pure function of what the loader read: the bytes
of ``config.json`` and of every other file it looked at (or found absent), the engine
arguments, the path as given and vLLM's switches (``VLLM_MLA_DISABLE``,
``VLLM_ALLOW_LONG_MAX_MODEL_LEN``).  :class:`LoadMemo` keeps one
loaded config per (path, arguments) as a template, with the bytes of every file read for it.

A later load re-reads every one of those files through a new :class:`ModelSource` (so the
run's provenance records them, hashed, as before) and takes the template only when each
file's bytes are the same and each absent file is still absent; otherwise it loads afresh.
A file the first load did not read cannot change the answer unless one it read changed.
The caller always gets a copy of the template (:func:`clone_config`): fresh sections, a fresh
view of the shared transformers snapshot carrying copies of the load's own writes.

Where the dtype came from the weights, the folder's safetensors files are listed and their
headers read again too, and must be the same files with the same headers.  Not kept: Hugging
Face repos (reads go through the hub) and loads with a deferred engine-argument error.
"""

from __future__ import annotations

import functools
import operator
import os
import types
from typing import Any, Hashable

import attrs

from enginecfg.pipeline.config import SECTIONS, BaseEngineConfig, ConfigState
from enginecfg.pipeline.jsonvalue import to_json
from enginecfg.pipeline.hf import ContentMemo, ModelSource, Unkeyable, content_key, on_clear

__all__ = ["LoadMemo", "LOADS", "clone_config"]


#: the environment switches of vLLM's that change what a load derives
_SWITCHES = ("VLLM_MLA_DISABLE", "VLLM_ALLOW_LONG_MAX_MODEL_LEN")


@attrs.frozen
class _Template:
    config_bytes: bytes
    #: every other file the load found: (name, bytes)
    reads: tuple[tuple[str, bytes], ...]
    #: the files the load looked for and did not find
    absent: tuple[str, ...]
    #: the safetensors headers read (file name, sha256 of the header), or None if not looked at
    headers: tuple[tuple[str, str], ...] | None
    cfg: BaseEngineConfig
    #: the template's state, taken once: a copy starts from it (:meth:`BaseEngineConfig.adopt_state`)
    state: ConfigState


def _headers_read(source: ModelSource) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, rec.sha256) for name, rec in source.files.items() if rec.how == "header"))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    """A section's slots to copy (its back-reference to the config is set by the new one)."""
    return tuple(a.name for a in attrs.fields(cls) if a.name != "_engine")


@functools.cache
def _fields_getter(cls: type) -> Any:
    """All of a section's slots to copy, read in one call."""
    names = _field_names(cls)
    get = operator.attrgetter(*names)
    return get if len(names) > 1 else (lambda sec: (get(sec),))


def _clone_section(sec: Any) -> Any:
    return _section_cloner(type(sec))(sec)


@functools.cache
def _section_cloner(cls: type) -> Any:
    """A function copying a section of class *cls*: a new object with each slot set as it
    stands (a list or dict copied, past the assignment hook), compiled once per class as attrs
    compiles a class's ``__init__``: a loaded copy costs one call per section, not one lookup
    per field.  A class without slots is copied field by field."""
    names = _field_names(cls)
    slots = [getattr(cls, name, None) for name in names]
    if not all(isinstance(slot, types.MemberDescriptorType) for slot in slots):
        def clone(sec: Any) -> Any:
            new = object.__new__(cls)
            for name, value in zip(names, _fields_getter(cls)(sec)):
                object.__setattr__(new, name, to_json(value) if value.__class__ in (list, dict) else value)
            return new
        return clone
    scope: dict[str, Any] = {"new_object": object.__new__, "cls": cls, "copy": to_json, "CONTAINERS": (list, dict)}
    lines = ["def clone(sec):", "    new = new_object(cls)"]
    for i, (name, slot) in enumerate(zip(names, slots)):
        scope[f"set_{i}"] = slot.__set__
        lines.append(f"    value = sec.{name}")
        lines.append(f"    set_{i}(new, copy(value) if value.__class__ in CONTAINERS else value)")
    lines.append("    return new")
    exec("\n".join(lines), scope)  # noqa: S102 - field names of our own attrs classes
    return scope["clone"]


@functools.cache
def _config_fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, default) of a config class's fields; a default is a value, an attrs Factory,
    or attrs.NOTHING (the copy always gives it)."""
    return tuple((a.name, a.default) for a in attrs.fields(cls))


def _new_config(cls: type, values: dict[str, Any]) -> BaseEngineConfig:
    """``cls(**values)``, the fields set as attrs' ``__init__`` sets them (the values given,
    else each default), without the assignment hook: a copy of a loaded config needs no
    validation, and counts no replacement of its sections."""
    new = _config_maker(cls)(values)
    new.__attrs_post_init__()
    return new


@functools.cache
def _config_maker(cls: type) -> Any:
    """:func:`_new_config` for class *cls* without the post-init: compiled once per class, as
    :func:`_section_cloner` is (field by field where a field is not a slot)."""
    fields = _config_fields(cls)
    slots = [getattr(cls, name, None) for name, _ in fields]
    if not all(isinstance(slot, types.MemberDescriptorType) for slot in slots):
        return functools.partial(_fill_config, cls)
    scope: dict[str, Any] = {"new_object": object.__new__, "cls": cls, "NOTHING": attrs.NOTHING}
    lines = ["def make(values):", "    new = new_object(cls)"]
    for i, ((name, default), slot) in enumerate(zip(fields, slots)):
        scope[f"set_{i}"] = slot.__set__
        if default is attrs.NOTHING:
            lines.append(f"    if {name!r} not in values:")
            lines.append(f"        raise TypeError(cls.__name__ + ': no value for ' + {name!r})")
            lines.append(f"    set_{i}(new, values[{name!r}])")
        elif isinstance(default, attrs.Factory):
            scope[f"factory_{i}"] = default.factory
            made = f"factory_{i}(new)" if default.takes_self else f"factory_{i}()"
            lines.append(f"    set_{i}(new, values[{name!r}] if {name!r} in values else {made})")
        else:
            scope[f"default_{i}"] = default
            lines.append(f"    set_{i}(new, values.get({name!r}, default_{i}))")
    lines.append("    return new")
    exec("\n".join(lines), scope)  # noqa: S102 - field names of our own attrs class
    return scope["make"]


def _fill_config(cls: type, values: dict[str, Any]) -> BaseEngineConfig:
    new = object.__new__(cls)
    for name, default in _config_fields(cls):
        if name in values:
            value = values[name]
        elif isinstance(default, attrs.Factory):
            value = default.factory(new) if default.takes_self else default.factory()
        elif default is attrs.NOTHING:
            raise TypeError(f"{cls.__name__}: no value for {name}")
        else:
            value = default
        object.__setattr__(new, name, value)
    return new


def clone_config(template: BaseEngineConfig, source: ModelSource | None,
                 engine_args: dict[str, Any], state: ConfigState | None = None) -> BaseEngineConfig:
    """A copy of a loaded (not yet run) config that shares nothing mutable with it;
    *state*: the template's state, taken of it as it is, for the copy to start from."""
    sections = {name: _clone_section(sec) for name in SECTIONS
                if (sec := getattr(template, name)) is not None}
    mc = sections["model_config"]
    hf, text = template.model_config.hf_config, template.model_config.hf_text_config
    if hf is not None:
        new_hf = hf.clone()
        object.__setattr__(mc, "hf_config", new_hf)
        if text is not None:
            _, _, path = text.anchor()
            object.__setattr__(mc, "hf_text_config", new_hf if text is hf else new_hf.at(path))
    new = _new_config(type(template), {
        **sections, "engine_args": dict(engine_args), "load_messages": list(template.load_messages),
        "source": source.provenance() if source is not None else None})
    if state is not None:
        new.adopt_state(state)
    return new


class LoadMemo:
    """Loaded configs by (path, working folder, engine arguments, MLA switch); bounded.

    The bound holds a fleet's worth of settings: one entry per model folder, engine
    arguments and release, evicted least recently used.  A set of configs resolved in turn
    that is larger than the bound misses on every load (each entry is evicted just before
    it is asked for again): 34 fixture configs under two releases (68 entries) did so with
    a bound of 64.  A template is small (the sections, the load's own writes; the snapshot
    is shared with the snapshot cache)."""

    def __init__(self, maxsize: int = 256) -> None:
        self._templates = ContentMemo(maxsize)
        self.hits = 0

    @staticmethod
    def key(path: Any, revision: str | None, engine_args: dict[str, Any]) -> Hashable | None:
        try:
            args = content_key(engine_args)
            text = os.fspath(path)
            # a relative path means another folder elsewhere; an absolute one, the same anywhere
            cwd = None if isinstance(text, str) and os.path.isabs(text) else os.getcwd()
        except (Unkeyable, OSError, TypeError):  # OSError: the working folder was removed
            return None
        return (text, type(path), revision, cwd, args, tuple(os.environ.get(name) for name in _SWITCHES))

    def get(self, key: Hashable, source: ModelSource, config_bytes: bytes,
            engine_args: dict[str, Any]) -> BaseEngineConfig | None:
        """A copy of the template for *key* if every file it was loaded from reads the same."""
        entry: _Template | None = self._templates.get(key, ())
        if entry is None or entry.config_bytes != config_bytes:
            return None
        for name, data in entry.reads:
            if source.read_bytes(name) != data:
                return None
        if not source.still_absent(entry.absent):
            return None
        if entry.headers is not None:
            source.safetensors_headers()  # the folder listed and each header read again
            if _headers_read(source) != entry.headers:
                return None
        self.hits += 1
        return clone_config(entry.cfg, source, engine_args, entry.state)

    def put(self, key: Hashable, source: ModelSource, config_bytes: bytes, cfg: BaseEngineConfig) -> None:
        """Keep *cfg* (just loaded from *source*, not run yet) as the template for *key*."""
        if source.kind == "hub" or cfg.pending_errors:
            return
        try:
            template = clone_config(cfg, None, cfg.engine_args)
        except (TypeError, KeyError):  # a load-time write this copy cannot make: not kept
            return
        found = source.reads()
        reads = tuple((name, data) for name, data in found.items() if name != "config.json" and data is not None)
        absent = tuple(name for name, data in found.items() if data is None)
        headers = _headers_read(source) if source.safetensors_read else None
        self._templates.put(key, (), _Template(config_bytes, reads, absent, headers, template, template.state(None)))

    def clear(self) -> None:
        self._templates.clear()
        self.hits = 0

    def __len__(self) -> int:
        return len(self._templates)


#: the process's memo of loaded configs (``load_pretrained``); its templates hold snapshots,
#: so it is emptied with the snapshot memory cache
LOADS = LoadMemo()
on_clear(LOADS.clear)
