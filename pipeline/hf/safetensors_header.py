"""Read the header of a safetensors file without touching its tensors.

A safetensors file starts with an 8-byte little-endian length and then that many bytes of
JSON: one entry per tensor (``{"dtype": "BF16", "shape": [...], "data_offsets": [...]}``)
plus an optional ``__metadata__`` map of strings.  vLLM 0.19.0 reads exactly this (and
nothing else) to find a model's dtype when ``config.json`` does not say it, so enginecfg
reads the same bytes: a 100 GB shard costs two small reads.

The header is parsed as vLLM parses it (``json.loads`` of exactly the announced bytes), but a
file that is not a safetensors file is reported as bad input naming the file, not as a
``struct.error`` or ``JSONDecodeError``.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["MAX_HEADER_BYTES", "HeaderRead", "read_header", "parse_header"]

#: upper bound on the JSON header (the safetensors format itself allows 100 MB)
MAX_HEADER_BYTES = 100_000_000


class HeaderRead:
    """One header: its parsed JSON, the raw bytes' sha256 and how many bytes were read."""

    __slots__ = ("header", "sha256", "bytes_read", "file_size")

    def __init__(self, header: dict[str, Any], sha256: str, bytes_read: int, file_size: int | None):
        self.header = header
        self.sha256 = sha256
        self.bytes_read = bytes_read
        self.file_size = file_size


def _bad(name: str, why: str) -> InvalidInputError:
    return InvalidInputError(f"invalid safetensors file {name}: {why}; allowed: a safetensors file "
                             f"(8-byte header length, then a JSON header)", field="safetensors")


def parse_header(name: str, prefix: bytes, body: bytes) -> dict[str, Any]:
    """The JSON header from its 8-byte length *prefix* and the header *body* bytes."""
    if len(prefix) != 8:
        raise _bad(name, f"only {len(prefix)} bytes long")
    (length,) = struct.unpack("<Q", prefix)
    if len(body) != length:
        raise _bad(name, f"header announces {length} bytes but the file holds {len(body)}")
    try:
        header = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise _bad(name, "header is not UTF-8") from None
    except ValueError as exc:
        raise _bad(name, f"header is not JSON ({getattr(exc, 'msg', exc)})") from None
    if not isinstance(header, dict):
        raise _bad(name, f"header is a JSON {type(header).__name__}, not an object")
    return header


def read_header(path: str | os.PathLike) -> HeaderRead:
    """Read only the length prefix and the JSON header of the safetensors file at *path*."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            prefix = fh.read(8)
            if len(prefix) != 8:
                raise _bad(p.name, f"only {len(prefix)} bytes long")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES or 8 + length > size:
                raise _bad(p.name, f"header length {length} does not fit a {size}-byte file")
            body = fh.read(length)
    except OSError as exc:
        raise InvalidInputError(f"invalid safetensors file {p.name}: cannot read it: {exc.strerror or exc}",
                                field="safetensors") from None
    header = parse_header(p.name, prefix, body)
    return HeaderRead(header, hashlib.sha256(prefix + body).hexdigest(), 8 + length, size)
