"""A pasted log, line by line: the prefixes taken off, the wrapped lines put back together.

What users paste is rarely what vLLM wrote.  Before a line can be read, everything around
vLLM's own record is taken off: ANSI colours, a Markdown quote (``> ``) or inline code
(`` `...` ``), whatever a container or a log collector put in front (``docker compose``'s
``service  | ``, ``docker logs -t``'s timestamps, journald's ``host unit[pid]: ``, a job
runner's own tags: anything before vLLM's process tag or record header), vLLM's process tag
(``(EngineCore_DP0 pid=7)``, ``(Worker_TP1 pid=9)``, ``(VllmWorker rank=0 pid=3)``), a
pipeline's stage tag (``[Stage-0]``) and the record header (``INFO 04-07 02:46:21
[gpu_worker.py:436]``, or a log viewer's shortened ``05:17:43 INFO``).  What is left is the
message, in vLLM's words.

A terminal wraps long lines at its width, and people wrap them by hand: a piece of a line that
starts a physical line of its own is joined back to the record it belongs to (see
:func:`logical_lines`).  Each :class:`Line` keeps the number of the physical line it starts
on, counted from 1 in the text as given.
"""

from __future__ import annotations

import re
from typing import Iterator

import attrs

__all__ = ["Line", "logical_lines"]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
#: vLLM's process tag: ``(APIServer pid=1)``, ``(EngineCore_DP0 pid=7)``, ``(Worker_TP1 pid=9)``,
#: ``(VllmWorker rank=0 pid=3)``, ``(Worker_DP1_EP1 pid=3)``
_PROCESS = re.compile(r"\((?P<process>[A-Za-z][A-Za-z0-9_]*)(?: rank=(?P<rank>\d+))? pid=\d+\)\s?")
_STAGE_TAG = re.compile(r"\s*\[Stage-\d+\]\s*")
#: a record header, ``INFO 04-07 02:46:21 [gpu_worker.py:436] `` (the date may be missing, as
#: may the bracket before the file in the oldest releases)
_HEADER = re.compile(r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
                     r"(?:\d\d-\d\d\s+\d\d:\d\d:\d\d(?:[.,]\d+)?\s+)?\[?(?P<source>[\w./-]+\.py:\d+)\]\s?")
#: a level with no source after it, where a log viewer shortened the header to a clock time and the
#: level (``05:17:43 INFO Using max model len 65536``); only at the start of what is left
_BARE_LEVEL = re.compile(r"^(?:\d\d:\d\d:\d\d(?:[.,]\d+)?\s+)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?=\S)")
_QUOTE = re.compile(r"^(?:>\s?)+")
#: physical lines that begin something of their own, never the rest of a wrapped one
_OWN_START = re.compile(
    r"^(?:\s*$|[\[(`#>*|-]|\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|\d+%|Traceback|File |Loading |Capturing |"
    r"Processed |Rendering |Prompt|Warning|WARNING|INFO|ERROR|DEBUG)")
_TQDM = re.compile(r"\d+%\s*(?:Completed\s*)?\|")
#: a physical line shorter than this was not wrapped by a terminal
_WRAP_WIDTH = 60


@attrs.frozen
class Line:
    """One logical line: where it starts (``number``, from 1), the vLLM process that wrote it
    (``process``, ``rank``; None when the line has no process tag), the record's level and
    source (None for a line without a record header: a traceback, a print, a pasted excerpt)
    and the ``message`` in vLLM's words."""

    number: int
    message: str
    process: str | None = None
    rank: int | None = None
    level: str | None = None
    source: str | None = None
    #: the physical lines it was put together from (1 unless wrapped)
    physical: int = 1

    @property
    def tagged(self) -> bool:
        """Did vLLM's own prefix (a process tag or a record header) mark the line?"""
        return self.process is not None or self.level is not None


def _clean(raw: str) -> str:
    text = _ANSI.sub("", raw.replace("\r", ""))
    text = _QUOTE.sub("", text)
    stripped = text.strip()
    if len(stripped) >= 2 and stripped.startswith("`") and stripped.endswith("`") and not stripped.startswith("```"):
        text = stripped.strip("`")
    return text


def _split(text: str) -> tuple[str, str | None, int | None, str | None, str | None]:
    """``(message, process, rank, level, source)`` of one cleaned physical line."""
    process = rank = level = source = None
    rest = text
    m = _PROCESS.search(text)
    if m:
        process = m.group("process")
        rank = int(m.group("rank")) if m.group("rank") else None
        rest = text[m.end():]
        rest = _STAGE_TAG.sub("", rest, count=1) if _STAGE_TAG.match(rest) else rest
    h = _HEADER.search(rest)
    if h:  # whatever stands before the header is a collector's prefix
        level, source = h.group("level"), h.group("source")
        rest = rest[h.end():]
    else:
        if m is None:
            rest = rest.strip()
        b = _BARE_LEVEL.match(rest)
        if b:
            level, rest = b.group("level"), rest[b.end():]
    return rest.rstrip(), process, rank, level, source


def logical_lines(text: str) -> Iterator[Line]:
    """The logical lines of *text* (see the module doc), in order."""
    current: Line | None = None
    previous_raw = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        cleaned = _clean(raw)
        message, process, rank, level, source = _split(cleaned)
        tagged = process is not None or level is not None
        if current is not None and not tagged and cleaned.strip():
            if cleaned[:1].isspace() and current.level is not None and not cleaned.lstrip().startswith("File "):
                # a record wrapped by hand: its next line indented under it
                current = attrs.evolve(current, message=f"{current.message} {cleaned.strip()}",
                                       physical=current.physical + 1)
                previous_raw = cleaned
                continue
            if (len(previous_raw) >= _WRAP_WIDTH and current.tagged and not _OWN_START.match(cleaned)
                    and not _TQDM.search(cleaned) and (cleaned[0].islower() or cleaned[0].isdigit()
                                                       or cleaned[0] in "_.,;:)]}'\"")):
                # a record the terminal wrapped at its width: the rest goes on where it broke
                current = attrs.evolve(current, message=current.message + cleaned.rstrip(),
                                       physical=current.physical + 1)
                previous_raw = cleaned
                continue
        if current is not None:
            yield current
        current = Line(number, message, process, rank, level, source)
        previous_raw = cleaned
    if current is not None:
        yield current
