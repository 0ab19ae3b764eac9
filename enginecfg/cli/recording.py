"""The audit store a command records its runs in: ``--db``, ``--actor``, ``--no-audit``,
``--audit-best-effort``, as ``run`` and ``explain`` take them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from enginecfg.pipeline.errors import EngineCfgError

__all__ = ["open_store"]


def open_store(ns: argparse.Namespace) -> tuple[Any, int]:
    """``(store attached to the bus or None, exit code)``: the code is non-zero when the store
    cannot be opened and the command must not go on without it."""
    if getattr(ns, "no_audit", False):
        return None, 0
    try:
        from enginecfg.store import AuditStore

        return AuditStore(getattr(ns, "db", None), actor=getattr(ns, "actor", None)).attach(), 0
    except EngineCfgError as exc:
        sys.stderr.write(f"enginecfg: audit store unavailable: {' '.join(str(exc).split())}\n")
        return None, 0 if getattr(ns, "audit_best_effort", False) else 2
