"""Checkpointing a SQLite audit file's write-ahead log beside the writers, not inside them.

In WAL mode every commit appends its pages to ``<database>-wal``; a *checkpoint* copies
them back into the database file and syncs both.  Left to SQLite, the commit that passes
the auto-checkpoint threshold runs the checkpoint itself, so one recorded run in every
few dozen pays for the copy and two ``fsync`` calls, and, since that commit still holds
the writers' file lock, every other writer of the file waits through it too.

A :class:`WalCheckpointer` moves that work to a thread of the writing process with a
connection of its own: after every :attr:`~WalCheckpointer.every` commits of this process
it wakes the thread, which runs ``PRAGMA wal_checkpoint(PASSIVE)``.  A passive checkpoint
takes no lock a writer needs (it copies what no reader still uses and returns), and the
driver releases the GIL while SQLite works, so the writer goes on recording meanwhile.
Writers' connections keep SQLite's own auto-checkpoint at a high threshold
(:data:`BACKSTOP_PAGES`) as a backstop, for a thread that cannot keep up or a writer of
the file that has none.  Durability is unchanged: commits and checkpoints sync as before
(``synchronous = NORMAL``), and a checkpoint cut short by a killed process is one SQLite
completes or ignores on the next open.
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import urllib.parse
import weakref

__all__ = ["BACKSTOP_PAGES", "WalCheckpointer"]

#: SQLite's auto-checkpoint threshold on writers' connections (pages; SQLite's default is
#: 1,000; 4,000 pages are 16 MB): reached when no checkpointer thread keeps up, and
#: in a long run of commits, where a passive checkpoint never finds the log idle enough to
#: let the next writer start it again from the top
BACKSTOP_PAGES = 4_000

_live: "weakref.WeakSet[WalCheckpointer]" = weakref.WeakSet()


class WalCheckpointer:
    """A thread that checkpoints the WAL of the SQLite file at ``path`` after every
    ``every`` commits of this process (:meth:`committed`); started on first need, and again
    in a forked child, stopped by :meth:`close` or at interpreter exit."""

    def __init__(self, path: str, every: int = 32):
        self.path = os.path.abspath(path)  # the file of the first write, whatever the cwd later
        self.every = every
        #: checkpoints run, and those SQLite refused (another connection was checkpointing)
        self.checkpoints = 0
        self.busy = 0
        self._commits = 0
        self._pid = 0
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._starting = threading.Lock()

    def committed(self) -> None:
        """Count one commit of this process; every ``every``-th wakes the thread."""
        self._commits += 1  # a rough count: two threads may count one commit as one
        if self._commits % self.every:
            return
        if self._pid != os.getpid():
            self._starting = threading.Lock()  # a forked child: the parent's may be held
        with self._starting:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._start()
        self._wake.set()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._wake = threading.Event()  # a forked child must not share its parent's
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, args=(self._wake,),
                                        name="enginecfg-wal-checkpoint", daemon=True)
        self._thread.start()
        _live.add(self)

    def _loop(self, wake: threading.Event) -> None:
        conn = None
        try:
            # read-write, never create: a file that is gone is not made again, empty
            conn = sqlite3.connect(f"file:{urllib.parse.quote(self.path)}?mode=rw", uri=True, timeout=0,
                                   isolation_level=None, check_same_thread=False)
            while True:
                wake.wait()
                wake.clear()
                if self._stopping:
                    return
                try:
                    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error:  # e.g. locked by a schema change: the next wake retries
                    busy = 1
                if busy:
                    self.busy += 1
                else:
                    self.checkpoints += 1
        except sqlite3.Error:  # the file cannot be opened here: the backstop remains
            return
        finally:
            if conn is not None:
                conn.close()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread (it finishes a checkpoint it is in the middle of)."""
        thread = self._thread
        if thread is None or self._pid != os.getpid():
            self._thread = None
            return
        self._stopping = True
        self._wake.set()
        thread.join(timeout)
        self._thread = None
        _live.discard(self)


@atexit.register
def _close_all() -> None:
    for checkpointer in list(_live):
        checkpointer.close(timeout=5.0)
