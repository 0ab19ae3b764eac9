"""What auditors ask of the store, as a Python API (the CLI commands are thin over it).

Every query is built with SQLAlchemy expressions and bound parameters; no SQL text is ever
assembled from what a user typed (prefix matches use ``startswith(..., autoescape=True)``).
Results are plain JSON-able dicts; times are ISO-8601 strings in UTC.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import os
from collections.abc import Iterable
from typing import Any, TextIO

from sqlalchemy import Connection, Select, exists, inspect, or_, select
from sqlalchemy import text as sql_text

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.jsonvalue import csv_cell
from enginecfg.store.engine import one_snapshot
from enginecfg.store.hashing import CHILD_ORDER
from enginecfg.store.models import AUDIT_TABLES, Base, Change, JSONValue, Run, storable_text

__all__ = [
    "UnknownRunError",
    "AmbiguousRunError",
    "EXPORT_TABLES",
    "list_runs",
    "get_run",
    "resolve_run_id",
    "MIN_RUN_ID_PREFIX",
    "field_history",
    "why",
    "diff_runs",
    "export",
    "export_all",
    "EXPORT_FORMAT",
    "store_state",
    "lookup",
    "flatten",
    "known_fields",
    "check_field",
    "UnknownFieldError",
]

EXPORT_TABLES = ("runs", "stage_executions", "changes", "messages", "validation_checks")
_MISSING = object()
_CHANGES = Change.__table__


class UnknownRunError(InvalidInputError):
    """No stored run has that id (or id prefix)."""


class AmbiguousRunError(InvalidInputError):
    """More than one stored run starts with that prefix."""


class UnknownFieldError(InvalidInputError):
    """No config field of that name (the message names the closest ones)."""


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat()


def _epoch(value: float | _dt.datetime | None) -> float | None:
    if value is None or isinstance(value, (int, float)):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return value.timestamp()


def _summary(r: Any) -> dict[str, Any]:
    err = r.error if isinstance(r.error, dict) else None
    return {
        "run_id": r.id, "position": r.chain_pos, "started_at": _iso(r.started_at),
        "finished_at": _iso(r.finished_at), "status": r.status, "model": r.model,
        "architecture": r.architecture, "changes": r.n_changes, "messages": r.n_messages,
        "checks": r.n_checks, "kv_tokens": r.kv_tokens, "max_concurrency": r.max_concurrency,
        "vllm_version": r.vllm_version, "gpu": r.gpu, "starts": r.starts,
        "host": r.host, "pid": r.pid, "os_user": r.os_user, "actor": r.actor,
        "enginecfg_version": r.enginecfg_version, "engine_args": r.engine_args,
        "error": err.get("message") if err else None,
    }


_SUMMARY_COLS = (Run.id, Run.chain_pos, Run.started_at, Run.finished_at, Run.status, Run.model,
                 Run.architecture, Run.n_changes, Run.n_messages, Run.n_checks,
                 Run.kv_tokens, Run.max_concurrency, Run.vllm_version, Run.gpu, Run.starts, Run.host,
                 Run.pid, Run.os_user, Run.actor, Run.enginecfg_version, Run.engine_args, Run.error)


def _spellings(dialect: str, text: str) -> list[str]:
    """How a text column may hold the user's *text*: as the store writes it
    (:func:`storable_text`: NUL and a lone surrogate, such as a path's undecodable byte,
    escaped), and on SQLite also as it is, the way a NUL was stored before it was escaped."""
    stored = storable_text(text)
    if stored != text and dialect == "sqlite" and "\x00" in text:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return [stored]
        return [stored, text]
    return [stored]


def _is(column: Any, dialect: str, text: str) -> Any:
    forms = _spellings(dialect, text)
    return column == forms[0] if len(forms) == 1 else column.in_(forms)


def _model_filter(q: Select, model: str | None, dialect: str) -> Select:
    """Exact model source, or a path ending in ``/<model>`` (the model folder's name, given as
    the folder, with a trailing ``/`` or as its ``config.json``); for an
    absolute path, every run that may have read that folder, whatever spelling it was given
    (the rows :func:`_same_folder` then keeps)."""
    if model is None:
        return q
    if os.path.isabs(model):
        name = os.path.basename(os.path.normpath(model))
        return q.where(or_(*[Run.model == form for form in _spellings(dialect, model)],
                           *[Run.model.contains(form, autoescape=True) for form in _spellings(dialect, name)]))
    folder = model.rstrip("/") or model
    return q.where(or_(*[cond for form in _spellings(dialect, folder) for cond in (
        Run.model == form, Run.model == form + "/", Run.model == form + "/config.json",
        *(Run.model.endswith(f"/{form}{tail}", autoescape=True) for tail in ("", "/", "/config.json")))]))


def _same_folder(model: str | None, row: Any) -> bool:
    """Does a stored run read the model folder *model* names (an absolute path; None: no model
    filter)?  One model, one key: the folder its ``source`` recorded (a ``config.json`` given
    alone stands for its folder), so a relative and an absolute spelling of one folder are one
    model; a run recorded without a source matches by its text."""
    if model is None or not os.path.isabs(model):
        return True
    source = row.source if isinstance(row.source, dict) else {}
    path = source.get("path")
    if not isinstance(path, str):
        return row.model in (model, storable_text(model))  # as stored now, or raw before escaping
    if source.get("kind") == "file":
        path = os.path.dirname(path)
    return os.path.normpath(path) == os.path.normpath(model)


#: a limit above this is no limit (no store holds as many runs; SQL takes 64-bit integers)
_NO_LIMIT_ABOVE = 2 ** 62


def _limit(limit: int | None) -> int | None:
    """*limit* as a query takes it: a number past any store's size means all."""
    return None if limit is not None and limit > _NO_LIMIT_ABOVE else limit


