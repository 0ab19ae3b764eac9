"""Memoising pure computations by the content of their inputs.

A run's derived figures (the KV-cache arithmetic of ``impact``, the page facts) depend only
on the resolved settings and the model's config, and an engine that starts the same model
under the same arguments again and again asks for the same figures each time.
:class:`ContentMemo` keeps them, keyed by :func:`content_key` of everything the computation
reads; :func:`memoised` makes a function of a config answer from one (vLLM's knowledge in
:mod:`enginecfg.pipeline.models` memoises its figures this way, so no caller sees it).

The keys are strict on purpose: a wrong hit would put another config's figures into a run's
record.  Two values get equal keys only when they are equal *with the same types all the way
down* (``1``, ``1.0`` and ``True`` compare equal in Python, but a JSON writer spells them
differently and ``isinstance(v, bool)`` tells them apart).  A value whose content the key
cannot describe raises :class:`Unkeyable`, and the caller computes without the memo.
A frozen attrs instance (a GPU preset, a start-up decision) is keyed by its class and its
fields, in order, each keyed the same way; an attrs class whose instances can be assigned to
is not keyed at all (its content could move after the key was taken).
Objects that are only known by identity (a cached transformers snapshot) are *anchors*: the
memo holds them, so their ``id`` cannot be reused while an entry names it, and a hit checks
that the anchors are the very same objects.

Every memo is emptied by the one :func:`enginecfg.pipeline.hf.clear`.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, Hashable

import attrs

from enginecfg.pipeline.jsonvalue import to_json

__all__ = ["Unkeyable", "content_key", "same_content", "ContentMemo", "memoised", "clear_all"]

_SCALARS = (str, int, bool, type(None))


class Unkeyable(Exception):
    """A value with no content key (an object without value semantics)."""


def content_key(value: Any) -> Hashable:
    """A hashable key equal for two values exactly when they are equal with the same types."""
    cls = value.__class__
    if cls in _SCALARS:
        return (cls, value)
    if cls is float:  # hex: -0.0 and 0.0 differ, and a NaN equals itself
        return (float, value.hex())
    if cls is list or cls is tuple:
        types = tuple(map(type, value))
        if _PLAIN.issuperset(types):
            # strings, integers, booleans and None only (a layer-kind list): the items and
            # their types side by side, three parts where the general key has two
            return (cls, tuple(value), types)
        return (cls, tuple([content_key(v) for v in value]))
    if cls is dict:
        key_types, value_types = tuple(map(type, value)), tuple(map(type, value.values()))
        if _PLAIN.issuperset(key_types) and _PLAIN.issuperset(value_types):
            return (dict, tuple(value.items()), key_types, value_types)
        return (dict, tuple([(content_key(k), content_key(v)) for k, v in value.items()]))
    names = _frozen_fields(cls)
    if names is not None:
        return (cls, tuple([content_key(getattr(value, name)) for name in names]))
    raise Unkeyable(f"no content key for a {cls.__name__}")


def same_content(a: Any, b: Any) -> bool:
    """``content_key(a) == content_key(b)`` for JSON-shaped values, without building either
    key (a config's state compares what it read again with the state before at every stage
    boundary).  False where it cannot tell (a value of another kind, a NaN): never True for
    two values whose keys differ."""
    cls = a.__class__
    if cls is not b.__class__:
        return False
    if cls in _SCALARS:
        return a == b
    if cls is float:
        return a.hex() == b.hex()
    if cls is list or cls is tuple:
        return _same_items(a, b)
    if cls is dict:
        return len(a) == len(b) and _same_items(list(a), list(b)) and _same_items(list(a.values()), list(b.values()))
    return False


#: element types for which ``==`` between two of the same type is content equality
_PLAIN = frozenset(_SCALARS)


def _same_items(a: Any, b: Any) -> bool:
    """Two sequences of the same class: the same content item by item."""
    if len(a) != len(b) or a != b:  # a quick refusal (and NaN compares unequal: False)
        return False
    types = list(map(type, a))
    if types != list(map(type, b)):
        return False
    if _PLAIN.issuperset(types):
        return True
    return all(c in _PLAIN or same_content(x, y) for c, x, y in zip(types, a, b))


@attrs.frozen
class _FrozenProbe:
    """What attrs makes a frozen class's ``__setattr__``: the test of :func:`_frozen_fields`."""


