"""JSON values: their kinds, the one way they are copied, and the one canonical encoding.

Config values, recorded old and new values, memoised figures, snapshot values and the run
document are JSON-shaped data: dicts, lists and plain scalars.  This module says once

- which JSON kinds a field or an argument may hold (:data:`INT`, :data:`STR`, ...: the typed
  config reads and the engine-argument table speak of the same kinds);
- how such a value is copied: :func:`to_json`, a fresh copy in JSON's own shape (dicts with
  text keys spelt as JSON spells them, lists for lists and tuples, anything else as its
  text), sharing only immutable scalars;
- how it is encoded for hashes and fingerprints: :func:`canonical_json`, :func:`fingerprint`.

It imports nothing of enginecfg: every room may use it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["INT", "NUMBER", "STR", "BOOL", "OBJECT", "LIST", "ANY", "PLAIN", "to_json",
           "canonical_json", "fingerprint"]

#: the JSON kinds, as typed reads and the engine-argument table name them
INT, NUMBER, STR, BOOL, OBJECT, LIST = "int", "number", "str", "bool", "object", "list"
#: any value at all (a read whose every value is handled, said explicitly at the read)
ANY = "any"

#: scalar classes that are immutable JSON values: shared, never copied (checked inline:
#: a layer list has 100+ entries)
PLAIN = frozenset((str, int, float, bool, type(None)))


def to_json(value: Any, *, strict: bool = False) -> Any:
    """A fresh copy of *value* in JSON's shape, as ``json.loads(json.dumps(value,
    default=str))`` would give it, without the text in between.

    Dicts (any mapping) are rebuilt with text keys spelt as JSON spells them (``1`` ->
    ``"1"``, ``True`` -> ``"true"``, ``None`` -> ``"null"``); lists and tuples become
    lists; ``str``, ``int``, ``float`` and ``bool`` (and their subclasses) are their plain
    values; a value object with ``to_dict()`` its JSON form; anything else becomes its text, ``str(value)``.  A key JSON cannot hold (a
    tuple, say) is written as its text too, unless *strict*, where it raises ``TypeError``.
    A value that contains itself raises ``RecursionError``.
    """
    return value if value.__class__ in PLAIN else _copy(value, strict)


def _copy(value: Any, strict: bool) -> Any:
    cls = value.__class__
    if cls is dict:
        return {k if k.__class__ is str else _key(k, strict): v if v.__class__ in PLAIN else _copy(v, strict)
                for k, v in value.items()}
    if cls is list or cls is tuple:
        return [v if v.__class__ in PLAIN else _copy(v, strict) for v in value]
    if cls in PLAIN:
        return value
    if isinstance(value, Mapping):
        return {_key(k, strict): _copy(v, strict) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(v, strict) for v in value]
    for base in (bool, int, float, str):  # a subclass (an IntEnum, a numpy float) as its value
        if isinstance(value, base):
            return base.__str__(value) if base is str else base(value)
    if hasattr(cls, "to_dict"):  # a value object (a fact such as ``impact``): its JSON form
        return _copy(value.to_dict(), strict)
    return str(value)


def _key(key: Any, strict: bool) -> str:
    """A dict key as JSON writes it."""
    if isinstance(key, str):
        return str.__str__(key)
    if key is True or key is False or key is None:
        return json.dumps(key)
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return json.dumps(float(key))
    if strict:
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
    return str(key)


def _encoder(ascii_only: bool):
    # one encoder each, built once: json.dumps with options builds a new one every call
    return json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only,
                            default=str).encode


_ENCODE = {True: _encoder(True), False: _encoder(False)}


def canonical_json(value: Any, *, ascii_only: bool = True) -> str:
    """The one canonical JSON text of *value*, for every hash and fingerprint enginecfg makes.

    Sorted keys, no whitespace, anything exotic as its string.  ``ascii_only`` chooses how
    text outside ASCII is written: escaped (fingerprints and snapshot keys) or as UTF-8 (the
    audit store's row hashes).  Each caller keeps its choice, because the values already
    stored and compared depend on it.
    """
    return _ENCODE[ascii_only](value)


def fingerprint(value: Any) -> str:
    """sha256 of the canonical JSON of *value*: equal documents have equal fingerprints."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
