"""The tamper-evident hash of a run and of each of its child rows.

``row_hash`` of a child row is sha256 over a canonical JSON of its fields; ``row_hash`` of a
run is sha256 over a canonical JSON of the run's own fields, its ``prev_hash`` and
``chain_pos``, and the ordered child hashes of every child table.  So editing any row,
deleting or adding a child row, or moving a run in the chain changes a hash that
``verify`` recomputes.

The field lists are fixed here, not read from the models, so that a later migration adding
a column does not silently change the hash of rows written before it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from enginecfg.pipeline.canonical import canonical_json

__all__ = [
    "RUN_FIELDS",
    "OPTIONAL_RUN_FIELDS",
    "CHILD_FIELDS",
    "CHILD_ORDER",
    "canonical",
    "child_hash",
    "run_hash",
]

RUN_FIELDS = (
    "id", "chain_pos", "prev_hash", "started_at", "finished_at", "recorded_at", "status",
    "enginecfg_version", "host", "pid", "model", "architecture", "engine_args",
    "planned_stages", "input_config", "input_fingerprint", "result", "result_fingerprint",
    "error", "failed_stage", "n_stages", "n_changes", "n_messages", "n_checks",
)

#: run fields added after the first runs were written: hashed only when set, so that the hash
#: of a run written before the field existed does not change
OPTIONAL_RUN_FIELDS = ("source",)

CHILD_FIELDS: dict[str, tuple[str, ...]] = {
    "stage_executions": ("run_id", "stage_order", "stage", "origin", "outcome", "duration_s",
                         "n_changes", "error"),
    "changes": ("run_id", "seq", "stage", "field", "old", "new", "reason", "level", "via"),
    "messages": ("run_id", "seq", "stage", "level", "message"),
    "validation_checks": ("run_id", "seq", "check", "kernel", "shapes", "dtype", "max_error",
                          "tolerance", "passed", "device", "seconds", "detail"),
}

#: The column each child table is ordered by within a run.
CHILD_ORDER = {"stage_executions": "stage_order", "changes": "seq", "messages": "seq",
               "validation_checks": "seq"}


def canonical(value: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no whitespace, NaN/Infinity spelled out."""
    return canonical_json(value, ascii_only=False).encode("utf-8")


def _sha(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def child_hash(table: str, row: Mapping[str, Any]) -> str:
    """The hash of one child row of ``table``."""
    return _sha({"table": table, **{f: row.get(f) for f in CHILD_FIELDS[table]}})


def run_hash(run: Mapping[str, Any], children: Mapping[str, Sequence[str]]) -> str:
    """The hash of a run: its fields (with prev_hash and chain_pos) and its children's hashes.

    ``children`` maps each child table name to the row hashes of that table's rows of the
    run, in the table's :data:`CHILD_ORDER`.
    """
    body = {f: run.get(f) for f in RUN_FIELDS}
    for f in OPTIONAL_RUN_FIELDS:
        if run.get(f) is not None:
            body[f] = run[f]
    body["children"] = {t: list(children.get(t, ())) for t in CHILD_FIELDS}
    return _sha(body)
