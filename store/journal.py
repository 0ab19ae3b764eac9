"""The journal of runs under way: a run whose process ends before the run does is recorded.

A run is recorded in one transaction when it ends (:mod:`.recorder`).  A process can end
before that without running another line: a plugin's stage calls ``os._exit``, the process
is killed, it crashes.  So while a run that holds a plugin's stage is under way its store
keeps a small file for it, the run's *journal entry*: a first line with what the run began
with (its ``run_started`` event, who runs it), then one line per event of the run as it
comes (a stage started or finished, a change, a message, a check), appended, so each costs
one write whatever the run's length.  The run's own transaction is unchanged; the entry is
removed once the run ended (recorded or not).

Only runs with a plugin's stage are journaled: the built-in stages never end the process, and
a file written and removed per run would cost the store's hot path (a fleet recording every
engine start) about 15% of its speed, measured on synthetic runs.  A run of built-ins alone
whose process is killed leaves nothing behind, as before: no partial record, and none of its
end.

The writing process holds an exclusive ``flock`` on its entry for as long as the run is under
way; the kernel releases it when the process ends, however it ends.  So an entry whose lock
can be taken belongs to a run whose process is gone, and the next store to write the
database records it (:class:`~enginecfg.store.recorder.AuditStore`), in a transaction of its
own, as an ``interrupted`` run: the stages, changes and messages its lines hold (a last line
cut short by the end is left out), and an error saying where the run was when it ended.  A
run the store holds already (its process ended after the commit, before the entry went) is
not recorded twice.

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

__all__ = ["FORMAT", "RunJournal", "Orphan", "journal_dir", "entry_header", "interrupted_outcome"]

FORMAT = "enginecfg-run-journal/1"
_SUFFIX = ".jsonl"


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


def _line(record: dict[str, Any]) -> bytes:
    # ASCII with escapes, one line: a lone surrogate (a file name's byte) survives the trip
    return json.dumps(record, default=str).encode("ascii") + b"\n"


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

    def holds(self, run_id: str) -> bool:
        """Whether the run is journaled by this process."""
        return run_id in self._entries and self._pid == os.getpid()

    def begin(self, run_id: str, header: dict[str, Any]) -> None:
        """Journal a run that began (nothing if the journal cannot be written).  The entry
        appears in its place whole and locked: written under another name, then renamed."""
        import fcntl

        if self._pid != os.getpid():  # a forked child: the parent's entries are the parent's
            self._entries, self._pid = {}, os.getpid()
        if run_id in self._entries or not self._writable():
            return
        tmp = self.folder / f".{run_id}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC,
                         0o600)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # new: nobody else holds it
            os.write(fd, _line({"format": FORMAT, **header}))
            final = self.folder / f"{run_id}{_SUFFIX}"
            os.replace(tmp, final)
        except OSError:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
        self._entries[run_id] = _Entry(fd, final)

    def note(self, run_id: str, kind: str, event: Any) -> None:
        """Append one event of a journaled run (``kind``: the signal's name)."""
        entry = self._entries.get(run_id)
        if entry is None or self._pid != os.getpid():
            return
        try:
            os.write(entry.fd, _line({"kind": kind, "event": attrs.asdict(event)}))
        except OSError:
            pass

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

    @property
    def last_heard(self) -> float | None:
        """When its process last wrote to it (the run ended at this time or after)."""
        try:
            return os.fstat(self.fd).st_mtime
        except OSError:
            return None

    def lines(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """``(header, events)``: the entry's first line (None: unreadable) and the events
        after it, up to the first line that is not whole (cut short as the process ended)."""
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read().split(b"\n")
        except OSError:
            return None, []
        records = []
        for text in raw[:-1]:  # the piece after the last line end is a line cut short
            try:
                record = json.loads(text)
            except ValueError:
                break
            if not isinstance(record, dict):
                break
            records.append(record)
        if not records or records[0].get("format") != FORMAT:
            return None, []
        return records[0], records[1:]

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


def entry_header(started: events.RunStarted, who: Identity) -> dict[str, Any]:
    """The first line of a run's journal entry: how it began, and who runs it."""
    return {"at": time.time(), "started": attrs.asdict(started), "identity": attrs.asdict(who)}


def _event(cls: type, data: Any) -> Any:
    names = {a.name for a in attrs.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def interrupted_outcome(header: dict[str, Any], lines: list[dict[str, Any]], recovered_at: float,
                        last_heard: float | None = None
                        ) -> tuple[RunBuffer, Identity, dict[str, Any]]:
    """The run an orphaned entry holds: its buffer (its events replayed), who ran it, and the
    keywords of :func:`enginecfg.store.rows.build_rows` that record it as ``interrupted``."""
    started = dict(header["started"])
    started["stages"] = tuple(started.get("stages") or ())
    if started.get("origins") is not None:
        started["origins"] = tuple(started["origins"])
    buf = RunBuffer(_event(events.RunStarted, started))
    who = _event(Identity, header["identity"])
    running: tuple[str, str] | None = None
    last: tuple[str, str] | None = None
    heard = last_heard if last_heard is not None else header.get("at")
    for record in lines:
        kind, data = record.get("kind"), record.get("event") or {}
        if kind == "stage_started":
            buf.stages[data["order"]] = {"stage": data["stage"], "origin": data["origin"]}
            running = (data["stage"], data["origin"])
        elif kind == "stage_finished":
            entry = buf.stages.setdefault(data["order"], {"stage": data["stage"],
                                                          "origin": data.get("origin") or "unknown"})
            entry.update(outcome=data["outcome"], duration_s=data["duration_s"],
                         n_changes=data.get("changes", 0), error=data.get("error"))
            running, last = None, (data["stage"], entry["origin"])
        elif kind == "config_changed":
            buf.changes.append(_event(events.ConfigChanged, data))
        elif kind == "warning_issued":
            buf.messages.append(_event(events.WarningIssued, data))
        elif kind == "validation_checked":
            buf.checks.append(_event(events.ValidationChecked, data))
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(recovered_at))
    stage = None
    if running:
        where = f"while stage {running[0]!r} ({running[1]}) ran"
        stage = running[0]
        for entry in buf.stages.values():
            if entry.get("stage") == stage and "outcome" not in entry:
                entry.update(outcome="failed", error="the process ended while the stage ran")
    elif last and buf.started.stages and last[0] == buf.started.stages[-1]:
        where = f"after its last stage, {last[0]!r} ({last[1]}), finished, before it was recorded"
    elif last:
        where = f"after stage {last[0]!r} ({last[1]}) finished, before the next one started"
    else:
        where = "before its first stage started"
    message = (f"the process ended {where} (process {who.pid} on {who.host}: os._exit, a "
               f"signal or a crash); the run never finished, and was recorded from its journal "
               f"when the store was next opened for writing, at {when}")
    error: dict[str, Any] = {"type": "RunInterruptedError", "message": message, "field": None}
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
    finished_at = heard if isinstance(heard, (int, float)) else recovered_at
    return buf, who, {"status": "interrupted", "finished_at": float(finished_at),
                      "document": document, "fingerprint": None, "error": error,
                      "failed_stage": stage}