_FROZEN_SETATTR = _FrozenProbe.__setattr__


@functools.cache
def _frozen_fields(cls: type) -> tuple[str, ...] | None:
    """The field names of a frozen attrs class (None for any other class)."""
    if not attrs.has(cls) or cls.__setattr__ is not _FROZEN_SETATTR:
        return None
    return tuple(a.name for a in attrs.fields(cls))


#: every memo of the process, for :func:`clear_all`
_MEMOS: "weakref.WeakSet[ContentMemo]" = weakref.WeakSet()


class ContentMemo:
    """A bounded, thread-safe memo: ``key -> value``, with identity anchors per entry.

    Values are stored and handed out as they are: a caller that gives a mutable value to
    its own users copies it on the way out (:func:`memoised` does).
    """

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[Hashable, tuple[tuple[Any, ...], Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        _MEMOS.add(self)

    def get(self, key: Hashable, anchors: tuple[Any, ...], default: Any = None) -> Any:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or len(entry[0]) != len(anchors) or any(
                    a is not b for a, b in zip(entry[0], anchors)):
                self.misses += 1
                return default
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]

    def put(self, key: Hashable, anchors: tuple[Any, ...], value: Any) -> None:
        with self._lock:
            self._entries[key] = (anchors, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


def clear_all() -> None:
    """Empty every memo of the process (part of :func:`enginecfg.pipeline.hf.clear`)."""
    for memo in list(_MEMOS):
        memo.clear()


_MISS = object()


def memoised(memo: ContentMemo) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``fn(cfg, **options)`` answered from *memo* when a config with the same
    content (and the same options) was seen before.

    *cfg* is an engine config: its ``state()`` gives ``content_key()``, the ``(anchors,
    key)`` of every field it holds, this run's writes into the transformers config, the
    model class's facts and, by identity, the snapshot read.  *fn* must read nothing but the
    config and its options, and return JSON-shaped data (the caller gets its own copy either
    way) or an immutable value (shared).  A config or an option the key cannot describe is
    computed afresh; an exception is not remembered.
    """
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def options_key(**options: Any) -> Hashable:
            """The key of *options* (raises :class:`Unkeyable`): a caller whose options are
            frozen values it holds takes it once and hands it to :func:`keyed`."""
            return content_key({name: options[name] for name in sorted(options)})

        def keyed(cfg: Any, key_of_options: Hashable, **options: Any) -> Any:
            """``call(cfg, **options)`` with ``options_key(**options)`` taken before."""
            try:
                anchors, key = cfg.state().content_key()
            except Unkeyable:
                return fn(cfg, **options)
            key = (key, key_of_options)
            known = memo.get(key, anchors, _MISS)
            if known is _MISS:
                known = fn(cfg, **options)
                memo.put(key, anchors, known)
            return to_json(known) if known.__class__ in (dict, list) else known

        @functools.wraps(fn)
        def call(cfg: Any, **options: Any) -> Any:
            # keyed() spelt out: the options are not packed and unpacked twice on every call
            try:
                anchors, key = cfg.state().content_key()
                key = (key, content_key({name: options[name] for name in sorted(options)}))
            except Unkeyable:
                return fn(cfg, **options)
            known = memo.get(key, anchors, _MISS)
            if known is _MISS:
                known = fn(cfg, **options)
                memo.put(key, anchors, known)
            return to_json(known) if known.__class__ in (dict, list) else known
        call.memo = memo
        call.options_key = options_key
        call.keyed = keyed
        return call
    return wrap
