"""One spelling of every value, in every command people read.

Config values are spelt as JSON (``null``, ``true``, ``"auto"``, ``784``): they are typed
back as such.  The figures a run records (``impact.*``) are spelt as ``explain`` and ``plan``
print them: counts with thousands separators (``311,248``), concurrency as requests
(``58.85x``), other fractions to two places.  ``--json`` and ``--csv`` keep the numbers as
they are.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["value", "figure", "concurrency", "is_concurrency"]


def is_concurrency(field: str) -> bool:
    """Whether *field* holds a concurrency (requests that fit at once), or its range."""
    field = field.replace("impact.kv_range.", "impact.", 1)
    return field in ("impact.max_concurrency", "max_concurrency") or field.startswith("impact.concurrency.")


def concurrency(x: float | None) -> str:
    """Requests that fit at once: ``58.85x`` (``-``: not worked out)."""
    return "-" if x is None else f"{x:,.2f}x"


def figure(field: str, v: Any) -> str:
    """A recorded figure as ``explain`` prints it (a range's ends each so: ``[307.01x, 342.79x]``)."""
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                 for x in v):
        return "[" + ", ".join(figure(field, x) for x in v) + "]"
    if isinstance(v, bool) or v is None or not isinstance(v, (int, float)):
        return json.dumps(v, default=str)
    if is_concurrency(field):
        return concurrency(v)
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.2f}"


def value(field: str, v: Any) -> str:
    """A stored value of *field* as people read it: a figure (``impact.*``) as ``explain``
    prints it, anything else as JSON."""
    if field.split(".")[0] == "impact":
        return figure(field, v)
    return json.dumps(v, default=str)