def list_runs(store, *, model: str | None = None, architecture: str | None = None,
              status: str | None = None, since: float | _dt.datetime | None = None,
              until: float | _dt.datetime | None = None, limit: int | None = 50,
              actor: str | None = None, vllm_version: str | None = None) -> list[dict[str, Any]]:
    """Stored runs, newest first (by start time), filtered; ``limit`` None means all.
    ``actor`` matches the actor named explicitly or the operating-system user;
    ``vllm_version`` the release whose rules decided the run (``0.34.0``)."""
    dialect = store.engine.dialect.name
    by_folder = model is not None and os.path.isabs(model)
    limit = _limit(limit)
    q = _model_filter(select(*_SUMMARY_COLS, Run.source), model, dialect)
    if vllm_version is not None:
        if not isinstance(vllm_version, str) or not vllm_version.strip():
            raise InvalidInputError.for_value("vllm_version", vllm_version, "a vLLM release, "
                                              "e.g. 0.19.0 or 0.34.0", flag="--vllm-version")
        q = q.where(_is(Run.vllm_version, dialect, vllm_version.strip()))
    if actor is not None:
        q = q.where(or_(_is(Run.actor, dialect, actor), _is(Run.os_user, dialect, actor)))
    if architecture is not None:
        q = q.where(_is(Run.architecture, dialect, architecture))
    if status is not None:
        q = q.where(_is(Run.status, dialect, status))
    if since is not None:
        q = q.where(Run.started_at >= _epoch(since))
    if until is not None:
        q = q.where(Run.started_at < _epoch(until))
    q = q.order_by(Run.started_at.desc(), Run.chain_pos.desc())
    if limit is not None and not by_folder:
        q = q.limit(limit)
    with store.engine.connect() as conn:
        rows = [_summary(r) for r in conn.execute(q) if _same_folder(model, r)]
    return rows if limit is None else rows[:limit]


#: the fewest characters a run id prefix must have (as git abbreviates commits): one character
#: names a sixteenth of any store, four a 65,536th, and a prefix must be unique as well
MIN_RUN_ID_PREFIX = 4


