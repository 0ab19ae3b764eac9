"""SQLite writers queue on a file lock taken before BEGIN IMMEDIATE, and are woken on release."""

from __future__ import annotations

import fcntl
import os
import threading
import time

from enginecfg.store import AuditStore
from enginecfg.testing import emit_run


def test_a_writer_waits_for_the_file_lock_and_goes_as_soon_as_it_is_free(tmp_path):
    db = tmp_path / "audit.db"
    store = AuditStore(f"sqlite:///{db}").attach()
    try:
        emit_run()  # schema, and the lock file beside the database
        lock_file = tmp_path / "audit.db.lock"
        assert lock_file.exists()
        fd = os.open(lock_file, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)  # another writer holds it (an open file of its own)
        done = threading.Event()
        t = threading.Thread(target=lambda: (emit_run(), done.set()))
        t.start()
        assert not done.wait(0.8)  # queued on the lock, not failing, not writing
        assert store.recorded == 1
        released = time.monotonic()
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        assert done.wait(30)
        t.join()
        assert time.monotonic() - released < 5  # handed over, not found by a sleeping poll
        assert store.recorded == 2 and store.write_failed == 0
        assert store.verify().ok
    finally:
        store.close()


def test_a_read_only_folder_only_costs_the_file_lock(tmp_path):
    """Where the lock file cannot be created, writes still go through (busy timeout)."""
    from enginecfg.store.engine import WriteLock

    lock = WriteLock(str(tmp_path / "absent-folder" / "x.lock"))
    with lock:
        pass
    assert lock.path is None
