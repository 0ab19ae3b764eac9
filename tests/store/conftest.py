"""Fixtures of the audit-store tests: every test runs on SQLite and on PostgreSQL.

The PostgreSQL parameter needs ``ENGINECFG_TEST_PG_URL`` (``.ci/postgres.sh`` prints it)
and is skipped only when that variable is unset.  Each PostgreSQL test gets a schema of its
own (through ``search_path``), dropped afterwards.
"""

from __future__ import annotations


import pytest
from sqlalchemy import text

from enginecfg.store import AuditStore


# ``db_url`` (SQLite and PostgreSQL) comes from tests/conftest.py, shared with the fault tests.


@pytest.fixture
def store(db_url):
    """An attached store on a fresh database."""
    s = AuditStore(db_url).attach()
    yield s
    s.close()


def drop_triggers(conn) -> int:
    """Remove every append-only trigger, as an attacker with file or owner access would."""
    if conn.dialect.name == "sqlite":
        names = conn.execute(text(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")).scalars().all()
        for n in names:
            conn.execute(text(f'DROP TRIGGER "{n}"'))
        return len(names)
    rows = conn.execute(text(
        "SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
        "WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace")).all()
    for tg, rel in rows:
        conn.execute(text(f'DROP TRIGGER "{tg}" ON "{rel}"'))
    return len(rows)
