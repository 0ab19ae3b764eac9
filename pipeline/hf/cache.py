"""Snapshots of transformers configs, built once per config content and cached.

Lookup order: this process's memory, then the on-disk cache (``ENGINECFG_CACHE_DIR``, else
the user cache directory), then transformers itself: in this process if transformers is
already imported (the caller paid for it), otherwise in this process's one long-lived worker
(:mod:`._worker` ``--serve``), which imports transformers once and then answers each batch
of configs in milliseconds.

Why a worker rather than importing transformers here: a run without GPU validation must not
import transformers or torch into the caller (their import costs seconds, their threads and
memory stay), while a worker pays that once per process and is gone when the process is.
Measured side by side in bench/NOTES.md ("cold path").

The worker is started on the first miss, reused, restarted when it has died (the request
it died on is sent once more to the new one), given ``ENGINECFG_HF_TIMEOUT`` seconds per
request (killed when it overruns), and shut down at exit; it exits by itself when this
process dies (see :mod:`._worker`).  A forked child never shares its parent's worker.

The key is the config's canonical JSON plus the transformers version and the snapshot
layout version, a digest of the source of the modules that build snapshots, so a changed
file, a new transformers or a changed snapshot builder never reads a stale entry.  A disk
entry holds its key and a digest of its snapshot and is verified on every read: a
truncated, edited or swapped file is rebuilt, never believed.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import select
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.hf import memo
from enginecfg.pipeline.hf.limits import layer_count_error
from enginecfg.pipeline.jsonvalue import canonical_json, fingerprint

__all__ = ["snapshot_for", "snapshots_for", "snapshot_for_bytes", "snapshot_of_object", "missing",
           "start_worker", "remember_bytes", "cache_dir", "transformers_version", "clear", "on_clear",
           "layout_version", "worker_pid", "worker_request", "shutdown_worker", "progress", "TIMEOUT_ENV"]

TIMEOUT_ENV = "ENGINECFG_HF_TIMEOUT"
_DEFAULT_TIMEOUT_S = 300.0

_memory: dict[str, dict[str, Any]] = {}
_tf_version: str | None = None
_layout: str | None = None


def transformers_version() -> str:
    global _tf_version
    if _tf_version is None:
        mod = sys.modules.get("transformers")
        if mod is not None and getattr(mod, "__version__", None):
            _tf_version = mod.__version__
        else:
            from importlib.metadata import PackageNotFoundError, version

            try:
                _tf_version = version("transformers")
            except PackageNotFoundError:
                raise InvalidInputError(
                    "transformers is not installed: enginecfg needs it (>=5.5,<6) to read model configs",
                    field="transformers",
                ) from None
    return _tf_version


def layout_version() -> str:
    """A digest of the code that builds snapshots: it changes exactly when that code does."""
    global _layout
    if _layout is None:
        from enginecfg.pipeline.hf import _classes, _worker, snapshot, vllm_classes

        h = hashlib.sha256()
        for mod in (snapshot, _worker, _classes, vllm_classes):
            h.update(mod.__name__.encode() + b"\0")
            h.update(Path(mod.__file__).read_bytes())
        _layout = h.hexdigest()[:16]
    return _layout


def cache_dir() -> Path:
    env = os.environ.get("ENGINECFG_CACHE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("enginecfg")) / "hf-snapshots"


#: what else holds snapshots in memory above this room (the loaded-config memo), emptied
#: with this cache
_dependents: list[Callable[[], None]] = []


def on_clear(forget: Callable[[], None]) -> None:
    """Call *forget* whenever :func:`clear` runs (a cache that holds snapshots registers)."""
    _dependents.append(forget)


def clear(*, disk: bool = False) -> None:
    """Forget everything loading holds in this process's memory: every snapshot, every
    memoised figure (:mod:`.memo`), every loaded-config template (registered with
    :func:`on_clear`) and the snapshot builder's code digest.  With *disk*, the disk cache's
    entries are removed as well (the next load of each config builds its snapshot afresh)."""
    global _layout
    _memory.clear()
    _by_bytes.clear()
    _layout = None
    memo.clear_all()
    for forget in _dependents:
        forget()
    if disk:
        for entry in cache_dir().glob("*.json"):
            try:
                entry.unlink()
            except OSError:  # gone already, or not ours to remove: only speed is at stake
                pass


def _key(canonical: bytes) -> str:
    h = hashlib.sha256()
    h.update(f"snap-{layout_version()}\0transformers-{transformers_version()}\0".encode())
    h.update(canonical)
    return h.hexdigest()


def _canonical(config_dict: dict[str, Any]) -> bytes:
    return canonical_json(config_dict).encode()


def _disk_get(key: str) -> dict[str, Any] | None:
    """The entry for *key*, or None when absent or not provably the entry for *key*."""
    try:
        entry = json.loads((cache_dir() / f"{key}.json").read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None  # an old layout, a file copied over from another key
    snap = entry.get("snapshot")
    if not isinstance(snap, dict) or entry.get("sha256") != fingerprint(snap):
        return None  # edited or damaged
    return snap


def _disk_put(key: str, snap: dict[str, Any]) -> None:
    """Best effort: a read-only or full cache directory only costs speed."""
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        try:
            body = canonical_json(snap)  # encoded once: written, and digested
            digest = hashlib.sha256(body.encode()).hexdigest()
            with os.fdopen(fd, "w") as fh:
                fh.write(f'{{"key":"{key}","sha256":"{digest}","snapshot":{body}}}')
            os.replace(tmp, d / f"{key}.json")
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass


def _build_in_process(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from enginecfg.pipeline.hf._worker import snapshot_item

    return [snapshot_item(item) for item in items]


class _WorkerGone(Exception):
    """The worker died or closed its end before answering."""


#: how the worker starts: it loads the very enginecfg package this process runs (its
#: ``__init__.py`` is argv[1]), whatever ``sys.path`` would find first in a fresh interpreter
_BOOT = (
    "import importlib.util, os, sys\n"
    "init = sys.argv[1]\n"
    "spec = importlib.util.spec_from_file_location('enginecfg', init, "
    "submodule_search_locations=[os.path.dirname(init)])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules['enginecfg'] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "from enginecfg.pipeline.hf._worker import main\n"
    "sys.exit(main())\n"
)


def _worker_command(*args: str) -> list[str]:
    # the package this process runs (imported first, whatever enginecfg module was asked for);
    # -P: never put the working directory on sys.path (a checkout's top-level folders must
    # not shadow installed packages in the worker)
    package = sys.modules["enginecfg"]
    return [sys.executable, "-P", "-c", _BOOT, os.path.abspath(package.__file__), *args]


class _Worker:
    """This process's long-lived transformers worker (see the module docstring)."""

    def __init__(self) -> None:
        self.proc: "subprocess.Popen | None" = None
        self.owner = 0
        self.lock = threading.Lock()
        self.next_id = 0
        self.buffer = b""
        self.stderr = None

    # -- life cycle ------------------------------------------------------------------------
    def _start(self) -> None:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
        env["ENGINECFG_HF_PARENT"] = str(os.getpid())
        import subprocess  # here: a process that never starts a worker does not import it

        self.stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                _worker_command("--serve"),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
                cwd=tempfile.gettempdir(), close_fds=True,
            )
        except OSError as exc:
            raise InvalidInputError(f"could not run the transformers config loader: {exc}",
                                    field="transformers") from None
        self.owner = os.getpid()
        self.buffer = b""

    def alive(self) -> bool:
        return self.proc is not None and self.owner == os.getpid() and self.proc.poll() is None

    def ensure(self) -> None:
        if self.proc is not None and self.owner != os.getpid():
            self.proc = None  # a forked child: the pipes are the parent's
        if not self.alive():
            self.stop()
            self._start()

    def stop(self, grace_s: float = 0.2) -> None:
        """Close its stdin (it exits at once when idle); kill it if it is still busy (say,
        importing transformers) after *grace_s*: it holds nothing worth waiting for."""
        proc, self.proc = self.proc, None
        if proc is None or self.owner != os.getpid():
            return
        try:
            proc.stdin.close()  # the worker's signal to exit
        except OSError:
            pass
        if grace_s > 0:
            import subprocess  # imported already: the worker was started with it

            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdout,):
            try:
                f.close()
            except OSError:
                pass

    def kill(self) -> None:
        if self.proc is not None and self.owner == os.getpid():
            self.proc.kill()
            self.proc.wait()
        self.stop()

    def stderr_tail(self) -> str:
        try:
            self.stderr.seek(0)
            lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        except (OSError, AttributeError):
            return "no output"
        return lines[-1] if lines else "no output"

    # -- one request -----------------------------------------------------------------------
    def _readline(self, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise _WorkerGone
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def _exchange(self, request: dict[str, Any], deadline: float) -> dict[str, Any]:
        self.next_id += 1
        request = dict(request, id=self.next_id)
        try:
            self.proc.stdin.write(json.dumps(request, default=str).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _WorkerGone from None
        while True:
            answer = json.loads(self._readline(deadline))
            if answer.get("id") == request["id"]:
                return answer

    def request(self, request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        timeout = _timeout() if timeout_s is None else timeout_s
        with self.lock:
            for attempt in (1, 2):
                self.ensure()
                deadline = time.monotonic() + timeout
                try:
                    answer = self._exchange(request, deadline)
                except TimeoutError:
                    self.kill()
                    raise InvalidInputError(
                        f"the transformers config loader gave no answer within {timeout:g} s "
                        f"({TIMEOUT_ENV} sets the limit)", field="transformers") from None
                except _WorkerGone:
                    tail = self.stderr_tail()
                    self.kill()
                    if attempt == 2:
                        raise InvalidInputError(f"the transformers config loader failed: {tail}",
                                                field="transformers") from None
                    continue  # died (killed, crashed): once more on a fresh worker
                if "fail" in answer:
                    raise InvalidInputError(f"the transformers config loader failed: {answer['fail']}",
                                            field="transformers")
                return answer
        raise AssertionError("unreachable")


def _timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else _DEFAULT_TIMEOUT_S
    except ValueError:
        raise InvalidInputError.for_value(TIMEOUT_ENV, raw, "a number of seconds > 0") from None
    if not value > 0:
        raise InvalidInputError.for_value(TIMEOUT_ENV, raw, "a number of seconds > 0")
    return value


_worker = _Worker()


def worker_pid() -> int | None:
    """The pid of this process's worker while it runs (None before the first miss)."""
    return _worker.proc.pid if _worker.alive() else None


def worker_request(request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
    """Send one request to the worker (starting it if needed) and return its answer."""
    return _worker.request(request, timeout_s)


def shutdown_worker() -> None:
    """Stop the worker now (a later miss starts a new one)."""
    with _worker.lock:
        _worker.stop()


def _end_worker_at_exit() -> None:
    """At exit the worker is killed, not asked to finish: it holds nothing (the snapshots
    it built are in the caller's caches already), and its own interpreter shutdown, with
    transformers loaded, would add a tenth of a second to every command that started it."""
    with _worker.lock:
        _worker.stop(grace_s=0)


atexit.register(_end_worker_at_exit)


def _build_in_worker(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _worker.request({"op": "snapshots", "items": items})["results"]


def _in_process() -> bool:
    """Build in this process exactly when transformers is imported here already."""
    return "transformers" in sys.modules


#: called with one line of text before a slow step (building snapshots in a transformers
#: worker); the CLI sets it to show progress on stderr, the library leaves it None
progress: Callable[[str], None] | None = None


def snapshots_for(config_dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Snapshots for many configs, building the missing ones in one batch."""
    keys = [_key(_canonical(d)) for d in config_dicts]
    out: list[dict[str, Any] | None] = []
    missing: dict[str, dict[str, Any]] = {}
    for key, d in zip(keys, config_dicts):
        snap = _memory.get(key)
        if snap is None:
            snap = _disk_get(key)
            if snap is not None:
                _memory[key] = snap
        if snap is None:
            missing.setdefault(key, d)
        out.append(snap)
    refused: dict[str, dict[str, Any]] = {}
    for key, d in list(missing.items()):  # never handed to transformers, never cached
        bad = layer_count_error(d)
        if bad is not None:
            refused[key] = {"error": {"type": "InvalidInputError", "message": bad[1],
                                      "field": bad[0]}}
            del missing[key]
    if missing:
        items = [{"config": d} for d in missing.values()]
        if progress is not None and not _in_process():
            progress(f"reading {len(items)} model config(s) with transformers {transformers_version()} "
                     f"(first time for this content; cached afterwards)")
        built = _build_in_process(items) if _in_process() else _build_in_worker(items)
        for key, snap in zip(missing, built):
            _memory[key] = snap
            _disk_put(key, snap)
    return [refused[k] if k in refused else _memory[k] for k in keys]


def missing(config_dicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The configs among *config_dicts* whose snapshot is neither in memory nor on disk."""
    out = []
    for d in config_dicts:
        key = _key(_canonical(d))
        if key in _memory:
            continue
        snap = _disk_get(key)
        if snap is None:
            out.append(d)
        else:
            _memory[key] = snap
    return out


def start_worker() -> None:
    """Start the worker now without waiting for it (its transformers import overlaps whatever
    the caller does next); a no-op when it runs already or snapshots are built in process."""
    if _in_process():
        return
    with _worker.lock:
        _worker.ensure()


def remember_bytes(raw: bytes, snap: dict[str, Any]) -> None:
    """Make *snap* the answer for a config file holding exactly *raw*."""
    if len(_by_bytes) > 4096:
        _by_bytes.clear()
    _by_bytes[hashlib.blake2b(raw, digest_size=20).digest()] = snap


def snapshot_for(config_dict: dict[str, Any]) -> dict[str, Any]:
    return snapshots_for([config_dict])[0]


def snapshot_of_object(config: Any) -> dict[str, Any]:
    """The snapshot of a transformers config object the caller built, as the worker records
    one (with the model type's default architecture, None where transformers names none)."""
    from enginecfg.pipeline.hf._worker import default_architecture
    from enginecfg.pipeline.hf.snapshot import snapshot_of

    snap = snapshot_of(config)
    bad = layer_count_error(snap)
    if bad is not None:  # built already, but enginecfg's per-layer work would not end
        return {"error": {"type": "InvalidInputError", "message": bad[1], "field": bad[0]}}
    try:
        snap["default_architecture"] = default_architecture(snap.get("model_type"))
    except Exception:  # transformers' own tables could not be read: no default to offer
        snap["default_architecture"] = None
    return snap


_by_bytes: dict[bytes, dict[str, Any]] = {}


def snapshot_for_bytes(raw: bytes, parse) -> dict[str, Any]:
    """The snapshot of a config file's exact bytes; ``parse()`` gives its dict on a miss.

    Identical bytes are identical configs, so a warm lookup skips JSON parsing and the
    canonical encoding altogether (the key is a digest of the bytes).
    """
    digest = hashlib.blake2b(raw, digest_size=20).digest()
    snap = _by_bytes.get(digest)
    if snap is None:
        snap = snapshot_for(parse())
        if len(_by_bytes) > 4096:
            _by_bytes.clear()
        _by_bytes[digest] = snap
    return snap
