"""The audit store: records every run published on the signal bus, append-only and
hash-chained, in SQLite (the embedded default) or PostgreSQL.

    from enginecfg.store import AuditStore
    with AuditStore().attach() as store:      # ENGINECFG_DB or the user's audit.db
        Pipeline().run(cfg)
    store.verify().ok

The pipeline never imports this package; the store only subscribes to
:mod:`enginecfg.pipeline.events`.

Its parts: ``recorder`` (the subscriber, :class:`AuditStore`), ``rows`` (row building),
``journal`` (the runs under way, recorded should their process end first), ``dialects``
(the SQL of SQLite and PostgreSQL), ``connection`` (the kept connection, locks, retries),
``mirror`` (checkpoints written elsewhere), ``queries`` and ``verify`` (reading),
``checkpoint`` (signed checkpoints), ``files`` (keys, checkpoints and exports read within a
bound), ``downgrade`` (schema downgrades that refuse to lose history), ``engine`` (URLs,
engines, lock timeouts, migrations), ``models`` and ``hashing``.
"""

if __name__ == "store":  # imported by its bare name from a checkout root on sys.path
    from enginecfg._layout import hand_over_bare_import

    hand_over_bare_import(__name__, __file__)

import importlib

# Lazy: the CLI imports ``enginecfg.cli.audit`` on every start, and SQLAlchemy and
# Alembic are only worth importing when a command (or a run) actually touches the database.
_EXPORTS = {
    "AuditStore": "enginecfg.store.recorder",
    "WriteFailure": "enginecfg.store.recorder",
    "VerifyResult": "enginecfg.store.verify",
    "Problem": "enginecfg.store.verify",
    "UnknownRunError": "enginecfg.store.queries",
    "AmbiguousRunError": "enginecfg.store.queries",
    "HistoryLossError": "enginecfg.store.downgrade",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'enginecfg.store' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["AuditStore", "WriteFailure", "VerifyResult", "Problem", "UnknownRunError",
           "AmbiguousRunError", "HistoryLossError"]
