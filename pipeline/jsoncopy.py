"""Deep copies of JSON-shaped data, without ``copy.deepcopy``'s bookkeeping.

Config values, recorded old and new values, memoised figures and a view's copy-on-read
values are dicts, lists and plain scalars; copying them is on every run's path.  Anything
else inside them goes through ``copy.deepcopy``.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["PLAIN", "copy_json"]

#: leaves that are immutable: shared, not copied (checked inline: a layer list has 100+)
PLAIN = frozenset((str, int, float, bool, type(None)))


def copy_json(value: Any) -> Any:
    """A deep copy of *value*: dicts and lists rebuilt, plain scalars shared."""
    cls = value.__class__
    if cls is dict:
        return {k: v if v.__class__ in PLAIN else copy_json(v) for k, v in value.items()}
    if cls is list:
        return [v if v.__class__ in PLAIN else copy_json(v) for v in value]
    if cls in PLAIN:
        return value
    return copy.deepcopy(value)
