"""Alembic environment of the audit store.

enginecfg runs migrations with a connection it opened itself (passed in
``config.attributes["connection"]``), inside a transaction that already holds the write
lock, so that several processes starting at once on a fresh database upgrade it exactly
once.  Run by hand, the URL comes from ``-x url=...``, ``sqlalchemy.url`` or
``ENGINECFG_DB``.
"""

from __future__ import annotations

import os

from alembic import context

from enginecfg.store.engine import make_engine
from enginecfg.store.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url") or os.environ.get("ENGINECFG_DB")
    if not url:
        raise SystemExit("no database URL: pass -x url=..., set sqlalchemy.url or ENGINECFG_DB")
    return url


def _configure(**kw) -> None:
    context.configure(target_metadata=target_metadata, render_as_batch=True,
                      compare_type=True, **kw)


def run_migrations_offline() -> None:
    _configure(url=_url(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(_url())
    try:
        with engine.connect() as conn:
            _configure(connection=conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
