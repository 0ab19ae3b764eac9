"""Typed reads of model-config fields: the expected type, the allowed values, the dotted name.

A config.json can hold any JSON value anywhere.  Code that reads ``quant_algo`` and uses it
as a dict key, or multiplies ``head_dim``, turns a value of the wrong type into a
``TypeError`` deep inside enginecfg.  Every such read goes through :func:`attr` (an
attribute of an :class:`~enginecfg.pipeline.hf.view.HFConfigView`) or :func:`key` (a key of a
JSON object inside the config, such as ``quantization_config``), which checks the value and
raises :class:`~enginecfg.InvalidInputError` naming the dotted field (``hf_config.
quantization_config.quant_algo``), the value and what is allowed.  Where vLLM itself accepts
a value of another type, the caller asks for the wider type and does what vLLM does with it
(``ANY`` where vLLM takes every value: it compares it with known ones, tests it for truth or
checks it with a message of its own).  :class:`Section` binds a view to its dotted name and
to what reads it, for code that reads many fields of one section (the Mamba state recipes,
the KV-cache layer patterns).  ``tests/test_raw_reads.py`` fails on a config read that goes
around this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.jsonvalue import ANY, BOOL, INT, LIST, NUMBER, OBJECT, STR

__all__ = ["INT", "NUMBER", "STR", "BOOL", "OBJECT", "LIST", "ANY", "ABSENT", "describe", "check",
           "attr", "key", "has", "field_of", "fail", "Section"]

# the JSON kinds (INT, STR, ... ANY) are :mod:`enginecfg.pipeline.jsonvalue`'s; ANY is for a
# read whose every value vLLM handles (it compares the value with known ones, or passes it
# on to a check of its own), said explicitly at the read

_NAMES = {INT: "an integer", NUMBER: "a number", STR: "a string", BOOL: "true or false",
          OBJECT: "a JSON object", LIST: "a list", ANY: "any value"}
#: a field that is not there at all (``check`` of it fails, ``fail`` says "absent")
ABSENT = object()
_MISSING = ABSENT


def _is(value: Any, kind: str) -> bool:
    if kind == ANY:
        return True
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUMBER:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and not (isinstance(value, float) and math.isnan(value)))
    if kind == STR:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == OBJECT:
        return isinstance(value, Mapping)
    if kind == LIST:
        return isinstance(value, (list, tuple))
    if kind == ANY:
        return True
    raise ValueError(f"unknown kind {kind!r}")


def describe(kinds: tuple[str, ...], optional: bool) -> str:
    words = [_NAMES[k] for k in kinds] + (["null"] if optional else [])
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def fail(field: str, given: Any, allowed: str, why: str | None = None) -> InvalidInputError:
    """The error for ``field`` holding ``given`` (``ABSENT``: the field is missing) where
    ``allowed`` is what may stand there; ``why`` says what reads it (kept in the message)."""
    shown = "absent" if given is ABSENT else repr(given)
    tail = f" ({why})" if why else ""
    return InvalidInputError(f"invalid {field}: got {shown}; allowed: {allowed}{tail}", field=field)


def check(field: str, value: Any, *kinds: str, optional: bool = True,
          allowed: Callable[[Any], bool] | None = None, allowed_text: str | None = None,
          expect: str | None = None, why: str | None = None) -> Any:
    """``value`` if it is one of ``kinds`` (None passes when ``optional``) and ``allowed``
    accepts it; else :class:`InvalidInputError` naming ``field``.

    The message says what is allowed: the kinds (``allowed_text`` added after them), or
    ``expect`` in place of both; ``why`` (what reads the field) is added in parentheses."""
    if value is None and optional:
        return None
    if value is not ABSENT and any(_is(value, k) for k in kinds) \
            and (allowed is None or allowed(value)):
        return value
    what = expect or describe(kinds, optional)
    if allowed_text and not expect:
        what = f"{what}: {allowed_text}"
    raise fail(field, value, what, why)


def field_of(view: Any, name: str, at: str | None = None) -> str:
    """The dotted name of attribute ``name`` of ``view`` (``hf_config.text_config.head_dim``);
    ``at`` names the view itself where the caller knows it better than the view does."""
    if at is not None:
        return f"{at}.{name}"
    path = getattr(view, "_path", "")
    return f"hf_config.{path + '.' if path else ''}{name}"


def _value(view: Any, name: str) -> Any:
    """Attribute ``name`` of a config view (or any object with attributes), or ``ABSENT``.

    The one place where enginecfg reads a model-config attribute by name.  A view that
    offers ``_field_or`` answers for a missing field without raising (an ``AttributeError``
    caught by ``getattr`` costs more than the read: runs read a hundred fields, many absent);
    names the view's class defines itself are read as attributes, as ``getattr`` would."""
    cls = type(view)
    fast = getattr(cls, "_field_or", None)
    if fast is not None and not hasattr(cls, name):
        return fast(view, name, _MISSING)
    return getattr(view, name, _MISSING)


