"""A field's history as a chart: the geometry of an SVG line chart, computed here and drawn
by the page's template (which escapes every text in it).

Numbers are placed on a linear scale; any other values (text, true/false, null, lists) on
one level per distinct value, in the order they first appear.  Runs go left to right, oldest
first, evenly spaced (a chart of changes, not of time).
"""

from __future__ import annotations

import json
from typing import Any

import attrs

__all__ = ["Point", "Chart", "history_chart"]

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 120, 20, 20, 40


@attrs.frozen
class Point:
    x: float
    y: float
    label: str          # the value as JSON
    run_id: str
    started_at: str | None
    changed: bool       # a stage changed the field in this run


@attrs.frozen
class Chart:
    width: int
    height: int
    points: tuple[Point, ...]
    #: (y, label) of each tick on the value axis
    ticks: tuple[tuple[float, str], ...]
    #: the polyline through the points, as SVG "x,y x,y" text
    path: str
    first: str | None
    last: str | None
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v \
        and v not in (float("inf"), float("-inf"))


def history_chart(entries: list[dict[str, Any]]) -> Chart | None:
    """The chart of :func:`enginecfg.store.queries.field_history` entries (newest first, as
    it returns them); None when there is nothing to draw."""
    entries = list(reversed(entries))
    if not entries:
        return None
    values = [e.get("value") for e in entries]
    inner_h = HEIGHT - TOP - BOTTOM
    inner_w = WIDTH - LEFT - RIGHT
    if all(_is_number(v) for v in values):
        lo, hi = min(values), max(values)
        span = (hi - lo) or 1
        ys = [TOP + inner_h - (v - lo) / span * inner_h for v in values]
        ticks = tuple((TOP + inner_h - (t - lo) / span * inner_h, _num(t))
                      for t in sorted({lo, hi, lo + (hi - lo) / 2}))
    else:
        levels: list[str] = []
        for v in values:
            text = json.dumps(v, sort_keys=True, default=str)
            if text not in levels:
                levels.append(text)
        step = inner_h / max(len(levels) - 1, 1)
        where = {t: TOP + inner_h - i * step for i, t in enumerate(levels)}
        ys = [where[json.dumps(v, sort_keys=True, default=str)] for v in values]
        ticks = tuple((where[t], t if len(t) <= 16 else t[:15] + "…") for t in levels)
    n = len(entries)
    xs = [LEFT + (inner_w / 2 if n == 1 else i * inner_w / (n - 1)) for i in range(n)]
    points = tuple(Point(round(x, 1), round(y, 1), json.dumps(e.get("value"), default=str),
                         e["run_id"], e.get("started_at"), bool(e.get("changed")))
                   for x, y, e in zip(xs, ys, entries))
    path = " ".join(f"{p.x},{p.y}" for p in points)
    return Chart(WIDTH, HEIGHT, points, tuple((round(y, 1), t) for y, t in ticks), path,
                 entries[0].get("started_at"), entries[-1].get("started_at"))


def _num(v: float) -> str:
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.4g}"
