"""A SQLite store's write-ahead log is checkpointed by a thread of the writing process,
not inside a writer's commit; the thread is started on need and stopped with the store."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time

from enginecfg.store import AuditStore
from enginecfg.store.walcheckpoint import BACKSTOP_PAGES, WalCheckpointer
from enginecfg.testing import emit_run

THREAD = "enginecfg-wal-checkpoint"


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


def _wait(predicate, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_the_thread_checkpoints_while_the_writer_records(tmp_path):
    db = tmp_path / "audit.db"
    store = AuditStore(f"sqlite:///{db}").attach()
    try:
        emit_run()
        checkpointer = store._writer.checkpointer
        assert isinstance(checkpointer, WalCheckpointer) and checkpointer.path == str(db)
        with store.engine.connect() as conn:  # SQLite's own checkpoint is only a backstop
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == BACKSTOP_PAGES
        for _ in range(checkpointer.every - 1):
            emit_run()
        assert _wait(lambda: checkpointer.checkpoints >= 1)
        assert len(_threads()) == 1
        # the runs are in the database file itself, not only in its log: far below SQLite's
        # own threshold, only the thread can have copied them there
        copy = tmp_path / "file-alone.db"
        copy.write_bytes(db.read_bytes())
        with sqlite3.connect(copy) as alone:
            assert alone.execute("SELECT count(*) FROM runs").fetchone()[0] == checkpointer.every
        for _ in range(2 * checkpointer.every):
            emit_run()
        assert _wait(lambda: checkpointer.checkpoints + checkpointer.busy >= 3)
        assert store.recorded == 3 * checkpointer.every and store.write_failed == 0
        assert store.verify().ok
    finally:
        store.close()
    assert _wait(lambda: not _threads(), 10)  # stopped with the store


def test_no_thread_before_it_is_needed_and_none_for_postgresql_or_memory(tmp_path):
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}").attach()
    try:
        emit_run()
        assert store._writer.checkpointer._thread is None and not _threads()  # one commit: not yet
    finally:
        store.close()
    from sqlalchemy import create_engine

    from enginecfg.store.engine import wal_checkpointer

    assert wal_checkpointer(create_engine("sqlite://")) is None
    assert wal_checkpointer(create_engine("postgresql+psycopg://u@h/db")) is None


def _child(checkpointer: WalCheckpointer, out) -> None:
    for _ in range(checkpointer.every):
        checkpointer.committed()
    ok = _wait(lambda: checkpointer.checkpoints >= 1)
    out.put((ok, [t.name for t in threading.enumerate() if t.name == THREAD]))
    checkpointer.close()


def test_a_forked_process_starts_a_thread_of_its_own(tmp_path):
    db = tmp_path / "plain.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t (x)")
    checkpointer = WalCheckpointer(str(db), every=4)
    try:
        for _ in range(4):
            checkpointer.committed()
        assert _wait(lambda: checkpointer.checkpoints >= 1) and len(_threads()) == 1
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        checkpointer.checkpoints = 0
        child = ctx.Process(target=_child, args=(checkpointer, out))
        child.start()
        ok, names = out.get(timeout=60)
        child.join(30)
        assert child.exitcode == 0
        assert ok and names == [THREAD]  # a thread of its own: a fork copies none of its parent's
        assert len(_threads()) == 1 and checkpointer._thread.is_alive()  # the parent's goes on
    finally:
        checkpointer.close()
    assert not _threads()


def test_the_thread_opens_the_file_of_the_first_write_and_never_creates_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    checkpointer = WalCheckpointer("rel.db", every=1)
    assert checkpointer.path == str(tmp_path / "rel.db")  # not re-read against a later cwd
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    try:
        checkpointer.committed()  # no such file: the thread cannot open it, and makes none
        assert _wait(lambda: checkpointer._thread is not None and not checkpointer._thread.is_alive(), 10)
        assert not (tmp_path / "rel.db").exists() and not list(elsewhere.iterdir())
    finally:
        checkpointer.close()