def resolve_run_id(conn, run_id: str) -> str:
    """The full id of the one run whose id is, or starts with, ``run_id`` (a prefix of at least
    :data:`MIN_RUN_ID_PREFIX` characters, unique among the stored runs)."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise UnknownRunError("run id must not be empty", field="run_id")
    run_id = storable_text(run_id.strip())  # ids are hex: another text only has to be sendable
    if conn.execute(select(Run.id).where(Run.id == run_id)).scalar() is not None:
        return run_id
    if len(run_id) < MIN_RUN_ID_PREFIX:
        raise UnknownRunError(f"invalid run id: got {run_id!r}; allowed: a run id, or a prefix of at least "
                              f"{MIN_RUN_ID_PREFIX} of its characters that no other run shares "
                              f"(`enginecfg runs` shows 12)", field="run_id")
    found = conn.execute(select(Run.id).where(Run.id.startswith(run_id, autoescape=True))
                         .order_by(Run.id).limit(6)).scalars().all()
    if not found:
        from enginecfg.pipeline.suggest import closest

        recent = conn.execute(select(Run.id).order_by(Run.chain_pos.desc()).limit(5000)).scalars().all()
        by_prefix = {rid[:len(run_id)]: rid for rid in reversed(recent)}
        near = [by_prefix[p] for p in closest(run_id, by_prefix, cutoff=0.7)]
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise UnknownRunError(f"no stored run has id {run_id!r}{hint}; `enginecfg runs` lists them",
                              field="run_id")
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise AmbiguousRunError(f"run id prefix {run_id!r} matches several runs: {shown}",
                                field="run_id")
    return found[0]


def _children(conn, run_id: str) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for table in ("stage_executions", "changes", "messages", "validation_checks"):
        t = Base.metadata.tables[table]
        rows = conn.execute(select(t).where(t.c.run_id == run_id)
                            .order_by(t.c[CHILD_ORDER[table]])).mappings()
        out[table] = [{k: v for k, v in r.items() if k not in ("run_id", "row_hash")}
                      for r in rows]
    return out


def get_run(store, run_id: str) -> dict[str, Any]:
    """Everything stored about one run (``run_id`` may be a unique prefix)."""
    with store.engine.connect() as conn:
        rid = resolve_run_id(conn, run_id)
        r = conn.execute(select(Run.__table__).where(Run.id == rid)).one()
        out = _summary(r)
        out.update(
            gpu_memory_bytes=r.gpu_memory_bytes, gpu_memory_utilization=r.gpu_memory_utilization,
            kv_cache_memory=r.kv_cache_memory, kv_cache_memory_bytes=r.kv_cache_memory_bytes,
            num_gpu_blocks_override=r.num_gpu_blocks_override, max_model_len_fits=r.max_model_len_fits,
            engine_args=r.engine_args, planned_stages=r.planned_stages,
            input_config=r.input_config, input_fingerprint=r.input_fingerprint,
            result=r.result, result_fingerprint=r.result_fingerprint, error=r.error,
            failed_stage=r.failed_stage, recorded_at=_iso(r.recorded_at),
            prev_hash=r.prev_hash, row_hash=r.row_hash, source=r.source,
            hash_layout=r.hash_layout,
        )
        kids = _children(conn, rid)
        out["stages"] = kids["stage_executions"]
        out["changes"] = kids["changes"]
        out["messages"] = kids["messages"]
        out["validation_checks"] = kids["validation_checks"]
        return out


def lookup(doc: Any, field: str) -> Any:
    """The value at dotted ``field`` in nested dicts (a list by its index:
    ``impact.groups.3.block_size``), or the module's missing marker."""
    cur = doc
    for part in field.split("."):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
            continue
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


#: the run facts ``history``, ``why`` and ``diff`` take beside the config fields
FACTS = ("impact",)


def _fact_of(document: Any, field: str) -> Any:
    """The value of a run fact (``impact.kv_tokens``) in a run document, or missing."""
    if field.split(".")[0] not in FACTS or not isinstance(document, dict):
        return _MISSING
    return lookup(document, field)


def _config_of(document: Any) -> Any:
    if isinstance(document, dict) and isinstance(document.get("config"), dict):
        return document["config"]
    return document


def _touches(change_field: str, field: str) -> bool:
    return (change_field == field or change_field.startswith(field + ".")
            or field.startswith(change_field + "."))


