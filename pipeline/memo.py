"""Memoising pure computations by the content of their inputs.

A run's derived figures (the ``impact`` stage's KV-cache arithmetic above all) depend only on
the resolved settings and the model's config, and an engine that starts the same model under
the same arguments again and again asks for the same figures each time.  :class:`ContentMemo`
keeps them, keyed by :func:`content_key` of everything the computation reads.

The keys are strict on purpose: a wrong hit would put another config's figures into a run's
record.  Two values get equal keys only when they are equal *with the same types all the way
down* (``1``, ``1.0`` and ``True`` compare equal in Python, but a JSON writer spells them
differently and ``isinstance(v, bool)`` tells them apart).  A value whose content the key
cannot describe raises :class:`Unkeyable`, and the caller computes without the memo.
Objects that are only known by identity (a cached transformers snapshot) are *anchors*: the
memo holds them, so their ``id`` cannot be reused while an entry names it, and a hit checks
that the anchors are the very same objects.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

from enginecfg.pipeline.jsonvalue import to_json

__all__ = ["Unkeyable", "content_key", "ContentMemo", "per_config"]

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
        return (cls, tuple([content_key(v) for v in value]))
    if cls is dict:
        return (dict, tuple([(content_key(k), content_key(v)) for k, v in value.items()]))
    raise Unkeyable(f"no content key for a {cls.__name__}")


class ContentMemo:
    """A bounded, thread-safe memo: ``key -> value``, with identity anchors per entry.

    Values are stored and handed out as they are: a caller that gives a mutable value to
    its own users copies it on the way out (:func:`per_config` does).
    """

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[Hashable, tuple[tuple[Any, ...], Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

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


def per_config(memo: ContentMemo, ctx: Any, compute: Callable[[], Any], *extra: Hashable) -> Any:
    """``compute()`` for the config a stage is looking at, answered from *memo* when a config
    with the same content (and the same *extra* key parts) was seen before.

    *compute* must read nothing but the config (and what *extra* names) and return JSON-shaped
    data (the caller gets its own copy either way) or an immutable value (shared).  An
    exception is not remembered.
    """
    try:
        anchors, key = ctx.content_key()
    except Unkeyable:
        return compute()
    key = (key, extra)
    known = memo.get(key, anchors)
    if known is None:
        known = compute()
        memo.put(key, anchors, known)
    return to_json(known) if known.__class__ in (dict, list) else known
