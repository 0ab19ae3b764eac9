"""The journal of runs under way: a run whose process ends before the run does is recorded.

A run is recorded in one transaction when it ends (:mod:`.recorder`).  A process can end
before that without running another line: a plugin's stage calls ``os._exit``, the process
is killed, it crashes.  So while a run that holds a plugin's stage is under way its store
keeps a small file for it, the run's *journal entry*: what the run began with (its
``run_started`` event, who runs it) and, at each plugin stage that starts or finishes, the
stages, changes and messages so far.  The run's own transaction is unchanged; the entry is
removed once the run ended (recorded or not).

Only runs with a plugin's stage are journaled: the built-in stages never end the process, and
a file written and removed per run would cost the store's hot path (a fleet recording every
engine start) about 15% of its speed, measured on synthetic runs.  A run of built-ins alone whose process is killed leaves
nothing behind, as before: no partial record, and none of its end.

The writing process holds an exclusive ``flock`` on its entry for as long as the run is under
way; the kernel releases it when the process ends, however it ends.  So an entry whose lock
can be taken belongs to a run whose process is gone, and the next store to open the database
for writing records it (:meth:`AuditStore <enginecfg.store.recorder.AuditStore>`), in a
transaction of its own, as an ``interrupted`` run: the stages, changes and messages the entry
holds, and an error saying where the run was when it was last heard of.  A run the store
holds already (its process ended after the commit, before the entry went) is not recorded
twice.

Where the entries are: beside a SQLite file, in ``<database>.journal/``; for PostgreSQL in the
user's state directory (``$XDG_STATE_HOME/enginecfg/journal/<digest of the URL>``), so the next
writer of that store on the same host and account records them.  Nothing is journaled for an
in-memory database.  A journal that cannot be written (a read-only folder) is skipped: the
run is still recorded when it ends.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from enginecfg.pipeline import events
from enginecfg.store.rows import Identity, RunBuffer

__all__ = ["FORMAT", "RunJournal", "Orphan", "journal_dir", "interrupted_outcome"]

FORMAT = "enginecfg-run-journal/1"
_SUFFIX = ".json"


def journal_dir(url: Any) -> Path | None:
    """Where the journal of the store at *url* is kept (None: nowhere, an in-memory one)."""
    from enginecfg.store.engine import normalise_url

    u = normalise_url(url)
    if u.get_backend_name() == "sqlite":
        if not u.database or u.database == ":memory:" or u.database.startswith("file:"):
            return None
        return Path(u.database).expanduser().with_name(Path(u.database).name + ".journal")
    import platformdirs

    digest = hashlib.sha256(u.render_as_string(hide_password=True).encode()).hexdigest()[:20]
    return Path(platformdirs.user_state_dir("enginecfg")) / "journal" / digest


def _encode(body: dict[str, Any]) -> bytes:
    # ASCII with escapes: a lone surrogate (a file name's byte) survives the round trip
    return json.dumps(body, default=str).encode("ascii")


@attrs.define
class _Entry:
    fd: int
    path: Path


class RunJournal:
    """The journal entries of the runs this process has under way (one store's)."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self._entries: dict[str, _Entry] = {}
        self._ready = False
        self._pid = os.getpid()

    def _writable(self) -> bool:
        if self.folder is None:
            return False
        if not self._ready:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except OSError:
                self.folder = None  # a read-only place: no journal, the runs are recorded as usual
                return False
            self._ready = True
        return True

    def _write_locked(self, run_id: str, body: dict[str, Any]) -> _Entry:
        """A new file holding *body*, locked, in the entry's place (replacing the old one)."""
        import fcntl

        tmp = self.folder / f".{run_id}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # new: nobody else holds it
            os.write(fd, _encode(body))
            final = self.folder / f"{run_id}{_SUFFIX}"
            os.replace(tmp, final)  # the place always holds a locked file
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        return _Entry(fd, final)

    def begin(self, run_id: str, body: dict[str, Any]) -> None:
        """Journal a run that began (nothing if the journal cannot be written)."""
        if self._pid != os.getpid():  # a forked child: the parent's entries are the parent's
            self._entries, self._pid = {}, os.getpid()
        if run_id in self._entries or not self._writable():
            return
        try:
            self._entries[run_id] = self._write_locked(run_id, body)
        except OSError:
            pass

    def update(self, run_id: str, body: dict[str, Any]) -> None:
        """Replace the entry of a run under way with *body*."""
        old = self._entries.get(run_id)
        if old is None or self._pid != os.getpid():
            return
        try:
            self._entries[run_id] = self._write_locked(run_id, body)
        except OSError:
            return
        os.close(old.fd)  # its file was replaced: the new one is locked already

    def end(self, run_id: str) -> None:
        """The run ended: its entry goes (unlinked while still locked, then closed)."""
        entry = self._entries.pop(run_id, None)
        if entry is None or self._pid != os.getpid():
            return
        try:
            os.unlink(entry.path)
        except OSError:
            pass
        os.close(entry.fd)

    def end_all(self) -> None:
        for run_id in list(self._entries):
            self.end(run_id)

    def orphans(self) -> Iterator["Orphan"]:
        """The entries whose process is gone (their lock can be taken), each locked by this
        process until :meth:`Orphan.done` or :meth:`Orphan.close`."""
        import fcntl

        if self.folder is None or not self.folder.is_dir():
            return
        for path in sorted(self.folder.iterdir()):
            name = path.name
            if not (name.endswith(_SUFFIX) or name.endswith(".tmp")) or \
                    name[:-len(_SUFFIX)] in self._entries:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                same = os.fstat(fd).st_ino == os.stat(path).st_ino  # not replaced meanwhile
            except OSError:  # held (its run is under way), or gone meanwhile
                os.close(fd)
                continue
            if not same:
                os.close(fd)
                continue
            orphan = Orphan(path, fd)
            if name.endswith(".tmp"):  # its writer died before the entry was in place
                orphan.done()
                continue
            yield orphan


class Orphan:
    """The journal entry of a run whose process is gone, locked by this process."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self.fd = fd

    @property
    def run_id(self) -> str:
        return self.path.name[:-len(_SUFFIX)]

    def body(self) -> dict[str, Any] | None:
        """The entry's content (None: unreadable, a file cut short)."""
        try:
            with open(self.path, "rb") as fh:
                body = json.loads(fh.read())
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) and body.get("format") == FORMAT else None

    def done(self) -> None:
        """The run is recorded (or has nothing to record): its entry goes."""
        try:
            os.unlink(self.path)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# -- what an entry holds --------------------------------------------------------------------


