"""The option tables of ``vllm serve``: one per release enginecfg holds a dump of, each kept as
what that release's parser changed on the table of the release before it.

``options/0.19.0.json`` is the first table whole; every later file names the table it changes
(``"on"``) and, for each of the three parts, the entries it sets (new or changed) and the ones
it drops.  ``tools/dump_vllm_serve_flags.py table`` writes them from the dumps of each release's
own parser (``tests/data/**/vllm_serve_flags*.json``); a test composes every table and compares
it with its dump.

An :class:`OptionTable` is the composed table of one release:

- ``VLLM_SERVE_OPTIONS``: option string -> how many values follow it (0, 1, or argparse's
  ``'?'``, ``'*'``, ``'+'``);
- ``VLLM_SERVE_CHOICES``: option string -> (the name the parser gives the option in its errors,
  its choices, the name of the type the parser turns a value into before it looks it up);
- ``VLLM_SERVE_SWITCHES``: the ``--x/--no-x`` and ``--enable-x/--disable-x`` options -> (the
  destination the parser sets, the value the option sets it to).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import attrs

__all__ = ["OptionTable", "held", "table"]

_HERE = Path(__file__).resolve().parent / "options"
_PARTS = ("options", "choices", "switches")


def _frozen(part: str, value: Any) -> Any:
    if part == "options":
        return value
    if part == "choices":
        name, choices, kind = value
        return (name, tuple(choices), kind)
    dest, sets = value
    return (dest, bool(sets))


@attrs.frozen
class OptionTable:
    """The ``vllm serve`` option table of one release (see the module doc)."""

    VLLM_VERSION: str
    VLLM_SERVE_OPTIONS: Mapping[str, int | str] = attrs.field(repr=False)
    VLLM_SERVE_CHOICES: Mapping[str, tuple[str, tuple[str, ...], str | None]] = attrs.field(repr=False)
    VLLM_SERVE_SWITCHES: Mapping[str, tuple[str, bool]] = attrs.field(repr=False)


def held(name: str) -> bool:
    """Whether enginecfg holds release *name*'s own option table."""
    return (_HERE / f"{name}.json").is_file()


@lru_cache(maxsize=None)
def table(name: str) -> OptionTable:
    """Release *name*'s option table, composed from the first table through each change."""
    data = json.loads((_HERE / f"{name}.json").read_text(encoding="utf-8"))
    base = table(data["on"]) if data.get("on") else None
    parts = []
    for part, attr in zip(_PARTS, ("VLLM_SERVE_OPTIONS", "VLLM_SERVE_CHOICES", "VLLM_SERVE_SWITCHES")):
        merged = dict(getattr(base, attr)) if base is not None else {}
        change = data[part]
        for key in change.get("drop", ()):
            del merged[key]
        merged.update({key: _frozen(part, value) for key, value in change.get("set", {}).items()})
        parts.append(MappingProxyType(dict(sorted(merged.items()))))
    return OptionTable(data["vllm"], *parts)
