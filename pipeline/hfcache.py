"""Snapshots of transformers configs, built once per config content and cached.

Lookup order: this process's memory, then the on-disk cache (``ENGINECFG_CACHE_DIR``, else
the user cache directory), then transformers itself: in this process if transformers is
already imported (the caller paid for it), otherwise in one worker subprocess for a whole
batch of configs.  The key is the config's canonical JSON plus the transformers version and
the snapshot layout version, so a changed file, a new transformers or a new enginecfg never
reads a stale entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from enginecfg.pipeline.canonical import canonical_json
from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.hfsnapshot import SNAPSHOT_VERSION

__all__ = ["snapshot_for", "snapshots_for", "cache_dir", "transformers_version", "clear_memory"]

_memory: dict[str, dict[str, Any]] = {}
_tf_version: str | None = None


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


def cache_dir() -> Path:
    env = os.environ.get("ENGINECFG_CACHE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("enginecfg")) / "hf-snapshots"


def clear_memory() -> None:
    _memory.clear()
    _by_bytes.clear()


def _key(canonical: bytes) -> str:
    h = hashlib.sha256()
    h.update(f"snap-v{SNAPSHOT_VERSION}\0transformers-{transformers_version()}\0".encode())
    h.update(canonical)
    return h.hexdigest()


def _canonical(config_dict: dict[str, Any]) -> bytes:
    return canonical_json(config_dict).encode()


def _disk_get(key: str) -> dict[str, Any] | None:
    try:
        return json.loads((cache_dir() / f"{key}.json").read_bytes())
    except (OSError, ValueError):
        return None


def _disk_put(key: str, snap: dict[str, Any]) -> None:
    """Best effort: a read-only or full cache directory only costs speed."""
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(snap, fh)
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        pass


def _build_in_process(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from enginecfg.pipeline._hfworker import snapshot_item

    return [snapshot_item(item) for item in items]


def _build_in_worker(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    payload = json.dumps({"items": items}, default=str)
    try:
        proc = subprocess.run(
            # -P: never put the working directory on sys.path (a checkout's top-level
            # folders must not shadow installed packages in the worker)
            [sys.executable, "-P", "-m", "enginecfg.pipeline._hfworker"],
            input=payload, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(),
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InvalidInputError(f"could not run the transformers config loader: {exc}",
                                field="transformers") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InvalidInputError(f"the transformers config loader failed: {last}", field="transformers")
    return json.loads(proc.stdout)["results"]


def _in_process() -> bool:
    flag = os.environ.get("ENGINECFG_HF_INPROCESS", "")
    if flag:
        return flag not in ("0", "false", "no")
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
    if missing:
        items = [{"config": d} for d in missing.values()]
        if progress is not None and not _in_process():
            progress(f"reading {len(items)} model config(s) with transformers {transformers_version()} "
                     f"(first time for this content; cached afterwards)")
        built = _build_in_process(items) if _in_process() else _build_in_worker(items)
        for key, snap in zip(missing, built):
            _memory[key] = snap
            _disk_put(key, snap)
    return [_memory[k] for k in keys]


def snapshot_for(config_dict: dict[str, Any]) -> dict[str, Any]:
    return snapshots_for([config_dict])[0]


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