def entry_body(buf: RunBuffer, who: Identity, *, running: tuple[str, str] | None = None,
               finished: tuple[str, str] | None = None) -> dict[str, Any]:
    """The journal entry of the run *buf* holds so far.  *running*: the plugin stage that
    started (name, origin); *finished*: the last that finished."""
    return {
        "format": FORMAT, "at": time.time(),
        "started": attrs.asdict(buf.started), "identity": attrs.asdict(who),
        "stages": {str(k): v for k, v in buf.stages.items()},
        "changes": [attrs.asdict(c) for c in buf.changes],
        "messages": [attrs.asdict(m) for m in buf.messages],
        "checks": [attrs.asdict(v) for v in buf.checks],
        "running": list(running) if running else None,
        "finished": list(finished) if finished else None,
    }


def _event(cls: type, data: Any) -> Any:
    names = {a.name for a in attrs.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def interrupted_outcome(body: dict[str, Any], recovered_at: float
                        ) -> tuple[RunBuffer, Identity, dict[str, Any]]:
    """The run an orphaned entry holds: its buffer, who ran it, and the keywords of
    :func:`enginecfg.store.rows.build_rows` that record it as ``interrupted``."""
    started = dict(body["started"])
    started["stages"] = tuple(started.get("stages") or ())
    if started.get("origins") is not None:
        started["origins"] = tuple(started["origins"])
    buf = RunBuffer(_event(events.RunStarted, started))
    for order, stage in (body.get("stages") or {}).items():
        buf.stages[int(order)] = dict(stage)
    buf.changes = [_event(events.ConfigChanged, c) for c in body.get("changes") or ()]
    buf.messages = [_event(events.WarningIssued, m) for m in body.get("messages") or ()]
    buf.checks = [_event(events.ValidationChecked, v) for v in body.get("checks") or ()]
    who = _event(Identity, body["identity"])
    running, finished = body.get("running"), body.get("finished")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(recovered_at))
    if running:
        where = f"while stage {running[0]!r} ({running[1]}) ran"
        stage = running[0]
        for entry in buf.stages.values():
            if entry.get("stage") == stage and "outcome" not in entry:
                entry.update(outcome="failed", error="the process ended while the stage ran")
    elif finished:
        where = f"after stage {finished[0]!r} ({finished[1]}) finished, before the run did"
        stage = None
    else:
        where = "before the run finished"
        stage = None
    message = (f"the process ended {where} (process {who.pid} on {who.host}: os._exit, a "
               f"signal or a crash); the run never finished, and was recorded from its journal "
               f"when the store was next opened for writing, at {when}")
    error = {"type": "RunInterruptedError", "message": message, "field": None}
    if stage:
        error["stage"] = stage
    s = buf.started
    document = {
        "status": "interrupted", "run_id": s.run_id, "model": s.model,
        "vllm_version": s.vllm_version, "gpu": s.gpu, "engine_args": s.engine_args,
        "source": s.source, "config": None,
        "changes": [{"seq": c.seq, "stage": c.stage, "field": c.field, "old": c.old, "new": c.new,
                     "reason": c.reason, "level": c.level, "via": c.via,
                     "explanation": c.explanation} for c in buf.changes],
        "messages": [{"stage": m.stage, "level": m.level, "message": m.message}
                     for m in buf.messages],
        "error": error, "fingerprint": None,
    }
    finished_at = body.get("at") if isinstance(body.get("at"), (int, float)) else recovered_at
    return buf, who, {"status": "interrupted", "finished_at": float(finished_at),
                      "document": document, "fingerprint": None, "error": error,
                      "failed_stage": stage}