def _change_dict(c: Any) -> dict[str, Any]:
    return {"seq": c.seq, "stage": c.stage, "field": c.field, "old": c.old, "new": c.new,
            "reason": c.reason, "level": c.level, "via": c.via, "explanation": c.explanation}


def field_history(store, field: str, *, model: str | None = None, limit: int | None = 50,
                  changed_only: bool = False) -> list[dict[str, Any]]:
    """The value of one dotted config field (or run fact, ``impact.max_concurrency``) across
    runs, **newest first**.

    One entry per run: its id, time, model, status, the field's final ``value`` in that
    run's result, and the ``changes`` to exactly that field (stage, old, new, reason), in
    the order they happened.  Runs whose result lacks the field and that did not change it
    are left out.  ``changed_only`` keeps only runs in which some stage changed the field
    (an index scan on ``changes.field``, the fast way on a large store).
    """
    if not field or not isinstance(field, str):
        raise InvalidInputError.for_value("field", field, "a dotted config field path")
    out: list[dict[str, Any]] = []
    limit = _limit(limit)
    dialect = store.engine.dialect.name
    cols = (Run.id, Run.started_at, Run.chain_pos, Run.model, Run.architecture, Run.status,
            Run.result, Run.engine_args, Run.vllm_version, Run.starts, Run.source)
    # pages of runs, newest first: one snapshot, or runs recorded meanwhile would shift the
    # pages and repeat runs across them
    with one_snapshot(store.engine.connect()) as conn:
        if changed_only:
            # newest runs first through the started_at index, each probed through the
            # (field, run_id) index: stops after `limit` hits instead of sorting them all
            base = select(*cols).where(exists().where(Change.run_id == Run.id,
                                                      _is(Change.field, dialect, field)))
        else:
            base = select(*cols)
        base = _model_filter(base, model, dialect).order_by(Run.started_at.desc(), Run.chain_pos.desc())
        page, offset = max(limit or 0, 200), 0
        while limit is None or len(out) < limit:
            runs = conn.execute(base.limit(page).offset(offset)).all()
            if not runs:
                break
            offset += len(runs)
            ids = [r.id for r in runs]
            by_run: dict[str, list[dict[str, Any]]] = {}
            for c in conn.execute(select(_CHANGES).where(Change.run_id.in_(ids),
                                                          _is(Change.field, dialect, field))
                                  .order_by(Change.run_id, Change.seq)):
                by_run.setdefault(c.run_id, []).append(_change_dict(c))
            for r in runs:
                if not _same_folder(model, r):
                    continue
                changes = by_run.get(r.id, [])
                value = lookup(_config_of(r.result), field)
                if value is _MISSING and isinstance(r.result, dict):
                    value = lookup(r.result, field)  # a fact of the run: impact.*, pages.*
                if value is _MISSING:
                    if not changes:
                        continue
                    value = changes[-1]["new"]
                out.append({"run_id": r.id, "started_at": _iso(r.started_at), "model": r.model,
                            "architecture": r.architecture, "status": r.status, "starts": r.starts,
                            "vllm_version": r.vllm_version, "engine_args": r.engine_args,
                            "value": value, "changed": bool(changes), "changes": changes})
                if limit is not None and len(out) >= limit:
                    break
    return out


