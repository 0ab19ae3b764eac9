"""JSON values: their kinds, the one way they are copied, and the one canonical encoding.

Config values, recorded old and new values, memoised figures, snapshot values and the run
document are JSON-shaped data: dicts, lists and plain scalars.  This module says once

- which JSON kinds a field or an argument may hold (:data:`INT`, :data:`STR`, ...: the typed
  config reads and the engine-argument table speak of the same kinds);
- how such a value is copied: :func:`to_json`, a fresh copy in JSON's own shape (dicts with
  text keys spelt as JSON spells them, lists for lists and tuples, anything else as its
  text), sharing only immutable scalars;
- how it is encoded for hashes and fingerprints: :func:`canonical_json`, :func:`fingerprint`;
- how it is written as a CSV cell: :func:`csv_cell`.

It imports nothing of enginecfg: every room may use it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["INT", "NUMBER", "STR", "BOOL", "OBJECT", "LIST", "ANY", "PLAIN", "to_json",
           "canonical_json", "fingerprint", "csv_cell"]

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


#: what a CSV cell never holds as it is: C0 controls (tab, line feed and carriage return
#: included), DEL, C1 controls, the bidirectional formatting characters, lone surrogates, and
#: the backslash that starts an escape
_CSV_ESCAPED = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: a cell starting with one of these is read as a formula by spreadsheets (``'`` is the mark
#: this module puts in front of such a cell, so it is marked too)
_CSV_FORMULA_START = frozenset("=+-@'")
#: a plain decimal number (``-3``, ``-0.25``, ``-1e-05``): a spreadsheet reads it as a number
_CSV_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def _csv_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x5C:
        return "\\\\"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def csv_cell(value: Any) -> str:
    """*value* as the text of one CSV cell: safe to open in a spreadsheet, one line, and
    read back unambiguously.

    The rule, the same for every CSV enginecfg writes (``--csv``, ``export --format csv``):

    - None is the empty cell (as is the empty text); anything else is its text (``str``);
    - a backslash is written ``\\\\``, and each control character (tab, line feed, carriage
      return and the other C0 controls, DEL, the C1 controls), bidirectional formatting
      character and lone surrogate as its escape, ``\\xNN`` below U+0100, else ``\\uNNNN``:
      so a cell holds no line end and every record is one line;
    - then a cell that starts with ``=``, ``+``, ``-``, ``@`` (what spreadsheets take for a
      formula) or ``'`` gets one ``'`` in front, unless the whole cell is a plain decimal
      number (``-3``, ``-0.25``, ``-1e-05``), which stays a number.

    Reading a cell back: drop one leading ``'``, then turn ``\\\\``, ``\\xNN`` and
    ``\\uNNNN`` back into their characters.  Commas and double quotes are left to the CSV
    quoting itself.
    """
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if not (text.isprintable() and "\\" not in text) or not text.isascii():
        text = _CSV_ESCAPED.sub(_csv_escape, text)
    if text and text[0] in _CSV_FORMULA_START and not _CSV_NUMBER.fullmatch(text):
        text = "'" + text
    return text
