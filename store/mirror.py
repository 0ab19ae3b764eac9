"""The mirror: a signed checkpoint of the chain head written elsewhere every N runs.

Configured by ``ENGINECFG_AUDIT_MIRROR`` (a file, to which one JSON line is appended per
checkpoint, or a database URL, whose ``audit_checkpoints`` table receives them),
``ENGINECFG_AUDIT_MIRROR_EVERY`` (default 100) and ``ENGINECFG_AUDIT_KEY``.  The recorder
calls :meth:`Mirror.after_write` after each run it committed; a failure there is the
recorder's to log, never the run's.  ``audit verify`` reads the mirror back with
:func:`enginecfg.store.checkpoint.read_checkpoints`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.store.checkpoint import (
    DEFAULT_MIRROR_EVERY,
    MIRROR_ENV,
    MIRROR_EVERY_ENV,
    AuditKey,
    load_key,
    make_checkpoint,
    mirror_table,
)

__all__ = ["Mirror", "mirror_every"]


def mirror_every(env: Mapping[str, str] | None = None) -> int:
    """``ENGINECFG_AUDIT_MIRROR_EVERY``: every how many runs the mirror gets a checkpoint."""
    env = os.environ if env is None else env
    raw_every = env.get(MIRROR_EVERY_ENV, str(DEFAULT_MIRROR_EVERY))
    try:
        every = int(raw_every)
    except ValueError:
        every = 0
    if every < 1:
        raise InvalidInputError.for_value(MIRROR_EVERY_ENV, raw_every, "a positive integer")
    return every


class Mirror:
    """Writes a checkpoint to a second location every ``every`` runs.

    ``target``: a file path (one JSON line appended per checkpoint, fsynced) or a database
    URL (a row in its ``audit_checkpoints`` table, created when missing).  Built from the
    environment by :meth:`from_env`.
    """

    def __init__(self, target: str, key: AuditKey, every: int = DEFAULT_MIRROR_EVERY):
        if every < 1:
            raise InvalidInputError.for_value(MIRROR_EVERY_ENV, every, "a positive integer")
        self.target, self.key, self.every = target, key, every
        self._engine = None
        self._table = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Mirror | None":
        env = os.environ if env is None else env
        target = env.get(MIRROR_ENV)
        if not target:
            return None
        return cls(target, load_key(env=env), mirror_every(env))

    def due(self, position: int) -> bool:
        return position % self.every == 0

    def after_write(self, store, position: int) -> dict[str, Any] | None:
        """Write a checkpoint when ``position`` is a multiple of ``every``; returns it."""
        if not self.due(position):
            return None
        doc = make_checkpoint(store, self.key, verify_first=False)
        self.write(doc)
        return doc

    def write(self, doc: Mapping[str, Any]) -> None:
        line = json.dumps(doc, sort_keys=True)
        if "://" not in self.target:
            fd = os.open(self.target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            return
        from sqlalchemy import MetaData, insert

        from enginecfg.store.engine import make_engine

        if self._engine is None:
            self._engine = make_engine(self.target)
            meta = MetaData()
            self._table = mirror_table(meta)
            meta.create_all(self._engine)
        with self._engine.begin() as conn:
            conn.execute(insert(self._table).values(
                store_id=doc["store_id"], position=doc["position"],
                created_at=doc["created_at"], document=line))

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
