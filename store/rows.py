"""Row building: a run's buffered events become the rows of the audit tables, hashed.

:class:`RunBuffer` holds what the bus said about one run; :func:`build_rows` turns it, with
the outcome and the :class:`Identity` of the process that records it, into the ``runs`` row
and the rows of each child table, their text made storable and each child row hashed.  The
run's own hash needs the chain head, so the writer finishes it inside its transaction
(:class:`~enginecfg.store.hashing.PreparedRunHash`).  Nothing here touches a database.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from enginecfg.pipeline import events
from enginecfg.store.hashing import child_hashes, current_layout
from enginecfg.store.models import TEXT_COLUMNS, encode_json, normalise_json, storable_text

__all__ = ["RunBuffer", "Identity", "TEXTS", "CHILD_ORDER", "build_rows", "impact_columns", "memory_columns",
           "MEMORY_COLUMNS_SINCE", "RELEASE_COLUMNS_SINCE", "EARLIER_RELEASE", "release_columns",
           "with_json", "storable_texts"]

#: the child tables in the order a run's rows are written
CHILD_ORDER = ("stage_executions", "changes", "messages", "validation_checks")

#: where a row keeps the JSON columns' texts that :func:`encode_json` produced: bound as
#: they are on SQLite (tests check they equal what the column type itself writes there)
TEXTS = "__json_texts__"

_INT64_MIN, _INT64_MAX = -2 ** 63, 2 ** 63 - 1


@attrs.frozen
class Identity:
    """Who records a run: the host and process, enginecfg's version, the operating-system
    user, and the actor named explicitly (a service account, a CI job; None: none named)."""

    host: str
    pid: int
    version: str
    os_user: str
    actor: str | None = None


@attrs.define
class RunBuffer:
    """The events of one run, kept until it finishes."""

    started: events.RunStarted
    stages: dict[int, dict[str, Any]] = attrs.Factory(dict)
    changes: list[events.ConfigChanged] = attrs.Factory(list)
    messages: list[events.WarningIssued] = attrs.Factory(list)
    checks: list[events.ValidationChecked] = attrs.Factory(list)


def real(value: Any) -> float | None:
    """A float column value; NaN becomes NULL (SQLite cannot store NaN in a REAL)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def with_json(row: dict[str, Any], **values: Any) -> dict[str, Any]:
    """Put JSON column values into *row*, normalised, each encoded once (None stays None)."""
    texts = row.setdefault(TEXTS, {})
    for name, value in values.items():
        if value is None:
            row[name] = None
            continue
        row[name], texts[name] = encode_json(value)
    return row


def storable_texts(table: str, rows: list[dict[str, Any]]) -> None:
    """Make each text column's value one the drivers can send (:func:`storable_text`),
    before the rows are hashed: the hash covers what is stored."""
    names = TEXT_COLUMNS[table]
    for row in rows:
        for name in names:
            value = row.get(name)
            if isinstance(value, str) and ("\x00" in value or not value.isascii()):
                row[name] = storable_text(value)


def impact_columns(document: Any) -> dict[str, Any]:
    """The headline KV-cache figures of a run document's ``impact``, as their columns hold
    them.  None when a figure is absent, and when a column cannot hold it: NaN (SQLite would
    store NULL, PostgreSQL NaN, and NaN equals nothing when ``verify`` compares), a count
    that is not finite or not a 64-bit integer, a number too large for a double.  The
    result document keeps every figure exactly; a figure the columns cannot hold must not
    keep the run out of the store, nor make ``verify`` report it edited."""
    impact = document.get("impact") if isinstance(document, dict) else None
    if not isinstance(impact, dict):
        impact = {}

    def number(key: str, kind: type) -> Any:
        value = impact.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return None
        try:
            value = kind(value)
        except (OverflowError, ValueError):  # int(inf), float(10**400)
            return None
        return value if kind is float or _INT64_MIN <= value <= _INT64_MAX else None

    return {"kv_tokens": number("kv_tokens", int),
            "max_concurrency": number("max_concurrency", float),
            "max_model_len_fits": number("max_model_len_fits", int)}


#: the hash layout from which runs hold :func:`memory_columns` (revision 0009_impact_memory)
MEMORY_COLUMNS_SINCE = 3


def memory_columns(document: Any) -> dict[str, Any]:
    """What a run document's ``impact`` assumed (the GPU, its memory, vLLM's memory flags)
    and whether vLLM would start, as their columns hold them; None where the document has no
    such figure (no figures at all, or a run recorded before they were)."""
    impact = document.get("impact") if isinstance(document, dict) else None
    memory = impact.get("memory") if isinstance(impact, dict) else None
    if not isinstance(memory, dict):
        memory = {}

    def number(key: str, kind: type) -> Any:
        value = memory.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return None
        try:
            value = kind(value)
        except (OverflowError, ValueError):
            return None
        return value if kind is float or _INT64_MIN <= value <= _INT64_MAX else None

    gpu = memory.get("gpu")
    starts = impact.get("starts") if isinstance(impact, dict) else None
    return {"gpu": gpu if isinstance(gpu, str) and len(gpu) <= 64 else None,
            "gpu_memory_bytes": number("gpu_memory_bytes", int),
            "gpu_memory_utilization": number("gpu_memory_utilization", float),
            "kv_cache_memory": number("kv_cache_memory", int),
            "kv_cache_memory_bytes": number("kv_cache_memory_bytes", int),
            "num_gpu_blocks_override": number("num_gpu_blocks_override", int),
            "starts": starts if isinstance(starts, bool) else None}


