"""The audit store: a subscriber of the signal bus that records each run in one transaction.

The pipeline never calls the store.  :meth:`AuditStore.attach` connects receivers to the
signals of :mod:`enginecfg.pipeline.events`; the store buffers a run's events in memory
(only for runs it saw start) and writes the whole run, its stage executions, changes,
messages and validation checks in ONE transaction when ``run_finished`` or ``run_failed``
arrives.  A transaction interrupted half-way is rolled back by the database.  A run whose
process ends before the run does (``os._exit`` in a plugin, a kill, a crash) leaves its
journal entry (:mod:`.journal`), which the next store to write that database records as an
``interrupted`` run, in a transaction of its own.

Inside that transaction the writer takes the chain head under a lock, gives the run the
next chain position and chains its hash to the previous run's (see
:mod:`enginecfg.store.hashing`), so the chain stays linear with any number of writers.

The parts: :mod:`.rows` builds the rows (and hashes the child rows), :mod:`.dialects` holds
the SQL of SQLite and PostgreSQL, :mod:`.connection` the kept connection, locks and retries,
:mod:`.mirror` the checkpoints written elsewhere, :mod:`.queries` and :mod:`.verify` the
reading side (the query methods here are thin delegates to them).

Each run records who ran it: the host, process, operating-system user, and the actor named
with ``AuditStore(actor=...)`` or ``ENGINECFG_ACTOR`` (a service account, a CI job).

Recording must never break the run it records: a failed write (database unreachable,
read-only file, disk full) is logged, kept in :attr:`AuditStore.last_error` /
:attr:`AuditStore.write_failures`, and swallowed.  So is a failed checkpoint to the mirror
(``ENGINECFG_AUDIT_MIRROR``), written after the run's transaction committed.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections import deque
from typing import Any, Callable

import attrs
from sqlalchemy import Engine

from enginecfg.pipeline import events
from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.store import engine as _eng
from enginecfg.store import rows as _rows
from enginecfg.store.connection import Writer
from enginecfg.store.journal import RunJournal, entry_header, interrupted_outcome, journal_dir
from enginecfg.store.rows import Identity, RunBuffer

__all__ = ["AuditStore", "WriteFailure", "ACTOR_ENV", "check_actor", "os_user"]

ACTOR_ENV = "ENGINECFG_ACTOR"
_MAX_KEPT_FAILURES = 100
_MAX_ACTOR = 255


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


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("enginecfg")
    except Exception:
        from enginecfg._layout import version as running_version

        return running_version()


def os_user() -> str:
    """The operating-system user of this process (``uid N`` where it has no name)."""
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"


def check_actor(value: Any, *, flag: str = "--actor") -> str | None:
    """An explicit actor as it is stored: None (none given) or a name of 1 to 255
    characters without control characters, surrounding blanks removed."""
    if value is None:
        return None
    if isinstance(value, str):
        name = value.strip()
        if name and len(name) <= _MAX_ACTOR and name.isprintable():
            return name
    raise InvalidInputError.for_value(
        "actor", value, f"a name of 1 to {_MAX_ACTOR} printable characters (a service "
        "account, a CI job)", flag=flag)


@attrs.frozen
class WriteFailure:
    """A run the store could not record, and why."""

    run_id: str
    error: str
    at: float


class AuditStore:
    """Records every run published on the signal bus into an audit database.

    ``url`` is any SQLAlchemy URL; None means ``ENGINECFG_DB`` or, when that is unset, a
    SQLite file ``audit.db`` in the user's data directory.  The schema is upgraded to the
    newest revision on first use unless ``auto_upgrade`` is false.  ``actor`` names who
    runs (a service account, a CI job); None means ``ENGINECFG_ACTOR``, when that is set.
    ``read_only`` opens the database for reading only: nothing is created, upgraded or
    written, and a database that holds no audit store at this enginecfg's schema revision is
    refused on first use (:class:`~enginecfg.store.engine.StoreNotReadyError`: none there,
    one to upgrade first, one a newer enginecfg wrote).

    Use ``store.attach()`` (returns the store) and ``store.detach()``, or
    ``with AuditStore(url).attach() as store: ...``.
    """

    def __init__(self, url: str | None = None, *, auto_upgrade: bool = True,
                 mirror: Any = "env", actor: str | None = None, read_only: bool = False):
        self.url: str = url if url is not None else _eng.default_url()
        _eng.check_url(self.url)  # a database the store cannot be kept in is refused now,
        _eng.lock_timeout()       # and so is a lock timeout that is no number of seconds
        if actor is None and os.environ.get(ACTOR_ENV):
            actor = check_actor(os.environ[ACTOR_ENV], flag=ACTOR_ENV)
        #: who records: host, process, version, operating-system user, explicit actor
        self.identity = Identity(host=socket.gethostname(), pid=os.getpid(), version=_version(),
                                 os_user=os_user(), actor=check_actor(actor))
        #: a :class:`~enginecfg.store.mirror.Mirror`, None, or "env" (built on first
        #: write from ENGINECFG_AUDIT_MIRROR, when that is set)
        self._mirror = mirror
        #: checkpoints the mirror failed to write
        self.mirror_failed: int = 0
        self.read_only = read_only
        self._auto_upgrade = auto_upgrade and not read_only
        self._engine: Engine | None = None
        self._ready = False
        self._lock = threading.Lock()          # guards the buffers and the counters
        self._engine_lock = threading.Lock()
        self._pending: dict[str, RunBuffer] = {}
        self._receivers: list[tuple[Any, Callable[..., None]]] = []
        self._writer = Writer()
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
        #: runs recorded from the journal of a process that ended before its run did
        #: (:mod:`enginecfg.store.journal`), by this store object
        self.recovered: int = 0
        #: journal entries this store could not record (left for a later store)
        self.recovery_failed: int = 0
        self._journal: RunJournal | None = None
        self._journal_lock = threading.Lock()
        self._recover_pending = True

    @property
    def actor(self) -> str | None:
        """The explicit actor this store records runs under (None: only the OS user)."""
        return self.identity.actor

    # -- database ------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, created (and the schema upgraded) on first use."""
        if self._ready and self._engine is not None:
            return self._engine
        with self._engine_lock:
            if self._engine is None:
                self._engine = _eng.make_engine(self.url, read_only=self.read_only)
                self._writer.engine_made()
            if not self._ready:
                if self.read_only:
                    _eng.check_readable(self._engine, self.url)
                elif (self._auto_upgrade
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
        self._writer.close()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
            self._ready = False

    # -- the bus -------------------------------------------------------------------------

    def attach(self) -> "AuditStore":
        """Connect the receivers (strongly referenced) to the bus; returns the store."""
        if self._receivers:
            return self
        if self.read_only:
            raise InvalidInputError("this audit store was opened read-only: it records no "
                                    "runs", field="read_only")
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
        if self._journal is None:
            self._journal = RunJournal(journal_dir(self.url))
        for signal, receiver in pairs:
            signal.connect(receiver, weak=False)
        self._receivers = pairs
        return self

    def detach(self) -> None:
        """Disconnect the receivers; runs still buffered are dropped (with their journal
        entries: their process goes on, and no longer asks for them to be recorded)."""
        for signal, receiver in self._receivers:
            signal.disconnect(receiver)
        self._receivers = []
        with self._lock:
            self._pending.clear()
        if self._journal is not None:
            with self._journal_lock:
                self._journal.end_all()

    def __enter__(self) -> "AuditStore":
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def _buffer(self, run_id: str) -> RunBuffer | None:
        with self._lock:
            return self._pending.get(run_id)

    def _on_run_started(self, sender: Any, event: events.RunStarted, **_: Any) -> None:
        buf = RunBuffer(event)
        with self._lock:
            self._pending[event.run_id] = buf
        if self._journal is not None and event.origins and any(o != "built-in" for o in event.origins):
            try:  # a plugin may end the process: the run is journaled (.journal)
                header = entry_header(event, self._who())
                with self._journal_lock:
                    self._journal.begin(event.run_id, header)
            except Exception:  # the journal is a safety net: it never breaks the run
                pass

    def _note(self, kind: str, event: Any) -> None:
        """Append *event* to its run's journal entry, when the run is journaled."""
        journal = self._journal
        if journal is not None and journal.holds(event.run_id):
            with self._journal_lock:
                journal.note(event.run_id, kind, event)

    def _on_stage_started(self, sender: Any, event: events.StageStarted, **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            buf.stages[event.order] = {"stage": event.stage, "origin": event.origin}
            self._note("stage_started", event)

    def _on_config_changed(self, sender: Any, event: events.ConfigChanged, **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            buf.changes.append(event)
            self._note("config_changed", event)

    def _on_warning_issued(self, sender: Any, event: events.WarningIssued, **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            buf.messages.append(event)
            self._note("warning_issued", event)

    def _on_stage_finished(self, sender: Any, event: events.StageFinished, **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            # a skipped stage never started: its origin comes with its end
            entry = buf.stages.setdefault(event.order, {"stage": event.stage,
                                                        "origin": event.origin or "unknown"})
            entry.update(outcome=event.outcome, duration_s=event.duration_s,
                         n_changes=event.changes, error=event.error)
            self._note("stage_finished", event)

    def _on_validation_checked(self, sender: Any, event: events.ValidationChecked,
                               **_: Any) -> None:
        buf = self._buffer(event.run_id)
        if buf is not None:
            buf.checks.append(event)
            self._note("validation_checked", event)

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
            try:
                self._recover_once()
            except Exception:  # the journal is a safety net: it never keeps a run unrecorded
                pass
            run_row, children = self._rows(buf, **outcome)
            position = self._writer.write(self.engine, run_row, children)
        except Exception as exc:  # never raise into the pipeline
            self._failed(run_id, exc)
            return
        finally:
            if self._journal is not None:
                with self._journal_lock:
                    self._journal.end(run_id)  # the run ended: recorded, or its failure said
        with self._lock:
            self.recorded += 1
            self.last_run_id = run_id
        self._mirror_after(position)

    def _failed(self, run_id: str, exc: Exception) -> None:
        msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
        with self._lock:
            self.write_failed += 1
            self.last_error = exc
            self.write_failures.append(WriteFailure(run_id, msg, time.time()))
        try:
            _log_write_failure(run_id=run_id, db=self.display_url, error=msg)
        except Exception:
            pass

    def _who(self) -> Identity:
        who = self.identity
        if who.pid != os.getpid():  # a forked child records under its own pid
            who = attrs.evolve(who, pid=os.getpid())
        return who

    def _recover_once(self) -> None:
        """Before this store's first write: record, as ``interrupted``, the runs whose
        process ended before they did (their journal entries, :mod:`.journal`), each in a
        transaction of its own.  A failure is logged and leaves the entry for a later try."""
        if not self._recover_pending:
            return
        with self._journal_lock:
            if not self._recover_pending:
                return
            self._recover_pending = False
        journal = self._journal or RunJournal(journal_dir(self.url))
        for orphan in journal.orphans():
            try:
                header, lines = orphan.lines()
                if header is None:  # cut short as its process died: nothing to rebuild from
                    orphan.done()
                    continue
                if self._holds(orphan.run_id):  # recorded, its entry not yet removed
                    orphan.done()
                    continue
                buf, who, outcome = interrupted_outcome(header, lines, time.time(),
                                                        orphan.last_heard)
                run_row, children = _rows.build_rows(buf, who, **outcome)
                position = self._writer.write(self.engine, run_row, children)
            except Exception as exc:  # left for a later store to try again
                orphan.close()
                with self._lock:
                    self.recovery_failed += 1
                try:
                    _log_write_failure("audit_recovery_failed", run_id=orphan.run_id,
                                       db=self.display_url,
                                       error=" ".join(f"{type(exc).__name__}: {exc}".split())[:500])
                except Exception:
                    pass
                continue
            orphan.done()
            with self._lock:
                self.recovered += 1
            self._mirror_after(position)

    def _holds(self, run_id: str) -> bool:
        from sqlalchemy import select

        from enginecfg.store.models import Run

        with self.engine.connect() as conn:
            return conn.execute(select(Run.id).where(Run.id == run_id)).scalar() is not None

    def _rows(self, buf: RunBuffer, **outcome: Any
              ) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
        """The run's rows, as :func:`enginecfg.store.rows.build_rows` makes them."""
        return _rows.build_rows(buf, self._who(), **outcome)

    def _mirror_after(self, position: int) -> None:
        """Hand the committed position to the mirror; a failure is logged, never raised."""
        if self._mirror is None:
            return
        try:
            if self._mirror == "env":
                from enginecfg.store.mirror import Mirror

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

    # -- reading (see enginecfg.store.queries and enginecfg.store.verify) -----------------

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
