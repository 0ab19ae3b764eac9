"""Connection handling of the writer: one kept connection, forks, locks, retries.

:class:`Writer` appends runs to one database.  It writes through one connection kept from
run to run (no pool checkout, reset or liveness ping per run, which on PostgreSQL is a round
trip of its own), under a write lock (:func:`enginecfg.store.engine.write_lock`: a thread
lock, and for a SQLite file a cross-process file lock), and tries a run again when the
database answered with a busy lock or a serialisation conflict, or when the kept connection
turned out lost (a server restart, an idle timeout).  A lock held longer than the store's lock
timeout (a writer stopped while holding it) ends the write with
:class:`~enginecfg.store.engine.StoreBusyError`, not with another wait.  A forked child neither uses nor closes its parent's connections.  The
write-ahead log of a SQLite file is checkpointed by a thread beside the writer
(:mod:`enginecfg.store.walcheckpoint`).  The statements themselves are
:mod:`enginecfg.store.dialects`'.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import DBAPIError, OperationalError

from enginecfg.store import dialects
from enginecfg.store import engine as _eng
from enginecfg.store.hashing import PreparedRunHash
from enginecfg.store.models import Run
from enginecfg.store.rows import CHILD_ORDER
from enginecfg.store.walcheckpoint import WalCheckpointer

__all__ = ["Writer", "is_transient", "is_lock_timeout", "WRITE_ATTEMPTS"]

WRITE_ATTEMPTS = 5


def is_lock_timeout(exc: BaseException) -> bool:
    """PostgreSQL gave up waiting for a lock (``lock_timeout``, SQLSTATE 55P03): a writer
    holds it, and trying again would wait as long again."""
    code = getattr(exc, "sqlstate", None) or getattr(getattr(exc, "orig", None), "sqlstate", None)
    return code == "55P03"


def is_transient(exc: BaseException) -> bool:
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


class Writer:
    """Appends runs to the database of an engine the owner gives on each write."""

    def __init__(self) -> None:
        self._setup_lock = threading.Lock()
        self.statements: dialects.Statements | None = None
        self.lock: _eng.WriteLock | None = None
        self.checkpointer: WalCheckpointer | None = None
        #: the kept connection (see :meth:`connection`)
        self.kept: Connection | None = None
        self._kept_pid = 0
        self._engine_pid = os.getpid()  # the process the engine's pool belongs to

    def engine_made(self) -> None:
        """The owner made a new engine in this process."""
        self._engine_pid = os.getpid()

    # -- writing -----------------------------------------------------------------------------

    def write(self, engine: Engine, run_row: dict[str, Any],
              children: dict[str, list[dict[str, Any]]]) -> int:
        """Append the run to the chain in one transaction; returns its chain position."""
        st = self.statements
        if st is None or st.dialect is not engine.dialect:
            st = self._prepare(engine)
        hashes = {t: [r["row_hash"] for r in rows] for t, rows in children.items()}
        child_params = {t: st.params(t, children[t]) for t in CHILD_ORDER if children.get(t)}
        # the run's values encoded now, outside the lock; the chain fields are filled in there
        run_params = list(st.params("runs", [dict(run_row, chain_pos=None, prev_hash=None,
                                                  recorded_at=None, row_hash=None)])[0])
        # the run's hash too, but for the three chain fields read inside the lock
        prepared = PreparedRunHash(run_row, hashes)
        position = None
        start, timeout = time.monotonic(), _eng.lock_timeout()
        for attempt in range(WRITE_ATTEMPTS):
            transient = False
            with self.lock:  # StoreBusyError after the lock timeout
                conn = self.connection(engine)
                try:
                    position = self._write_once(conn, st, run_row, run_params, prepared, child_params)
                except Exception as exc:
                    if is_lock_timeout(exc) or (is_transient(exc)
                                                and time.monotonic() - start >= timeout):
                        raise _eng.busy(engine.url, timeout) from exc  # a writer holds it
                    transient = is_transient(exc)
                    lost = not transient and self.drop(conn)
                    if lost:  # it may have gone after the commit: then the run is there
                        position = self._recorded_position(engine, run_row)
                    if position is None and not (attempt + 1 < WRITE_ATTEMPTS and (transient or lost)):
                        raise
                except BaseException:  # interrupted mid-write: the connection's state is unknown
                    self.drop(conn)
                    raise
            if position is not None:
                break
            if transient:
                time.sleep(0.05 * (attempt + 1))  # outside the lock
        self._committed()
        return position

    def _write_once(self, conn: Connection, st: dialects.Statements, run_row: dict[str, Any],
                    run_params: list, prepared: PreparedRunHash,
                    child_params: dict[str, list[tuple]]) -> int:
        """One transaction on the driver connection; the run's chain position."""
        raw = conn.connection.driver_connection
        cur = raw.cursor()
        try:
            return st.append(raw, cur, run_row, run_params, prepared, child_params)
        except BaseException:
            try:
                st.rollback(raw, cur)
            except Exception:
                pass
            raise
        finally:
            cur.close()

    def _prepare(self, engine: Engine) -> dialects.Statements:
        """The statements, the write lock and the checkpointer of *engine*, made once (and
        by one thread: two first writes at once must share one lock)."""
        with self._setup_lock:
            if self.statements is None or self.statements.dialect is not engine.dialect:
                self.lock = _eng.write_lock(engine)
                if self.checkpointer is not None:
                    self.checkpointer.close()
                self.checkpointer = _eng.wal_checkpointer(engine)
                self.statements = dialects.statements_for(engine.dialect)  # last: marks the rest ready
            return self.statements

    def _committed(self) -> None:
        """Tell the checkpointer of a commit; its trouble is never the run's (the run is
        recorded, and SQLite's own checkpoint remains as a backstop)."""
        if self.checkpointer is not None:
            try:
                self.checkpointer.committed()
            except Exception:
                pass

    @staticmethod
    def _recorded_position(engine: Engine, run_row: dict[str, Any]) -> int | None:
        """The chain position of this very run if it is recorded (None: not, or not
        knowable): its id, start and finish (an earlier run given the same id is not it)."""
        try:
            with engine.connect() as conn:
                return conn.execute(select(Run.chain_pos).where(
                    Run.id == run_row["id"], Run.started_at == run_row["started_at"],
                    Run.finished_at == run_row["finished_at"])).scalar()
        except Exception:
            return None

    # -- the kept connection -----------------------------------------------------------------

    def connection(self, engine: Engine) -> Connection:
        """The connection this process writes through, kept from run to run (used under the
        write lock).  A write that fails on it drops it (:meth:`drop`), so the next one
        starts on a fresh, pinged connection.  A forked child neither uses nor closes its
        parent's connections, kept or pooled: it opens its own.  (Fork while no other thread
        of the parent is writing: a connection copied mid-write is in a state neither
        process can use.)"""
        pid = os.getpid()
        if self._engine_pid != pid:
            self.kept = None  # the parent's: not ours to use, nor to close
            engine.dispose(close=False)
            self._engine_pid = pid
        if self.kept is None:
            self.kept, self._kept_pid = engine.connect(), pid
        return self.kept

    def drop(self, conn: Connection | None = None, close: bool = False) -> bool:
        """Forget the kept connection (only if it is *conn*, when given): discarded after a
        failure (not trusted), or closed when the store closes.  True when it was lost
        (closed or broken) and a write on a new one is worth trying.  Called under the
        write lock: no other thread is using it."""
        if conn is not None and self.kept is not conn:
            return False
        conn, self.kept = self.kept, None
        if conn is None or self._kept_pid != os.getpid():
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

    def close(self) -> None:
        """Close the kept connection, the lock file and the checkpointer."""
        if self.lock is not None:
            with self.lock.threads:  # not while another thread of ours writes on it
                self.drop(close=True)
            self.lock.close()
            self.lock = None
        else:
            self.drop(close=True)
        if self.checkpointer is not None:
            self.checkpointer.close()
            self.checkpointer = None
