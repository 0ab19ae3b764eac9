"""The audit store: a subscriber of the signal bus that records each run in one transaction.

The pipeline never calls the store.  :meth:`AuditStore.attach` connects receivers to the
signals of :mod:`enginecfg.pipeline.events`; the store buffers a run's events in memory
(only for runs it saw start) and writes the whole run, its stage executions, changes,
messages and validation checks in ONE transaction when ``run_finished`` or ``run_failed``
arrives.  A run whose process dies before that leaves nothing behind, and a transaction
interrupted half-way is rolled back by the database.

Inside that transaction the store takes the chain head under a lock, gives the run the
next chain position and chains its hash to the previous run's (see
:mod:`enginecfg.store.hashing`), so the chain stays linear with any number of writers.

The write is the hot path of a fleet (every engine start records a run), so it goes to the
driver directly, through one connection kept from run to run, with the values encoded by
the very SQLAlchemy column types the reading side decodes with (see :class:`_Statements`)
and no SQL compiled per run:

* SQLite: one prepared ``INSERT`` per table, its rows sent with ``executemany``.  The
  writers of one file take a cross-process file lock
  (:func:`enginecfg.store.engine.write_lock`) before ``BEGIN IMMEDIATE``: the kernel hands
  it to the next waiter the moment it is released, where SQLite's busy handler would sleep
  and poll.  The write-ahead log is checkpointed by a thread beside the writer
  (:mod:`enginecfg.store.walcheckpoint`), not inside a commit.
* PostgreSQL: one statement appends the run (:meth:`_Statements.append`): it takes the
  head, hashes the run on the server from bytes the writer prepared, inserts every row and
  moves the head, so the head's lock is held while that statement runs and never across a
  round trip; several writers then add throughput instead of queueing on the network.

Recording must never break the run it records: a failed write (database unreachable,
read-only file, disk full) is logged, kept in :attr:`AuditStore.last_error` /
:attr:`AuditStore.write_failures`, and swallowed.  So is a failed checkpoint to the mirror
(``ENGINECFG_AUDIT_MIRROR``, see :mod:`enginecfg.store.checkpoint`), written after the run's
transaction committed.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import threading
import time
from collections import deque
from typing import Any, Callable

import attrs
from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import DBAPIError, OperationalError

from enginecfg.pipeline import events
from enginecfg.store import engine as _eng
from enginecfg.store.hashing import PreparedRunHash, child_hashes, current_layout
from enginecfg.store.walcheckpoint import WalCheckpointer
from enginecfg.store.models import (
    Change,
    ChainHead,
    Message,
    Run,
    StageExecution,
    TEXT_COLUMNS,
    ValidationCheck,
    encode_json,
    normalise_json,
    storable_text,
)

__all__ = ["AuditStore", "WriteFailure"]



def _log_write_failure(what: str = "audit_write_failed", **fields: Any) -> None:
    """One log line for a failed write (or mirror checkpoint): through structlog when the
    caller set it up (the CLI's ``--log-format``), else the standard ``logging`` module
    (stderr by default), so that recording pays for no logging library it does not use."""
    if "structlog" in sys.modules and sys.modules["structlog"].is_configured():
        sys.modules["structlog"].get_logger("enginecfg.store").error(what, **fields)
        return
    import logging

    logging.getLogger("enginecfg.store").error(
        what + " " + " ".join(f"{k}={v}" for k, v in fields.items()))

_CHILD_TABLES = {
    "stage_executions": StageExecution.__table__,
    "changes": Change.__table__,
    "messages": Message.__table__,
    "validation_checks": ValidationCheck.__table__,
}
_MAX_KEPT_FAILURES = 100
_WRITE_ATTEMPTS = 5


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("enginecfg")
    except Exception:
        from enginecfg._layout import version as running_version

        return running_version()


def _real(value: Any) -> float | None:
    """A float column value; NaN becomes NULL (SQLite cannot store NaN in a REAL)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


@attrs.frozen
class WriteFailure:
    """A run the store could not record, and why."""

    run_id: str
    error: str
    at: float


@attrs.define
class _RunBuffer:
    started: events.RunStarted
    stages: dict[int, dict[str, Any]] = attrs.Factory(dict)
    changes: list[events.ConfigChanged] = attrs.Factory(list)
    messages: list[events.WarningIssued] = attrs.Factory(list)
    checks: list[events.ValidationChecked] = attrs.Factory(list)


def _is_transient(exc: BaseException) -> bool:
    """A lock timeout or serialisation conflict: the transaction rolled back; try again."""
    import sqlite3

    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        return "locked" in text or "busy" in text
    if getattr(exc, "sqlstate", None) in ("40001", "40P01"):  # a driver error, unwrapped
        return True
    if isinstance(exc, OperationalError) and "locked" in str(exc.orig).lower():
        return True
    if isinstance(exc, DBAPIError):
        code = getattr(exc.orig, "sqlstate", None)
        return code in ("40001", "40P01")  # serialization_failure, deadlock_detected
    return False


_CHILD_ORDER = ("stage_executions", "changes", "messages", "validation_checks")
_PG_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE, without importing the driver here
#: parameters one PostgreSQL statement may carry (the protocol's limit is 65,535)
_PG_MAX_PARAMS = 30_000
#: the run columns a PostgreSQL append computes in the statement (see _Statements.append)
_HEAD_COLUMNS = {"chain_pos": "k.pos", "prev_hash": "k.prev", "row_hash": "k.hash"}


class _Statements:
    """The write statements of one dialect, built once: SQL text with the driver's
    placeholders, and per column the bind processor SQLAlchemy itself would apply (so a
    value is stored exactly as an ORM insert would store it: JSON text, NaN markers, ...)."""

    def __init__(self, dialect: Any):
        self.dialect = dialect
        self.sqlite = dialect.name == "sqlite"
        q = dialect.identifier_preparer.quote
        mark = "?" if dialect.paramstyle == "qmark" else "%s"
        self.inserts: dict[str, tuple[str, list[tuple[str, Any]]]] = {}
        for name, table in [("runs", Run.__table__)] + [(t, _CHILD_TABLES[t]) for t in _CHILD_ORDER]:
            cols = [c for c in table.columns]
            sql = (f"INSERT INTO {q(table.name)} ({', '.join(q(c.name) for c in cols)}) "
                   f"VALUES ({', '.join([mark] * len(cols))})")
            procs = [(c.name, c.type.dialect_impl(dialect).bind_processor(dialect)) for c in cols]
            self.inserts[name] = (sql, procs)
        #: the chain fields' places in the run INSERT, with their (cheap, scalar) encoders
        self.chain_slots = [(name, i, proc) for i, (name, proc) in enumerate(self.inserts["runs"][1])
                            if name in ("chain_pos", "prev_hash", "recorded_at", "row_hash")]
        head = q(ChainHead.__table__.name)
        #: SQLite: the head read and moved inside ``BEGIN IMMEDIATE`` (PostgreSQL takes and
        #: moves it within :meth:`append`)
        self.select_head = f"SELECT position, head_hash FROM {head} WHERE id = 1"
        self.update_head = f"UPDATE {head} SET position = {mark}, head_hash = {mark} WHERE id = 1"

        #: PostgreSQL: the run's values bound to :meth:`append` (the head-dependent ones are
        #: the statement's own)
        self.run_value_slots = [i for i, (name, _) in enumerate(self.inserts["runs"][1])
                                if name not in _HEAD_COLUMNS]
        self.recorded_at_slot = next(i for i, (name, _) in enumerate(self.inserts["runs"][1])
                                     if name == "recorded_at")
        self._head = head
        self._appends: dict[tuple[int, ...], str] = {}
        self._null_values: dict[str, dict[str, Any]] = {}

    def append(self, child_params: dict[str, list[tuple]]) -> str:
        """PostgreSQL: a run appended to the chain in one statement, its own transaction.

        It takes the head ``FOR UPDATE``, makes this transaction's commit asynchronous,
        hashes the run from the bytes around the head's values
        (:meth:`PreparedRunHash.around_head`), inserts the run and each child table's rows
        (one multi-row INSERT each) and moves the head, and returns the new position.  The
        head's row lock lasts only as long as the statement runs on the server, never
        across a round trip, so writers queue for microseconds, not for network turns.
        Parameters: the three hashed byte strings, the run's values
        (:attr:`run_value_slots`), then each table's rows in :data:`_CHILD_ORDER`.
        (``sha256`` in SQL: PostgreSQL 11 or newer.)"""
        shape = tuple(len(child_params.get(t, ())) for t in _CHILD_ORDER)
        sql = self._appends.get(shape)
        if sql is None:
            if len(self._appends) >= 256:  # run shapes are few; a long tail is not kept
                self._appends.clear()
            head_sql, _ = self.inserts["runs"][0].split(" VALUES ")
            select = ", ".join(_HEAD_COLUMNS.get(name, "%s") for name, _ in self.inserts["runs"][1])
            parts = [
                f"h AS (SELECT position + 1 AS pos, head_hash AS prev, "
                f"set_config('synchronous_commit', 'off', true) AS async FROM {self._head} "
                f"WHERE id = 1 FOR UPDATE)",
                "k AS (SELECT pos, prev, encode(sha256(%s::bytea || convert_to(pos::text, 'UTF8') "
                "|| %s::bytea || convert_to(prev, 'UTF8') || %s::bytea), 'hex') AS hash "
                "FROM h WHERE async IS NOT NULL)",
                f"r AS ({head_sql} SELECT {select} FROM k)",
            ]
            for i, (table, n) in enumerate(zip(_CHILD_ORDER, shape)):
                if n:
                    insert, one = self.inserts[table][0].split(" VALUES ")
                    parts.append(f"c{i} AS ({insert} VALUES {', '.join([one] * n)})")
            parts.append(f"u AS (UPDATE {self._head} SET position = k.pos, head_hash = k.hash FROM k "
                         f"WHERE {self._head}.id = 1)")
            sql = self._appends[shape] = f"WITH {', '.join(parts)} SELECT pos FROM k"
        return sql

    def params(self, table: str, rows: list[dict[str, Any]]) -> list[tuple]:
        _, procs = self.inserts[table]
        nulls = self._nulls(table)
        out = []
        for row in rows:
            get = row.get
            # PostgreSQL's driver binds JSON through its own adapter: the values go that way
            texts = get(_TEXTS) if self.sqlite else None
            if texts:
                out.append(tuple(texts[name] if name in texts
                                 else nulls[name] if (v := get(name)) is None
                                 else v if proc is None else proc(v) for name, proc in procs))
            else:
                out.append(tuple(nulls[name] if (v := get(name)) is None
                                 else v if proc is None else proc(v) for name, proc in procs))
        return out

    def _nulls(self, table: str) -> dict[str, Any]:
        """What each column's processor makes of None (the common value of optional
        columns), computed once."""
        found = self._null_values.get(table)
        if found is None:
            found = self._null_values[table] = {
                name: None if proc is None else proc(None) for name, proc in self.inserts[table][1]}
        return found


#: where a row keeps the JSON columns' texts that :func:`encode_json` produced: bound as
#: they are on SQLite (tests check they equal what the column type itself writes there)
_TEXTS = "__json_texts__"


def _with_json(row: dict[str, Any], **values: Any) -> dict[str, Any]:
    """Put JSON column values into *row*, normalised, each encoded once (None stays None)."""
    texts = row.setdefault(_TEXTS, {})
    for name, value in values.items():
        if value is None:
            row[name] = None
            continue
        row[name], texts[name] = encode_json(value)
    return row


def _storable_texts(table: str, rows: list[dict[str, Any]]) -> None:
    """Make each text column's value one the drivers can send (:func:`storable_text`),
    before the rows are hashed: the hash covers what is stored."""
    names = TEXT_COLUMNS[table]
    for row in rows:
        for name in names:
            value = row.get(name)
            if isinstance(value, str) and ("\x00" in value or not value.isascii()):
                row[name] = storable_text(value)


_INT64_MIN, _INT64_MAX = -2 ** 63, 2 ** 63 - 1


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


class AuditStore:
    """Records every run published on the signal bus into an audit database.

    ``url`` is any SQLAlchemy URL; None means ``ENGINECFG_DB`` or, when that is unset, a
    SQLite file ``audit.db`` in the user's data directory.  The schema is upgraded to the
    newest revision on first use unless ``auto_upgrade`` is false.

    Use ``store.attach()`` (returns the store) and ``store.detach()``, or
    ``with AuditStore(url).attach() as store: ...``.
    """

    def __init__(self, url: str | None = None, *, auto_upgrade: bool = True,
                 mirror: Any = "env"):
        self.url: str = url if url is not None else _eng.default_url()
        #: a :class:`~enginecfg.store.checkpoint.Mirror`, None, or "env" (built on first
        #: write from ENGINECFG_AUDIT_MIRROR, when that is set)
        self._mirror = mirror
        #: checkpoints the mirror failed to write
        self.mirror_failed: int = 0
        self._auto_upgrade = auto_upgrade
        self._engine: Engine | None = None
        self._ready = False
        self._lock = threading.Lock()          # guards the buffers and the counters
        self._engine_lock = threading.Lock()
        self._pending: dict[str, _RunBuffer] = {}
        self._receivers: list[tuple[Any, Callable[..., None]]] = []
        self._host = socket.gethostname()
        self._version = _version()
        #: number of runs recorded by this store object
        self.recorded: int = 0
        #: id of the newest run this store recorded
        self.last_run_id: str | None = None
        #: number of runs this store failed to record
        self.write_failed: int = 0
        #: the newest failures (at most 100 kept)
        self.write_failures: deque[WriteFailure] = deque(maxlen=_MAX_KEPT_FAILURES)
        #: the exception of the newest failed write, or None
        self.last_error: BaseException | None = None
        # test hook: called with the connection inside the write transaction, before commit
        self._before_commit: Callable[[Connection], None] | None = None
        self._statements: _Statements | None = None
        self._write_lock: _eng.WriteLock | None = None
        self._checkpointer: WalCheckpointer | None = None
        self._writer: Connection | None = None  # see _writer_connection
        self._writer_pid = 0
        self._engine_pid = os.getpid()  # the process the engine's pool belongs to

    # -- database ------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, created (and the schema upgraded) on first use."""
        if self._ready and self._engine is not None:
            return self._engine
        with self._engine_lock:
            if self._engine is None:
                self._engine = _eng.make_engine(self.url)
                self._engine_pid = os.getpid()
            if not self._ready:
                if (self._auto_upgrade
                        and _eng.current_revision(self._engine) != _eng.head_revision()):
                    _eng.upgrade(self._engine)
                self._ready = True
            return self._engine

    @property
    def display_url(self) -> str:
        return _eng.display_url(self.url)

    @property
    def record_error(self) -> str | None:
        """A one-line description of the newest failed write, for the CLI (None: none)."""
        if not self.write_failures:
            return None
        f = self.write_failures[-1]
        return f"audit store {self.display_url}: could not record run {f.run_id}: {f.error}"

    @property
    def pending_runs(self) -> tuple[str, ...]:
        """Runs that started and have not finished yet."""
        with self._lock:
            return tuple(self._pending)

    def close(self) -> None:
        """Detach and release the database connections."""
        self.detach()
        if self._mirror not in (None, "env"):
            self._mirror.close()
        if self._write_lock is not None:
            with self._write_lock:  # not while another thread writes on it
                self._drop_writer(close=True)
            self._write_lock.close()
            self._write_lock = None
        else:
            self._drop_writer(close=True)
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
            self._ready = False

    # -- the bus -------------------------------------------------------------------------

    def attach(self) -> "AuditStore":
        """Connect the receivers (strongly referenced) to the bus; returns the store."""
        if self._receivers:
            return self
        pairs = [
            (events.run_started, self._on_run_started),
            (events.stage_started, self._on_stage_started),
            (events.config_changed, self._on_config_changed),
            (events.warning_issued, self._on_warning_issued),
            (events.stage_finished, self._on_stage_finished),
            (events.validation_checked, self._on_validation_checked),
            (events.run_finished, self._on_run_finished),
            (events.run_failed, self._on_run_failed),
        ]
        for signal, receiver in pairs:
            signal.connect(receiver, weak=False)
        self._receivers = pairs
        return self

    def detach(self) -> None:
        """Disconnect the receivers; runs still buffered are dropped."""
        for signal, receiver in self._receivers:
            signal.disconnect(receiver)
        self._receivers = []
        with self._lock:
            self._pending.clear()

    def __enter__(self) -> "AuditStore":
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def _buffer(self, run_id: str) -> _RunBuffer | None:
        with self._lock:
            return self._pending.get(run_id)

    def _on_run_started(self, sender: Any, event: events.RunStarted, **_: Any) -> None:
        with self._lock:
            self._pending[event.run_id] = _RunBuffer(event)

    def _on_stage_started(self, sender: Any, event: events.StageStarted, **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            buf.stages[event.order] = {"stage": event.stage, "origin": event.origin}

    def _on_config_changed(self, sender: Any, event: events.ConfigChanged, **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            buf.changes.append(event)

    def _on_warning_issued(self, sender: Any, event: events.WarningIssued, **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            buf.messages.append(event)

    def _on_stage_finished(self, sender: Any, event: events.StageFinished, **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            entry = buf.stages.setdefault(event.order, {"stage": event.stage, "origin": "unknown"})
            entry.update(outcome=event.outcome, duration_s=event.duration_s,
                         n_changes=event.changes, error=event.error)

    def _on_validation_checked(self, sender: Any, event: events.ValidationChecked,
                               **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            buf.checks.append(event)

    def _on_run_finished(self, sender: Any, event: events.RunFinished, **_: Any) -> None:
        self._finish(event.run_id, status=event.status, finished_at=event.finished_at,
                     document=event.document, fingerprint=event.fingerprint, error=None,
                     failed_stage=None)

    def _on_run_failed(self, sender: Any, event: events.RunFailed, **_: Any) -> None:
        doc = event.document or {}
        self._finish(event.run_id, status=event.status, finished_at=event.finished_at,
                     document=event.document, fingerprint=doc.get("fingerprint"),
                     error=event.error, failed_stage=event.stage)

    # -- writing -------------------------------------------------------------------------

    def _finish(self, run_id: str, **outcome: Any) -> None:
        with self._lock:
            buf = self._pending.pop(run_id, None)
        if buf is None:
            return
        try:
            run_row, children = self._rows(buf, **outcome)
            position = self._write(run_row, children)
        except Exception as exc:  # never raise into the pipeline
            msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
            with self._lock:
                self.write_failed += 1
                self.last_error = exc
                self.write_failures.append(WriteFailure(run_id, msg, time.time()))
            try:
                _log_write_failure(run_id=run_id, db=self.display_url, error=msg)
            except Exception:
                pass
            return
        with self._lock:
            self.recorded += 1
            self.last_run_id = run_id
        self._mirror_after(position)

    def _mirror_after(self, position: int) -> None:
        """Hand the committed position to the mirror; a failure is logged, never raised."""
        if self._mirror is None:
            return
        try:
            if self._mirror == "env":
                from enginecfg.store.checkpoint import Mirror

                self._mirror = None  # a broken set-up is reported once, not on every run
                self._mirror = Mirror.from_env()
                if self._mirror is None:
                    return
            self._mirror.after_write(self, position)
        except Exception as exc:
            msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
            with self._lock:
                self.mirror_failed += 1
            try:
                _log_write_failure("audit_mirror_failed", position=position, error=msg)
            except Exception:
                pass

    def _rows(self, buf: _RunBuffer, *, status: str, finished_at: float,
              document: dict | None, fingerprint: str | None, error: dict | None,
              failed_stage: str | None) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
        s = buf.started
        run_id = s.run_id
        architecture = s.architecture
        if architecture is None and isinstance(document, dict):
            mc = (document.get("config") or {}).get("model_config") or {}
            architecture = mc.get("architecture") if isinstance(mc, dict) else None
        stages = [
            {"run_id": run_id, "stage_order": order, "stage": st["stage"],
             "origin": st.get("origin", "unknown"), "outcome": st.get("outcome", "unfinished"),
             "duration_s": _real(st.get("duration_s")), "n_changes": int(st.get("n_changes", 0)),
             "error": st.get("error")}
            for order, st in sorted(buf.stages.items())
        ]
        changes = [
            _with_json({"run_id": run_id, "seq": c.seq, "stage": c.stage, "field": c.field,
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
             "max_error": _real(v.max_error), "tolerance": _real(v.tolerance),
             "passed": bool(v.passed), "device": v.device, "seconds": float(v.seconds),
             "detail": v.detail}
            for i, v in enumerate(buf.checks, start=1)
        ]
        run_row = {
            "id": run_id, "started_at": float(s.started_at), "finished_at": float(finished_at),
            "status": status, "enginecfg_version": self._version, "host": self._host,
            "pid": os.getpid(), "model": str(s.model), "architecture": architecture,
            "input_fingerprint": s.input_fingerprint,
            "result_fingerprint": fingerprint, "error": normalise_json(error) if error else None,
            "failed_stage": failed_stage, "n_stages": len(stages), "n_changes": len(changes),
            "n_messages": len(messages), "n_checks": len(checks),
            **impact_columns(document),
            "hash_layout": current_layout(),
        }
        _with_json(run_row, engine_args=s.engine_args, planned_stages=list(s.stages),
                   input_config=s.input_config, result=document, source=s.source)
        children = {"stage_executions": stages, "changes": changes, "messages": messages,
                    "validation_checks": checks}
        _storable_texts("runs", [run_row])
        for table, rows in children.items():
            _storable_texts(table, rows)
            for row, digest in zip(rows, child_hashes(table, rows, run_row["hash_layout"])):
                row["row_hash"] = digest
        return run_row, children

    def _write(self, run_row: dict[str, Any], children: dict[str, list[dict[str, Any]]]) -> int:
        """Append the run to the chain in one transaction; returns its chain position."""
        engine = self.engine
        st = self._statements
        if st is None or st.dialect is not engine.dialect:
            st = self._prepare_writes(engine)
        hashes = {t: [r["row_hash"] for r in rows] for t, rows in children.items()}
        child_params = {t: st.params(t, children[t]) for t in _CHILD_ORDER if children.get(t)}
        # the run's values encoded now, outside the lock; the chain fields are filled in there
        run_params = list(st.params("runs", [dict(run_row, chain_pos=None, prev_hash=None, recorded_at=None,
                                                  row_hash=None)])[0])
        # the run's hash too, but for the three chain fields read inside the lock
        prepared = PreparedRunHash(run_row, hashes)
        position = None
        for attempt in range(_WRITE_ATTEMPTS):
            transient = False
            with self._write_lock:
                conn = self._writer_connection(engine)
                try:
                    position = self._write_once(conn, st, run_row, run_params, prepared, child_params)
                except Exception as exc:
                    transient = _is_transient(exc)
                    lost = not transient and self._drop_writer(conn)
                    if lost:  # it may have gone after the commit: then the run is there
                        position = self._recorded_position(engine, run_row)
                    if position is None and not (attempt + 1 < _WRITE_ATTEMPTS and (transient or lost)):
                        raise
                except BaseException:  # interrupted mid-write: the connection's state is unknown
                    self._drop_writer(conn)
                    raise
            if position is not None:
                break
            if transient:
                time.sleep(0.05 * (attempt + 1))  # outside the lock
        self._committed()
        return position

    def _prepare_writes(self, engine: Engine) -> _Statements:
        """The statements, the write lock and the checkpointer of *engine*, made once (and
        by one thread: two first writes at once must share one lock)."""
        with self._engine_lock:
            if self._statements is None or self._statements.dialect is not engine.dialect:
                self._write_lock = _eng.write_lock(engine)
                if self._checkpointer is not None:
                    self._checkpointer.close()
                self._checkpointer = _eng.wal_checkpointer(engine)
                self._statements = _Statements(engine.dialect)  # last: it marks the rest ready
            return self._statements

    def _committed(self) -> None:
        """Tell the checkpointer of a commit; its trouble is never the run's (the run is
        recorded, and SQLite's own checkpoint remains as a backstop)."""
        if self._checkpointer is not None:
            try:
                self._checkpointer.committed()
            except Exception:
                pass

    def _recorded_position(self, engine: Engine, run_row: dict[str, Any]) -> int | None:
        """The chain position of this very run if it is recorded (None: not, or not
        knowable): its id, start and finish (an earlier run given the same id is not it)."""
        try:
            with engine.connect() as conn:
                return conn.execute(select(Run.chain_pos).where(
                    Run.id == run_row["id"], Run.started_at == run_row["started_at"],
                    Run.finished_at == run_row["finished_at"])).scalar()
        except Exception:
            return None

    def _writer_connection(self, engine: Engine) -> Connection:
        """The connection this process writes through, kept from run to run (used under the
        write lock): no pool checkout, reset or liveness ping on each run, which on
        PostgreSQL is a round trip of its own.  A write that fails on it drops it
        (:meth:`_drop_writer`), so the next one starts on a fresh, pinged connection.  A
        forked child neither uses nor closes its parent's connections, kept or pooled: it
        opens its own.  (Fork while no other thread of the parent is writing: a
        connection copied mid-write is in a state neither process can use.)"""
        pid = os.getpid()
        if self._engine_pid != pid:
            self._writer = None  # the parent's: not ours to use, nor to close
            engine.dispose(close=False)
            self._engine_pid = pid
        if self._writer is None:
            self._writer, self._writer_pid = engine.connect(), pid
        return self._writer

    def _drop_writer(self, conn: Connection | None = None, close: bool = False) -> bool:
        """Forget the kept connection (only if it is *conn*, when given): discarded after a
        failure (not trusted), or closed when the store closes.  True when it was lost
        (closed or broken) and a write on a new one is worth trying.  Called under the
        write lock: no other thread is using it."""
        if conn is not None and self._writer is not conn:
            return False
        conn, self._writer = self._writer, None
        if conn is None or self._writer_pid != os.getpid():
            return False
        try:
            raw = conn.connection.driver_connection
            lost = bool(getattr(raw, "broken", False) or getattr(raw, "closed", False))
        except Exception:
            lost = True
        try:
            conn.close() if close else conn.invalidate()
        except Exception:
            pass
        return lost and not close

    def _write_once(self, conn: Connection, st: _Statements, run_row: dict[str, Any], run_params: list,
                    prepared: PreparedRunHash, child_params: dict[str, list[tuple]]) -> int:
        """One transaction on the driver connection: head, run, children, head, commit.
        Returns the run's chain position."""
        raw = conn.connection.driver_connection
        cur = raw.cursor()
        try:
            if st.sqlite:
                return self._write_sqlite(conn, raw, cur, st, run_row, run_params, prepared, child_params)
            return self._write_postgresql(conn, raw, cur, st, run_row, run_params, prepared, child_params)
        except BaseException:
            try:
                if st.sqlite:
                    if raw.in_transaction:
                        cur.execute("ROLLBACK")
                else:
                    raw.rollback()
            except Exception:
                pass
            raise
        finally:
            cur.close()

    @staticmethod
    def _chained(st: _Statements, run_row: dict[str, Any], run_params: list, prepared: PreparedRunHash,
                 position: int, head_hash: str) -> dict[str, Any]:
        """The run's row once the head is known: chain fields, hash, and their INSERT values."""
        row = dict(run_row, chain_pos=position + 1, prev_hash=head_hash, recorded_at=time.time())
        row["row_hash"] = prepared.finish(chain_pos=row["chain_pos"], prev_hash=head_hash,
                                          recorded_at=row["recorded_at"])
        for name, i, proc in st.chain_slots:
            run_params[i] = row[name] if proc is None else proc(row[name])
        return row

    def _write_sqlite(self, conn, raw, cur, st, run_row, run_params, prepared, child_params) -> int:
        cur.execute("BEGIN IMMEDIATE")
        cur.execute(st.select_head)
        row = self._chained(st, run_row, run_params, prepared, *cur.fetchone())
        cur.execute(st.inserts["runs"][0], tuple(run_params))
        for table, params in child_params.items():
            cur.executemany(st.inserts[table][0], params)
        cur.execute(st.update_head, (row["chain_pos"], row["row_hash"]))
        if self._before_commit is not None:
            self._before_commit(conn)
        cur.execute("COMMIT")
        return row["chain_pos"]

    def _write_postgresql(self, conn, raw, cur, st, run_row, run_params, prepared, child_params) -> int:
        """Two round trips: the append, one statement that is its own transaction
        (:meth:`_Statements.append`), committed without waiting for the WAL flush; then a
        transaction with an id, committed synchronously: it returns once the WAL is flushed
        past it, hence past this run, and the head is not locked meanwhile (writers share
        those flushes).  A run whose rows exceed one statement's parameters, or the test
        hook, makes the append part of an explicit transaction: the remaining rows, or the
        hook, then COMMIT."""
        recorded_at = time.time()
        slot = st.recorded_at_slot
        proc = st.inserts["runs"][1][slot][1]
        run_params[slot] = recorded_at if proc is None else proc(recorded_at)
        values = list(prepared.around_head(recorded_at=recorded_at))
        values += [run_params[i] for i in st.run_value_slots]
        # the rows go in the statement up to the protocol's limit on parameters; a run with
        # more (thousands of changes) sends the rest after it, in the same transaction
        budget = _PG_MAX_PARAMS - len(values)
        inline: dict[str, list[tuple]] = {}
        later: list[tuple[str, list[tuple]]] = []
        for table in _CHILD_ORDER:
            rows = child_params.get(table)
            if not rows:
                continue
            n = min(len(rows), max(0, budget // len(rows[0])))
            if n:
                inline[table] = rows[:n]
                budget -= n * len(rows[0])
                for params in rows[:n]:
                    values.extend(params)
            if n < len(rows):
                later.append((table, rows[n:]))
        explicit = bool(later) or self._before_commit is not None
        raw.autocommit = True  # the statement is its own transaction: no BEGIN, no COMMIT trip
        try:
            if explicit:
                cur.execute("BEGIN")
            cur.execute(st.append(inline), values)
            (position,) = cur.fetchone()
            for table, rows in later:
                cur.executemany(st.inserts[table][0], rows)
            if self._before_commit is not None:
                self._before_commit(conn)
            if explicit:
                cur.execute("COMMIT")
            cur.execute("SELECT txid_current()")  # its own transaction, committed synchronously
        except BaseException:
            if raw.info.transaction_status != _PG_IDLE:
                cur.execute("ROLLBACK")
            raise
        finally:
            if raw.info.transaction_status == _PG_IDLE:
                raw.autocommit = False  # as the pool handed it out
        return position

    # -- reading -------------------------------------------------------------------------

    def verify(self):
        """Walk the hash chain; see :func:`enginecfg.store.verify.verify`."""
        from enginecfg.store.verify import verify

        return verify(self)

    def list_runs(self, **kw: Any) -> list[dict[str, Any]]:
        from enginecfg.store import queries

        return queries.list_runs(self, **kw)

    def get_run(self, run_id: str) -> dict[str, Any]:
        from enginecfg.store import queries

        return queries.get_run(self, run_id)

    def field_history(self, field: str, **kw: Any) -> list[dict[str, Any]]:
        from enginecfg.store import queries

        return queries.field_history(self, field, **kw)

    def check_field(self, field: str) -> None:
        from enginecfg.store import queries

        queries.check_field(self, field)

    def why(self, run_id: str, field: str) -> dict[str, Any]:
        from enginecfg.store import queries

        return queries.why(self, run_id, field)

    def diff_runs(self, a: str, b: str) -> dict[str, Any]:
        from enginecfg.store import queries

        return queries.diff_runs(self, a, b)

    def export(self, out, **kw: Any) -> int:
        from enginecfg.store import queries

        return queries.export(self, out, **kw)