def has(view: Any, name: str) -> bool:
    """Does the config view have attribute ``name`` at all (a None value counts)?"""
    return _value(view, name) is not _MISSING


def _passes(value: Any, kinds: tuple[str, ...], kw: dict[str, Any]) -> bool:
    """The common case of :func:`check`, without building the field's name: a value that
    passes needs no message, and every run reads some hundred fields."""
    if value is None:
        return kw.get("optional", True)
    if value is ABSENT:
        return False
    if kinds[0] is ANY or (kinds[0] is INT and type(value) is int):
        # the two commonest reads, decided by one comparison
        allowed = kw.get("allowed")
        return allowed is None or allowed(value)
    for kind in kinds:
        if _is(value, kind):
            allowed = kw.get("allowed")
            return allowed is None or allowed(value)
    return False


def attr(view: Any, name: str, *kinds: str, default: Any = None, required: bool = False,
         at: str | None = None, **kw: Any) -> Any:
    """Attribute ``name`` of a config view, checked to be one of ``kinds``.

    Absent: ``default`` (unchecked), or with ``required`` an error saying it is absent."""
    if not kinds:
        raise TypeError("typed.attr needs the kinds it allows (typed.ANY for any value)")
    value = _value(view, name)
    if value is _MISSING and not required:
        return default
    if _passes(value, kinds, kw):
        return value
    return check(field_of(view, name, at), value, *kinds, **kw)


def key(obj: Mapping[str, Any], field: str, name: str, *kinds: str, default: Any = None,
        required: bool = False, **kw: Any) -> Any:
    """Key ``name`` of the JSON object ``obj`` (itself the field ``field``), checked to be one
    of ``kinds``; absent: ``default`` (or with ``required`` an error), as in :func:`attr`."""
    if not kinds:
        raise TypeError("typed.key needs the kinds it allows (typed.ANY for any value)")
    value = obj[name] if name in obj else _MISSING
    if value is _MISSING and not required:
        return default
    if _passes(value, kinds, kw):
        return value
    return check(f"{field}.{name}", value, *kinds, **kw)


class Section:
    """One config view read for one purpose: its dotted name and why it is read.

    Every read is :func:`attr` with ``at`` and ``why`` filled in, so that code reading many
    fields of one section (the Mamba state recipes) names each the same way."""

    __slots__ = ("view", "at", "why")

    def __init__(self, view: Any, at: str, why: str | None = None):
        self.view, self.at, self.why = view, at, why

    def field(self, name: str) -> str:
        return f"{self.at}.{name}"

    def has(self, name: str) -> bool:
        return has(self.view, name)

    def attr(self, name: str, *kinds: str, **kw: Any) -> Any:
        kw.setdefault("why", self.why)
        return attr(self.view, name, *kinds, at=self.at, **kw)

    def check(self, name: str, value: Any, *kinds: str, **kw: Any) -> Any:
        kw.setdefault("why", self.why)
        return check(self.field(name), value, *kinds, **kw)

    def fail(self, name: str, given: Any, allowed: str) -> InvalidInputError:
        return fail(self.field(name), given, allowed, self.why)
