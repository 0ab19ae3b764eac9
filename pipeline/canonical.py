"""One canonical JSON encoding, for every hash and fingerprint enginecfg computes.

Sorted keys, no whitespace, anything exotic as its string. ``ascii_only`` chooses how text
outside ASCII is written: escaped (fingerprints and snapshot keys) or as UTF-8 (the audit
store's row hashes). Each caller keeps its choice, because the values already stored and
compared depend on it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "fingerprint"]


def _encoder(ascii_only: bool):
    # one encoder each, built once: json.dumps with options builds a new one every call
    return json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only,
                            default=str).encode


_ENCODE = {True: _encoder(True), False: _encoder(False)}


def canonical_json(value: Any, *, ascii_only: bool = True) -> str:
    return _ENCODE[ascii_only](value)


def fingerprint(value: Any) -> str:
    """sha256 of the canonical JSON of *value*: equal documents have equal fingerprints."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