def why(store, run_id: str, field: str) -> dict[str, Any]:
    """How ``field`` got its final value in one run.

    ``initial`` is the value before any stage ran (the run's input config), ``final`` the
    value in its result, ``changes`` every change to the field (or to a path above or below
    it) in order, each with its stage and reason.  ``found`` is false when the run neither
    holds nor changed such a field.
    """
    forms = _spellings(store.engine.dialect.name, field)  # changes.field as stored
    with store.engine.connect() as conn:
        rid = resolve_run_id(conn, run_id)
        r = conn.execute(select(Run.input_config, Run.result, Run.status, Run.model, Run.starts)
                         .where(Run.id == rid)).one()
        changes = [_change_dict(c) for c in conn.execute(
            select(_CHANGES).where(Change.run_id == rid).order_by(Change.seq))
            if any(_touches(c.field, form) for form in forms)]
    initial = lookup(_config_of(r.input_config), field)
    final = lookup(_config_of(r.result), field)
    fact = final is _MISSING and _fact_of(r.result, field) is not _MISSING
    if fact:  # a figure the run records (impact.*): no stage changes it, nothing before the run
        final = _fact_of(r.result, field)
    exact = [c for c in changes if c["field"] in forms]
    if final is _MISSING and exact:
        final = exact[-1]["new"]
    if initial is _MISSING and exact:
        initial = exact[0]["old"]
    found = bool(changes) or initial is not _MISSING or final is not _MISSING
    out = {"run_id": rid, "field": field, "model": r.model, "status": r.status, "starts": r.starts,
           "found": found, "initial": None if initial is _MISSING else initial,
           "final": None if final is _MISSING else final, "changes": changes, "fact": fact}
    if not found:
        from enginecfg.pipeline.suggest import closest

        names = set(_with_sections(flatten(_config_of(r.result) or {})))
        names |= set(_with_sections(flatten(_config_of(r.input_config) or {})))
        names |= set(_fact_names(r.result))
        out["closest"] = closest(field, names)
    return out


def _with_sections(flat: dict[str, Any]) -> list[str]:
    """Dotted names and every dotted prefix of them (``cache_config``, ``hf_config.llm_config``)."""
    names = set(flat)
    for name in flat:
        parts = name.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(names)


def _fact_names(document: Any) -> list[str]:
    """The dotted names of a run document's facts (``impact.kv_tokens``,
    ``impact.concurrency.8192``, ``impact.groups.3.block_size``) and their sections."""
    if not isinstance(document, dict):
        return []
    out: dict[str, Any] = {}
    for fact in FACTS:
        if isinstance(document.get(fact), dict):
            out.update(_flatten_rows(document[fact], fact + "."))
    return _with_sections(out)


def known_fields(store) -> list[str]:
    """The field names ``history`` and ``why`` take: every config field enginecfg records,
    every field a stored change touched, every figure of the newest run that has them
    (``impact.*``), and their sections."""
    from enginecfg.pipeline.config import SECTIONS, tracked_fields

    names: set[str] = {key for cls in SECTIONS.values() for _, key in tracked_fields(cls)}
    with store.engine.connect() as conn:
        names.update(conn.execute(select(Change.field).distinct()).scalars())
        newest = conn.execute(select(Run.result).order_by(Run.chain_pos.desc()).limit(1)).scalar()
        with_figures = conn.execute(select(Run.result).where(Run.kv_tokens.is_not(None))
                                    .order_by(Run.chain_pos.desc()).limit(1)).scalar()
    names.update(flatten(_config_of(newest) or {}))
    names.update(_fact_names(newest))
    names.update(_fact_names(with_figures))
    return _with_sections(dict.fromkeys(names))


def check_field(store, field: str) -> None:
    """Raise :class:`UnknownFieldError` (with the closest names) unless *field* is known."""
    names = known_fields(store)
    if field in names or storable_text(field) in names:  # a changed field as stored
        return
    from enginecfg.pipeline.suggest import closest

    near = closest(field, names)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise UnknownFieldError(f"unknown field {field!r}{hint} (fields are dotted, e.g. "
                            f"cache_config.block_size, or a figure: impact.max_concurrency)", field="field")


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a.b.c": leaf}``; lists and scalars are leaves."""
    out: dict[str, Any] = {}
    if isinstance(doc, dict) and doc:
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif prefix:
        out[prefix[:-1]] = doc
    return out


#: the run document's parts a diff compares beside the config, each opened to its figures:
#: the start-up GPU (``gpu.capability``), the engine start's decisions (``startup.block_size``)
#: and the KV-cache figures (``impact.kv_tokens``)
_DIFFED_PARTS = ("gpu", "startup", "impact")
#: left out of a diff: the start-up decisions' prose (``show`` and ``explain`` give it; the
#: values it explains are compared), the GPU's notes on where its figures come from
_NOT_DIFFED = {("startup", "decisions"), ("gpu", "basis"), ("gpu", "aliases")}