#: the hash layout from which runs hold :func:`release_columns` (revision 0010_release)
RELEASE_COLUMNS_SINCE = 4

#: the release of a run whose document names none: every run recorded before releases were
#: named was decided by vLLM 0.19.0's rules (revision 0010_release gives old rows this value)
EARLIER_RELEASE = "0.19.0"


#: :func:`release_columns` given this GPU keeps it as it is (a run hashed with a layout
#: before :data:`RELEASE_COLUMNS_SINCE` holds only the figures' card)
_NO_FILL = object()


def release_columns(document: Any, gpu: Any) -> dict[str, Any]:
    """The vLLM release a run document speaks for, and the GPU the run assumes, as their
    columns hold them.  ``vllm_version``: the document's, else :data:`EARLIER_RELEASE`.
    ``gpu``: *gpu* (the card of the KV-cache figures, :func:`memory_columns`), else the
    document's start-up GPU (``gpu.name``), else None: one GPU per run serves both, so a run
    without figures (refused, or the figures left out) still names its card."""
    doc = document if isinstance(document, dict) else {}
    release = doc.get("vllm_version")
    if not isinstance(release, str) or not release:
        release = EARLIER_RELEASE
    if gpu is _NO_FILL:
        return {"vllm_version": release}
    if gpu is None:
        card = doc.get("gpu")
        name = card.get("name") if isinstance(card, dict) else None
        gpu = name if isinstance(name, str) and len(name) <= 64 else None
    return {"vllm_version": release, "gpu": gpu}


def build_rows(buf: RunBuffer, who: Identity, *, status: str, finished_at: float,
               document: dict | None, fingerprint: str | None, error: dict | None,
               failed_stage: str | None) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The run row (without its chain fields and hash) and its child rows, hashed."""
    s = buf.started
    run_id = s.run_id
    architecture = s.architecture
    if architecture is None and isinstance(document, dict):
        mc = (document.get("config") or {}).get("model_config") or {}
        architecture = mc.get("architecture") if isinstance(mc, dict) else None
    stages = [
        {"run_id": run_id, "stage_order": order, "stage": st["stage"],
         "origin": st.get("origin", "unknown"), "outcome": st.get("outcome", "unfinished"),
         "duration_s": real(st.get("duration_s")), "n_changes": int(st.get("n_changes", 0)),
         "error": st.get("error")}
        for order, st in sorted(buf.stages.items())
    ]
    changes = [
        with_json({"run_id": run_id, "seq": c.seq, "stage": c.stage, "field": c.field,
                   "reason": c.reason, "level": c.level, "via": c.via,
                   "explanation": c.explanation}, old=c.old, new=c.new)
        for c in sorted(buf.changes, key=lambda c: c.seq)
    ]
    messages = [
        {"run_id": run_id, "seq": m.seq, "stage": m.stage, "level": m.level,
         "message": m.message}
        for m in sorted(buf.messages, key=lambda m: m.seq)
    ]
    checks = [
        {"run_id": run_id, "seq": i, "check": v.check, "kernel": v.kernel,
         "shapes": normalise_json(v.shapes), "dtype": v.dtype,
         "max_error": real(v.max_error), "tolerance": real(v.tolerance),
         "passed": bool(v.passed), "device": v.device, "seconds": float(v.seconds),
         "detail": v.detail}
        for i, v in enumerate(buf.checks, start=1)
    ]
    memory = memory_columns(document)
    run_row = {
        "id": run_id, "started_at": float(s.started_at), "finished_at": float(finished_at),
        "status": status, "enginecfg_version": who.version, "host": who.host,
        "pid": who.pid, "model": str(s.model), "architecture": architecture,
        "input_fingerprint": s.input_fingerprint,
        "result_fingerprint": fingerprint, "error": normalise_json(error) if error else None,
        "failed_stage": failed_stage, "n_stages": len(stages), "n_changes": len(changes),
        "n_messages": len(messages), "n_checks": len(checks),
        **impact_columns(document),
        **memory,
        **release_columns(document, memory["gpu"] if current_layout() >= RELEASE_COLUMNS_SINCE
                          else _NO_FILL),
        "os_user": who.os_user, "actor": who.actor,
        "hash_layout": current_layout(),
    }
    with_json(run_row, engine_args=s.engine_args, planned_stages=list(s.stages),
              input_config=s.input_config, result=document, source=s.source)
    children = {"stage_executions": stages, "changes": changes, "messages": messages,
                "validation_checks": checks}
    storable_texts("runs", [run_row])
    for table, rows in children.items():
        storable_texts(table, rows)
        for row, digest in zip(rows, child_hashes(table, rows, run_row["hash_layout"])):
            row["row_hash"] = digest
    return run_row, children
