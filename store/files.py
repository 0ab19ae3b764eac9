"""Files the audit commands read: keys, checkpoints and exports, read within a bound.

Each is named by a user (``--key-file``, ``--checkpoint``, ``--i-have-exported``) and may be
anything a path can name: a file far larger than any key, a pipe, ``/dev/zero``.  So a read
stops at a limit that no genuine file of its kind reaches, and the caller refuses the file
with the limit named, instead of reading without end:

- a key (:data:`KEY_FILE_LIMIT`, 64 KiB): an Ed25519 key in PEM is about 120 bytes, a shared
  secret a few dozen;
- a checkpoint file (:data:`CHECKPOINT_FILE_LIMIT`, 1 GiB, and :data:`CHECKPOINT_LINE_LIMIT`,
  64 MiB, per line): a checkpoint carries 4 bytes per run (5.4 MB per million runs, on one
  line), so one line holds the checkpoint of a store of ten million runs, and the file the
  mirror's JSON lines of a store of some two hundred thousand runs;
- an export (:data:`EXPORT_LINE_LIMIT`, 256 MiB per line): it is read a line at a time
  (a row), so its length is not bounded, but each row is, by far more than a run's documents
  take.

A regular file larger than its limit is refused from its size, before a byte is read; a
pipe or a device is refused once the limit is passed, a line without end (``/dev/zero``)
once the line limit is.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import IO

__all__ = ["KEY_FILE_LIMIT", "CHECKPOINT_FILE_LIMIT", "CHECKPOINT_LINE_LIMIT",
           "EXPORT_LINE_LIMIT", "TooLarge", "read_bounded", "bounded_lines", "size_text"]

KEY_FILE_LIMIT = 64 * 1024
CHECKPOINT_FILE_LIMIT = 1 << 30
CHECKPOINT_LINE_LIMIT = 64 << 20
EXPORT_LINE_LIMIT = 256 << 20


class TooLarge(Exception):
    """The file passed its limit; the message says how (``larger than 64 KiB``)."""


def size_text(n: int) -> str:
    """A byte count as people read a limit: ``64 KiB``, ``1 GiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def read_bounded(path: str | os.PathLike, limit: int, line_limit: int | None = None) -> bytes:
    """The bytes of *path*, read only while they stay within *limit* (and every line within
    *line_limit*); :class:`TooLarge` once they do not.  ``OSError`` as ``open`` raises it."""
    with open(path, "rb") as fh:
        info = os.fstat(fh.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise TooLarge(f"it holds {info.st_size:,} bytes, more than the {size_text(limit)} "
                           "allowed")
        if line_limit is None:
            data = fh.read(limit + 1)
            if len(data) > limit:
                raise TooLarge(f"it holds more than the {size_text(limit)} allowed")
            return data
        parts: list[bytes] = []
        total = 0
        for line in bounded_lines(fh, line_limit):
            total += len(line)
            if total > limit:
                raise TooLarge(f"it holds more than the {size_text(limit)} allowed")
            parts.append(line)
        return b"".join(parts)


def bounded_lines(fh: IO[bytes], line_limit: int) -> Iterator[bytes]:
    """The lines of a binary file, each checked against *line_limit* as it is read (a line
    is never held longer than that): :class:`TooLarge` at the first that passes it."""
    while True:
        line = fh.readline(line_limit + 1)
        if not line:
            return
        if len(line) > line_limit:
            raise TooLarge(f"a line of it is longer than the {size_text(line_limit)} allowed")
        yield line
