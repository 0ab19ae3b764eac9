"""What the command line prints is text a terminal shows, never an instruction to it.

Folder names, config values and a plugin's reasons reach the output as they were given, and
may hold control characters: ``ESC [2J`` clears the screen, ``ESC ]`` sets the window title,
a carriage return or a bidirectional override makes a line read otherwise than it is.  They
may also hold a lone surrogate (a file name's byte that is not UTF-8, a ``\\udXXX`` escape in a
JSON file), which no UTF-8 stream can write.  :func:`neutral` spells each such character as
an escape a person reads (``\\x1b``, ``\\u202e``, ``\\udce9``); tabs and line ends stay.

:func:`neutral_streams` puts it between the command and its standard streams for the whole
command: what people read (tables, reports, error lines) is neutral, whatever printed it.
The stored values stay exact, and so do the machine formats: JSON escapes every such
character itself, and CSV (``--csv``) escapes each cell by a rule of its own, which can be
read back (:func:`enginecfg.pipeline.jsonvalue.csv_cell`); the stream under CSV spells only
what the rule leaves (nothing, as it stands) and keeps tabs and line ends.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["neutral", "NeutralStream", "neutral_streams"]

#: C0 controls but tab and line feed, DEL, C1 controls, and the bidirectional formatting
#: characters (embeddings, overrides, isolates, marks)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def neutral(text: str, *, controls: bool = True) -> str:
    """*text* as a terminal may show it: control characters (``controls``) and lone
    surrogates spelt as escapes; anything else as it is."""
    if controls and not text.isprintable():
        text = _CONTROL.sub(_escape, text)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class NeutralStream:
    """A text stream that writes :func:`neutral` text into another; everything else
    (``isatty``, ``fileno``, ``flush``, ``encoding``) is the other stream's."""

    def __init__(self, inner: TextIO, *, controls: bool = True):
        self.inner = inner
        self.controls = controls

    def write(self, text: str) -> int:
        self.inner.write(neutral(text, controls=self.controls))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextmanager
def neutral_streams(*, stdout: bool = True, stderr: bool = True,
                    machine_stdout: bool = False) -> Iterator[None]:
    """For the duration: ``sys.stdout`` and ``sys.stderr`` (those asked for) write
    :func:`neutral` text.  ``machine_stdout``: stdout carries CSV, whose cells are escaped
    already (:func:`~enginecfg.pipeline.jsonvalue.csv_cell`): only lone surrogates are
    spelt there, should any reach it, and line ends stay."""
    saved = sys.stdout, sys.stderr
    if stdout:
        sys.stdout = NeutralStream(saved[0], controls=not machine_stdout)  # type: ignore[assignment]
    if stderr:
        sys.stderr = NeutralStream(saved[1])  # type: ignore[assignment]
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr = saved
