"""The store writes through one connection kept from run to run; a connection lost between
two runs (a server restart, an idle timeout) costs a new connection, never a run."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from enginecfg.store import AuditStore
from enginecfg.store.connection import Writer
from enginecfg.testing import emit_run


def test_runs_share_one_connection(store):
    emit_run()
    kept = store._writer.kept
    emit_run()
    emit_run(fail="rejected")
    assert store._writer.kept is kept and store.recorded == 3 and store.write_failed == 0


def test_a_connection_lost_between_runs_is_replaced_and_no_run_is_lost(db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("a server ends the connection: PostgreSQL")
    store = AuditStore(db_url).attach()
    try:
        emit_run()
        kept = store._writer.kept
        pid = kept.connection.driver_connection.info.backend_pid
        with store.engine.connect() as admin:  # what a restart or an idle timeout does to it
            assert admin.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
        run_id = emit_run()
        assert store.write_failed == 0, store.record_error
        assert store.recorded == 2 and store._writer.kept is not kept
        assert store.get_run(run_id)["run_id"] == run_id
        assert store.verify().ok
    finally:
        store.close()


def test_a_failed_write_drops_the_connection(store, monkeypatch):
    emit_run()
    kept = store._writer.kept

    def refuse(*_a, **_k):
        raise RuntimeError("a write that fails")

    monkeypatch.setattr(Writer, "_write_once", refuse)
    emit_run()
    assert store.write_failed == 1 and store._writer.kept is None  # not trusted after a failure
    monkeypatch.undo()
    emit_run()
    assert store.recorded == 2 and store._writer.kept is not None and store._writer.kept is not kept
    assert store.verify().ok


def _end_connection_at(store, monkeypatch, starts: str) -> list[bool]:
    """End the server side of the writer's connection once, just before it sends the first
    statement starting with *starts* (what a restart or an idle timeout does).  Returns a
    flag list: ``[False]`` once it happened."""
    import psycopg

    execute = psycopg.Cursor.execute
    armed = [True]

    def ending(self, query, *a, **k):
        if armed[0] and isinstance(query, str) and query.startswith(starts):
            armed[0] = False
            with store.engine.connect() as admin:
                admin.execute(text("SELECT pg_terminate_backend(:p)"), {"p": self.connection.info.backend_pid})
        return execute(self, query, *a, **k)

    monkeypatch.setattr(psycopg.Cursor, "execute", ending)
    return armed


def test_a_connection_lost_after_the_commit_counts_the_run_as_recorded(db_url, monkeypatch):
    """The append committed, then the connection went before the flush wait answered: the
    run is there, so it is recorded, not reported failed (nor written twice)."""
    if not db_url.startswith("postgresql"):
        pytest.skip("a server ends the connection: PostgreSQL")
    store = AuditStore(db_url).attach()
    try:
        emit_run()
        armed = _end_connection_at(store, monkeypatch, "SELECT txid_current()")
        run_id = emit_run()
        monkeypatch.undo()
        assert not armed[0]  # the case was met
        assert store.write_failed == 0, store.record_error
        assert store.recorded == 2 and store.get_run(run_id)["run_id"] == run_id
        assert store.verify().ok
    finally:
        store.close()


def test_a_lost_connection_does_not_pass_off_an_earlier_run_as_this_one(db_url, monkeypatch):
    """The run's id is already recorded (a caller reused it) and the connection is lost
    before the append: the run is not taken as recorded; the retry meets the duplicate."""
    if not db_url.startswith("postgresql"):
        pytest.skip("a server ends the connection: PostgreSQL")
    store = AuditStore(db_url).attach()
    try:
        emit_run(run_id="e" * 32)
        armed = _end_connection_at(store, monkeypatch, "WITH h AS")
        emit_run(run_id="e" * 32)
        monkeypatch.undo()
        assert not armed[0]  # the case was met
        assert store.recorded == 1 and store.write_failed == 1
        assert "UniqueViolation" in store.record_error
        assert store.verify().ok
    finally:
        store.close()


def test_only_the_connection_that_failed_is_dropped(store):
    """A thread's failure drops the connection it used, never one another thread has
    opened since (the drop happens under the write lock, on that connection only)."""
    emit_run()
    kept = store._writer.kept
    other = store.engine.connect()
    try:
        assert store._writer.drop(other) is False and store._writer.kept is kept
    finally:
        other.close()
    emit_run()
    assert store._writer.kept is kept and store.write_failed == 0


def test_a_failing_checkpointer_does_not_fail_the_run(tmp_path, monkeypatch):
    from enginecfg.store.walcheckpoint import WalCheckpointer

    def broken(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(WalCheckpointer, "committed", broken)
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}").attach()
    try:
        for _ in range(3):
            emit_run()
        assert store.recorded == 3 and store.write_failed == 0 and store.verify().ok
    finally:
        store.close()


def _forked_writer(store: AuditStore, runs: int, out) -> None:
    for _ in range(runs):
        emit_run()
    out.put((store.recorded, store.write_failed, store.record_error))


def test_a_forked_child_writes_on_connections_of_its_own(db_url):
    """The parent opened the database (schema, a read) but has not written yet: its pool
    holds a connection, which the child must not share."""
    import multiprocessing

    store = AuditStore(db_url).attach()
    try:
        store.list_runs()  # the parent's pool now holds a connection
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_forked_writer, args=(store, 15, out))
        child.start()
        for _ in range(15):
            emit_run()
        recorded, failed, error = out.get(timeout=120)
        child.join(60)
        assert child.exitcode == 0
        assert (recorded, failed) == (15, 0), error
        assert store.recorded == 15 and store.write_failed == 0, store.record_error
        result = store.verify()
        assert result.ok and result.runs_checked == 30
    finally:
        store.close()


def test_first_writes_of_several_threads_share_one_lock_and_connection(db_url, monkeypatch):
    """The write set-up (statements, write lock, checkpointer) is made by one thread: two
    locks would let two threads write on the one kept connection at once."""
    import threading

    from enginecfg.store import dialects

    made = []
    real = dialects.statements_for

    def slow_statements(dialect):
        made.append(1)
        threading.Event().wait(0.1)  # every thread reaches the set-up meanwhile
        return real(dialect)

    monkeypatch.setattr(dialects, "statements_for", slow_statements)
    store = AuditStore(db_url).attach()
    try:
        store.engine  # the schema first: only the write set-up races
        gate = threading.Barrier(4)
        threads = [threading.Thread(target=lambda: (gate.wait(), emit_run())) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(made) == 1
        assert store.recorded == 4 and store.write_failed == 0, store.record_error
        assert store.verify().ok
    finally:
        store.close()
