"""Typed reads of model-config fields: the expected type, the allowed values, the dotted name.

A config.json can hold any JSON value anywhere.  Code that reads ``quant_algo`` and uses it
as a dict key, or multiplies ``head_dim``, turns a value of the wrong type into a
``TypeError`` deep inside enginecfg.  Every such read goes through :func:`attr` (an
attribute of an :class:`~enginecfg.pipeline.hfview.HFConfigView`) or :func:`key` (a key of a
JSON object inside the config, such as ``quantization_config``), which checks the value and
raises :class:`~enginecfg.InvalidInputError` naming the dotted field (``hf_config.
quantization_config.quant_algo``), the value and what is allowed.  Where vLLM itself accepts
a value of another type, the caller asks for the wider type and does what vLLM does with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["INT", "NUMBER", "STR", "BOOL", "OBJECT", "LIST", "describe", "check", "attr", "key",
           "field_of"]

#: the JSON types, as the accessor names them
INT, NUMBER, STR, BOOL, OBJECT, LIST = "int", "number", "str", "bool", "object", "list"

_NAMES = {INT: "an integer", NUMBER: "a number", STR: "a string", BOOL: "true or false",
          OBJECT: "a JSON object", LIST: "a list"}
_MISSING = object()


def _is(value: Any, kind: str) -> bool:
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
    raise ValueError(f"unknown kind {kind!r}")


def describe(kinds: tuple[str, ...], optional: bool) -> str:
    words = [_NAMES[k] for k in kinds] + (["null"] if optional else [])
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def check(field: str, value: Any, *kinds: str, optional: bool = True,
          allowed: Callable[[Any], bool] | None = None, allowed_text: str | None = None) -> Any:
    """``value`` if it is one of ``kinds`` (None passes when ``optional``) and ``allowed``
    accepts it; else :class:`InvalidInputError` naming ``field``."""
    if value is None and optional:
        return None
    if any(_is(value, k) for k in kinds) and (allowed is None or allowed(value)):
        return value
    what = describe(kinds, optional)
    if allowed_text:
        what = f"{what}: {allowed_text}"
    raise InvalidInputError.for_value(field, value, what)


def field_of(view: Any, name: str) -> str:
    """The dotted name of attribute ``name`` of ``view`` (``hf_config.text_config.head_dim``)."""
    path = getattr(view, "_path", "")
    return f"hf_config.{path + '.' if path else ''}{name}"


def attr(view: Any, name: str, *kinds: str, default: Any = None, **kw: Any) -> Any:
    """Attribute ``name`` of a config view, checked (absent: ``default``, unchecked)."""
    value = getattr(view, name, _MISSING)  # a config view, or any object with attributes
    if value is _MISSING:
        return default
    return check(field_of(view, name), value, *kinds, **kw)


def key(obj: Mapping[str, Any], field: str, name: str, *kinds: str, default: Any = None,
        **kw: Any) -> Any:
    """Key ``name`` of the JSON object ``obj`` (itself the field ``field``), checked."""
    if name not in obj:
        return default
    return check(f"{field}.{name}", obj[name], *kinds, **kw)