def _comparable(r: Any) -> dict[str, Any]:
    flat = {"model": r.model, "status": r.status, "vllm_version": r.vllm_version}
    if r.engine_args:
        flat.update(flatten(r.engine_args, "engine_args."))
    flat.update(flatten(_config_of(r.result) or {}))
    for part in _DIFFED_PARTS:
        # absent in runs recorded before the part existed: its fields are then only in the other
        value = r.result.get(part) if isinstance(r.result, dict) else None
        if isinstance(value, dict):
            flat.update(_flatten_rows({k: v for k, v in value.items()
                                       if (part, k) not in _NOT_DIFFED}, part + "."))
    return flat


def _flatten_rows(doc: Any, prefix: str) -> dict[str, Any]:
    """:func:`flatten`, but a list of dicts (the impact's KV-cache groups) is opened by index
    (``impact.groups.3.block_size``), so a diff names the figure that moved."""
    out: dict[str, Any] = {}
    if isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc):
        for i, item in enumerate(doc):
            out.update(_flatten_rows(item, f"{prefix}{i}."))
    elif isinstance(doc, dict) and doc:
        for k, v in doc.items():
            out.update(_flatten_rows(v, f"{prefix}{k}."))
    elif prefix:
        out[prefix[:-1]] = doc
    return out


def diff_runs(store, a: str, b: str) -> dict[str, Any]:
    """Fields whose final values differ between two runs.

    Compares the model, the status, the vLLM release (``vllm_version``), the engine
    arguments (``engine_args.<name>``), the result's config flattened to dotted paths
    (``cache_config.block_size``), the start-up GPU (``gpu.capability``), the engine start's
    decisions (``startup.block_size``) and the KV-cache impact (``impact.kv_tokens``,
    ``impact.concurrency.8192``).  A field only one run has shows ``only_in``: ``"a"`` or
    ``"b"`` (and null on the other side): runs of two releases hold different fields.
    ``vllm_version_a`` / ``vllm_version_b`` name each run's release, ``releases_differ``
    whether they differ.
    """
    with store.engine.connect() as conn:
        ids = [resolve_run_id(conn, x) for x in (a, b)]
        rows = {r.id: r for r in conn.execute(
            select(Run.id, Run.model, Run.status, Run.engine_args, Run.result, Run.vllm_version)
            .where(Run.id.in_(ids)))}
    fa, fb = _comparable(rows[ids[0]]), _comparable(rows[ids[1]])
    diffs = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, _MISSING), fb.get(key, _MISSING)
        if va is _MISSING or vb is _MISSING or json.dumps(va, sort_keys=True) != json.dumps(
                vb, sort_keys=True):
            diffs.append({"field": key, "a": None if va is _MISSING else va,
                          "b": None if vb is _MISSING else vb,
                          "only_in": "a" if vb is _MISSING else "b" if va is _MISSING else None})
    ra, rb = rows[ids[0]].vllm_version, rows[ids[1]].vllm_version
    return {"run_id_a": ids[0], "run_id_b": ids[1], "a": ids[0], "b": ids[1],
            "vllm_version_a": ra, "vllm_version_b": rb, "releases_differ": ra != rb,
            "differences": diffs}


def _rows_of(store, table: str) -> Iterable[dict[str, Any]]:
    t = Base.metadata.tables[table]
    order = [t.c.chain_pos] if table == "runs" else [t.c.run_id, t.c[CHILD_ORDER[table]]]
    with store.engine.connect() as conn:
        result = conn.execution_options(yield_per=1000).execute(select(t).order_by(*order))
        for row in result.mappings():
            yield dict(row)


_TIME_COLUMNS = ("started_at", "finished_at", "recorded_at")


