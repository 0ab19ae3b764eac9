"""Plain-text tables that keep what must be typed whole and wrap the prose instead.

Stage names, field names and run ids are typed back into the CLI (``--skip-stage``,
``why RUN FIELD``), so a table never breaks or cuts them: *name* columns keep their full
width and the other columns share what is left of the terminal, wrapping at spaces.  When
not even that fits, each row is printed as a block (names on one line, the rest indented
below), which still keeps every name whole.  A quoted value (a JSON string) is a name too:
its column is at least as wide as it, or the rows become blocks.  The width is ``COLUMNS`` if set, else the
terminal's, else 100 for piped output.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from typing import Any, Sequence, TextIO

__all__ = ["width", "render", "paragraph"]

_GAP = "  "
_MIN_PROSE = 16


def width(stream: TextIO | None = None) -> int:
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    stream = stream or sys.stdout
    try:
        if stream.isatty():
            return shutil.get_terminal_size().columns
    except (AttributeError, ValueError):
        pass
    return 100


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _quoted(text: str) -> bool:
    """A quoted value: a JSON string, typed back as it is, so never broken."""
    return len(text) > 1 and text.startswith('"') and text.endswith('"') and "\n" not in text


def _wrap(text: str, w: int) -> list[str]:
    """A prose cell's lines: wrapped at spaces; a quoted value never (its column is made wide
    enough, see :func:`render`)."""
    if _quoted(text):
        return [text]
    out: list[str] = []
    for line in text.split("\n") or [""]:
        out += textwrap.wrap(line, w, break_on_hyphens=False) or [""]
    return out


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, names: Sequence[int] = (0,),
           title: str | None = None, total: int | None = None, min_prose: int = _MIN_PROSE) -> str:
    """The table as text; columns whose index is in *names* are never broken.  A column name
    may hold ``\n``: the header then takes several lines."""
    total = total or width()
    cells = [[_cell(c) for c in r] for r in rows]
    heads = [c.split("\n") for c in columns]
    natural = [max([max(len(h) for h in heads[i])] + [max((len(x) for x in r[i].split("\n")), default=0)
                                                    for r in cells]) for i in range(len(columns))]
    kept = [i for i in range(len(columns)) if i in names]
    prose = [i for i in range(len(columns)) if i not in names]
    gaps = len(_GAP) * (len(columns) - 1)
    room = total - gaps - sum(natural[i] for i in kept)
    widths = list(natural)
    # a prose column is never narrower than what a short word needs, nor than its quoted values
    floor = {i: max([min(natural[i], min_prose)] + [len(r[i]) for r in cells if _quoted(r[i])]) for i in prose}
    if prose and sum(natural[i] for i in prose) > room:  # names alone are never broken
        if room < sum(max(min_prose, floor[i]) for i in prose):
            return _blocks([c.replace("\n", " ") for c in columns], cells, kept, prose, title, total)
        # shrink the widest prose columns first, each down to its floor
        excess = sum(natural[i] for i in prose) - room
        while excess > 0:
            shrinkable = [j for j in prose if widths[j] > floor[j]]
            if not shrinkable:
                break
            i = max(shrinkable, key=lambda j: widths[j])
            widths[i] -= 1
            excess -= 1
    lines = _title(title, total)
    depth = max(len(h) for h in heads)
    for k in range(depth):
        lines.append(_GAP.join((heads[i][k] if k < len(heads[i]) else "").ljust(widths[i])
                               for i in range(len(columns))).rstrip())
    lines.append(_GAP.join("-" * widths[i] for i in range(len(columns))))
    for r in cells:
        parts = [r[i].split("\n") if i in names else _wrap(r[i], widths[i]) for i in range(len(columns))]
        for k in range(max(len(p) for p in parts)):
            lines.append(_GAP.join((p[k] if k < len(p) else "").ljust(widths[i])
                                   for i, p in enumerate(parts)).rstrip())
    return "\n".join(lines)


def _title(title: str | None, total: int) -> list[str]:
    return textwrap.wrap(title, total, break_long_words=False, break_on_hyphens=False) if title else []


def _blocks(columns, cells, kept, prose, title, total) -> str:
    lines = _title(title, total)
    for r in cells:
        lines.append(_GAP.join(f"{r[i]}" for i in kept if r[i]))
        for i in prose:
            if r[i] and _quoted(r[i]):
                lines.append(f"    {columns[i]}: {r[i]}")  # a quoted value stays whole
            elif r[i]:
                lines += textwrap.wrap(f"{columns[i]}: {r[i]}", total, initial_indent="    ",
                                       subsequent_indent="      ", break_on_hyphens=False)
    return "\n".join(lines)


def paragraph(text: str, *, indent: str = "", hanging: str | None = None, total: int | None = None) -> str:
    """*text* wrapped to the width, at spaces (a long word stays whole)."""
    total = total or width()
    return "\n".join(textwrap.wrap(text, max(20, total), initial_indent=indent,
                                   subsequent_indent=indent if hanging is None else hanging,
                                   break_long_words=False, break_on_hyphens=False))


def write_csv(out: TextIO, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """The same table as CSV (a header row, then the rows), each cell as
    :func:`~enginecfg.pipeline.jsonvalue.csv_cell` writes it (None empty, control characters
    escaped, a formula's first character marked)."""
    import csv

    from enginecfg.pipeline.jsonvalue import csv_cell

    w = csv.writer(out, lineterminator="\n")
    w.writerow([csv_cell(c) for c in columns])
    for r in rows:
        w.writerow([csv_cell(c) for c in r])
