"""The audit store: records every run published on the signal bus, append-only and
hash-chained, in SQLite (the embedded default) or PostgreSQL.

    from enginecfg.store import AuditStore
    with AuditStore().attach() as store:      # ENGINECFG_DB or the user's audit.db
        Pipeline().run(cfg)
    store.verify().ok

The pipeline never imports this package; the store only subscribes to
:mod:`enginecfg.pipeline.events`.
"""

from enginecfg.store.queries import AmbiguousRunError, UnknownRunError
from enginecfg.store.recorder import AuditStore, WriteFailure
from enginecfg.store.verify import Problem, VerifyResult

__all__ = ["AuditStore", "WriteFailure", "VerifyResult", "Problem", "UnknownRunError",
           "AmbiguousRunError"]