def export(store, out: TextIO, *, fmt: str = "jsonl", table: str = "runs", raw: bool = False) -> int:
    """Write every row of ``table`` to ``out`` as JSON lines or CSV; returns the row count.

    JSON columns are JSON (in CSV, JSON text).  A CSV cell is written as
    :func:`~enginecfg.pipeline.jsonvalue.csv_cell` says: control characters escaped, a
    formula's first character marked, so that every row is one line and safe to open.  By default times are ISO 8601 strings in UTC
    and a run's id is ``run_id``, as in every other command; ``raw`` writes the stored values
    exactly (epoch-second floats, ``id``), which are what the row hashes cover.
    """
    if fmt not in ("jsonl", "csv"):
        raise InvalidInputError.for_value("format", fmt, "jsonl, csv", flag="--format")
    if table not in EXPORT_TABLES:
        raise InvalidInputError.for_value("table", table, ", ".join(EXPORT_TABLES),
                                          flag="--table")
    columns = Base.metadata.tables[table].columns
    rename = {} if raw or table != "runs" else {"id": "run_id"}
    cols = [rename.get(c.name, c.name) for c in columns]
    json_cols = {c.name for c in columns if isinstance(c.type, JSONValue)}
    n = 0
    writer = None
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=cols, lineterminator="\n")
        writer.writeheader()
    for row in _rows_of(store, table):
        if not raw:
            row = {rename.get(k, k): (_iso(v) if k in _TIME_COLUMNS else v) for k, v in row.items()}
        if writer is None:
            out.write(json.dumps(row, sort_keys=False, default=str) + "\n")
        else:
            writer.writerow({k: csv_cell(json.dumps(v) if k in json_cols else v)
                             for k, v in row.items()})
        n += 1
    return n


#: the first line of ``enginecfg export --all`` names this format
EXPORT_FORMAT = "enginecfg-audit-export/1"


def store_state(conn: Connection) -> dict[str, Any]:
    """What identifies the store's history now, at whatever revision it is: its id and
    creation time (when the schema has them), its chain head, and each audit table's row
    count (tables that do not exist are left out)."""
    have = set(inspect(conn).get_table_names())
    out: dict[str, Any] = {"store_id": None, "created_at": None, "head_position": 0,
                           "head_hash": "0" * 64, "rows": {}}
    if "chain_head" in have:
        cols = {c["name"] for c in inspect(conn).get_columns("chain_head")}
        wanted = ["position", "head_hash"] + [c for c in ("store_id", "created_at") if c in cols]
        head = conn.execute(sql_text(f"SELECT {', '.join(wanted)} FROM chain_head WHERE id = 1")
                            ).mappings().one_or_none()
        if head is not None:
            out.update(head_position=head["position"], head_hash=head["head_hash"],
                       store_id=head.get("store_id"), created_at=head.get("created_at"))
    for table in AUDIT_TABLES:
        if table in have:
            out["rows"][table] = conn.execute(sql_text(f"SELECT COUNT(*) FROM {table}")).scalar()
    return out


def export_all(store, out: TextIO) -> dict[str, int]:
    """Every row of every audit table, stored values exactly (as the hashes cover them),
    from one snapshot, as JSON lines: a header naming the store, its creation time, its
    chain head and schema revision; one ``{"table": ..., "row": ...}`` line per row; and a
    closing line counting them (an export cut short has none).  What ``enginecfg db
    downgrade --i-have-exported`` checks.  Returns the row count of each table."""
    import time as _time

    from enginecfg.store.engine import current_revision

    counts: dict[str, int] = {}
    revision = current_revision(store.engine)
    with one_snapshot(store.engine.connect()) as conn:
        state = store_state(conn)
        header = {"format": EXPORT_FORMAT, "store_id": state["store_id"],
                  "created_at": _iso(state["created_at"]), "revision": revision,
                  "head_position": state["head_position"], "head_hash": state["head_hash"],
                  "exported_at": _iso(_time.time())}
        out.write(json.dumps(header) + "\n")
        for table in EXPORT_TABLES:
            t = Base.metadata.tables[table]
            order = [t.c.chain_pos] if table == "runs" else [t.c.run_id, t.c[CHILD_ORDER[table]]]
            counts[table] = 0
            rows = conn.execution_options(yield_per=1000).execute(select(t).order_by(*order))
            for row in rows.mappings():
                out.write(json.dumps({"table": table, "row": dict(row)}, default=str) + "\n")
                counts[table] += 1
    out.write(json.dumps({"end": True, "rows": counts}) + "\n")
    return counts
