"""DDL for the append-only triggers, per backend, shared by the revisions.

SQLite: one ``BEFORE UPDATE`` and one ``BEFORE DELETE`` trigger per table that
``RAISE(ABORT, ...)``.  PostgreSQL: one plpgsql function that raises, fired ``BEFORE UPDATE
OR DELETE`` for each row and ``BEFORE TRUNCATE`` for each statement.
"""

from __future__ import annotations

from alembic import op

_PG_FUNCTION = "enginecfg_refuse_change"


def _dialect() -> str:
    return op.get_bind().dialect.name


def create_function() -> None:
    """Create the PostgreSQL function the triggers call (nothing on SQLite)."""
    if _dialect() == "postgresql":
        op.execute(
            f"CREATE OR REPLACE FUNCTION {_PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
            "BEGIN\n"
            "  RAISE EXCEPTION 'enginecfg audit table % is append-only: % refused',"
            " TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';\n"
            "END\n$$"
        )


def drop_function() -> None:
    """Drop the PostgreSQL function, unless ``audit_losses`` (which no downgrade drops)
    still has triggers calling it."""
    if _dialect() == "postgresql":
        import sqlalchemy as sa

        if sa.inspect(op.get_bind()).has_table("audit_losses"):
            return
        op.execute(f"DROP FUNCTION IF EXISTS {_PG_FUNCTION}()")


def create(table: str, *, refuse_update: bool = True) -> None:
    """Make ``table`` refuse DELETE (and UPDATE unless ``refuse_update`` is false)."""
    ops = ("UPDATE", "DELETE") if refuse_update else ("DELETE",)
    if _dialect() == "postgresql":
        op.execute(
            f"CREATE TRIGGER trg_{table}_append_only BEFORE {' OR '.join(ops)} ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {_PG_FUNCTION}()"
        )
        op.execute(
            f"CREATE TRIGGER trg_{table}_no_truncate BEFORE TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {_PG_FUNCTION}()"
        )
        return
    for what in ops:
        op.execute(
            f"CREATE TRIGGER trg_{table}_no_{what.lower()} BEFORE {what} ON {table} "
            f"BEGIN SELECT RAISE(ABORT, 'enginecfg audit table {table} is append-only: "
            f"{what} refused'); END"
        )


def drop(table: str) -> None:
    """Drop the triggers :func:`create` made on ``table``."""
    if _dialect() == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_append_only ON {table}")
        op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_no_truncate ON {table}")
        return
    for what in ("update", "delete"):
        op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_no_{what}")
