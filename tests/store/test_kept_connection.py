"""The store writes through one connection kept from run to run; a connection lost between
two runs (a server restart, an idle timeout) costs a new connection, never a run."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from enginecfg.store import AuditStore
from enginecfg.testing import emit_run


def test_runs_share_one_connection(store):
    emit_run()
    kept = store._writer
    emit_run()
    emit_run(fail="rejected")
    assert store._writer is kept and store.recorded == 3 and store.write_failed == 0


def test_a_connection_lost_between_runs_is_replaced_and_no_run_is_lost(db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("a server ends the connection: PostgreSQL")
    store = AuditStore(db_url).attach()
    try:
        emit_run()
        kept = store._writer
        pid = kept.connection.driver_connection.info.backend_pid
        with store.engine.connect() as admin:  # what a restart or an idle timeout does to it
            assert admin.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
        run_id = emit_run()
        assert store.write_failed == 0, store.record_error
        assert store.recorded == 2 and store._writer is not kept
        assert store.get_run(run_id)["run_id"] == run_id
        assert store.verify().ok
    finally:
        store.close()


def test_a_failed_write_drops_the_connection(store, monkeypatch):
    emit_run()
    kept = store._writer

    def refuse(*_a, **_k):
        raise RuntimeError("a write that fails")

    monkeypatch.setattr(type(store), "_write_once", refuse)
    emit_run()
    assert store.write_failed == 1 and store._writer is None  # not trusted after a failure
    monkeypatch.undo()
    emit_run()
    assert store.recorded == 2 and store._writer is not None and store._writer is not kept
    assert store.verify().ok
