"""A writer stopped while it holds the store's lock (suspended with SIGSTOP, as Ctrl-Z does)
holds up the others only for the lock timeout (``ENGINECFG_DB_LOCK_TIMEOUT``): then the run
is reported unrecorded with a message naming the store and the wait, and once the stopped
writer is gone the store takes runs again, intact."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from support import CONFIGS, run_cli
from enginecfg.store import AuditStore
from enginecfg.store.engine import LOCK_TIMEOUT_ENV, StoreBusyError, lock_timeout
from enginecfg.testing import emit_run

#: a writer that takes the store's locks as enginecfg's writer does, says so, and stops
_STOPPED_WRITER = textwrap.dedent("""
    import os, signal, sys
    url, how = sys.argv[1], sys.argv[2]
    if url.startswith("sqlite"):
        import fcntl, sqlite3
        path = url[len("sqlite:///"):]
        if how == "file-lock":
            fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT)
            fcntl.flock(fd, fcntl.LOCK_EX)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
    else:
        from sqlalchemy import text
        from enginecfg.store.engine import make_engine
        conn = make_engine(url).connect()
        conn.execute(text("SELECT position FROM chain_head WHERE id = 1 FOR UPDATE")).all()
    print("holding", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
""")


@pytest.fixture
def stopped_writer(db_url):
    """A store holding one run, and a stopped writer holding its lock: ``(url, process)``."""
    with AuditStore(db_url).attach():
        emit_run()
    holders = []

    def start(how: str = "file-lock") -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", _STOPPED_WRITER, db_url, how],
                                stdout=subprocess.PIPE, text=True)
        holders.append(proc)
        assert proc.stdout.readline().strip() == "holding"
        for _ in range(200):  # until it is stopped
            with open(f"/proc/{proc.pid}/stat") as fh:
                if fh.read().split(")")[-1].split()[0] == "T":
                    break
            time.sleep(0.01)
        return proc

    yield db_url, start
    for proc in holders:
        _end(proc)


def _end(proc: subprocess.Popen) -> None:
    """End a stopped writer (SIGKILL ends a stopped process too)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def _ends_the_others(db_url, timeout: float = 1.0):
    started = time.monotonic()
    proc = run_cli("run", str(CONFIGS / "qwen3.5-27b"), "--db", db_url,
                   env={LOCK_TIMEOUT_ENV: str(timeout)}, timeout=60)
    return proc, time.monotonic() - started


@pytest.mark.parametrize("how", ["file-lock", "sqlite-only"])
def test_a_stopped_writer_holds_up_a_run_only_for_the_lock_timeout(stopped_writer, how):
    db_url, start = stopped_writer
    if how == "sqlite-only" and not db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL has one lock, taken by the first case")
    holder = start(how)
    proc, took = _ends_the_others(db_url)
    assert proc.returncode == 2, proc.stderr
    assert "audit record NOT written" in proc.stderr and "is locked" in proc.stderr
    assert "more than 1 s" in proc.stderr and LOCK_TIMEOUT_ENV in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 20
    _end(holder)
    again = run_cli("run", str(CONFIGS / "qwen3.5-27b"), "--db", db_url)
    assert again.returncode == 0, again.stderr
    verdict = run_cli("audit", "verify", "--db", db_url)
    assert verdict.returncode == 0 and "intact: 2 run(s)" in verdict.stdout


def test_the_library_reports_the_busy_store_as_a_write_failure(stopped_writer, monkeypatch):
    db_url, start = stopped_writer
    start()
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, "0.5")
    store = AuditStore(db_url).attach()
    try:
        emit_run()
        assert store.recorded == 0 and store.write_failed == 1
        assert isinstance(store.last_error, StoreBusyError)
        assert "more than 0.5 s" in store.record_error
    finally:
        store.close()


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_lock_timeout_that_is_no_number_of_seconds_is_refused(monkeypatch, value):
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, value)
    with pytest.raises(Exception, match=LOCK_TIMEOUT_ENV):
        lock_timeout()
    monkeypatch.setenv(LOCK_TIMEOUT_ENV, "")
    assert lock_timeout() == 30.0


def test_a_run_with_a_lock_timeout_that_is_no_number_is_refused_before_it_runs(tmp_path):
    proc = run_cli("run", str(CONFIGS / "qwen3.5-27b"), "--db", f"sqlite:///{tmp_path / 'a.db'}",
                   env={LOCK_TIMEOUT_ENV: "soon"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"invalid {LOCK_TIMEOUT_ENV}: got 'soon'" in proc.stderr and "Traceback" not in proc.stderr
