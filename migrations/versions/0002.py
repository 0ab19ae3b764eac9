"""GPU validation checks, the runs' check count, and the indices the queries filter on.

Revision ID: 0002
Revises: 0001
Create Date: 2025-12-02
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from enginecfg.migrations import _triggers
from enginecfg.store.models import JSONValue

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("the validation_checks table and runs.n_checks: every GPU validation check; runs recorded with checks no longer verify")

_INDICES = (
    ("ix_runs_model", "runs", ["model"]),
    ("ix_runs_architecture", "runs", ["architecture"]),
    ("ix_runs_status", "runs", ["status"]),
    ("ix_runs_started_at", "runs", ["started_at"]),
    ("ix_changes_field", "changes", ["field", "run_id"]),
)


def upgrade() -> None:
    # Adding a column rewrites no row, so the append-only triggers stay quiet; runs written
    # before this revision had no checks, hence the default.
    op.add_column("runs", sa.Column("n_checks", sa.Integer, nullable=False,
                                    server_default=sa.text("0")))
    op.create_table(
        "validation_checks",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("check", sa.String(255), nullable=False),
        sa.Column("kernel", sa.String(255), nullable=False),
        sa.Column("shapes", JSONValue, nullable=False),
        sa.Column("dtype", sa.String(64), nullable=False),
        sa.Column("max_error", sa.Double),
        sa.Column("tolerance", sa.Double),
        sa.Column("passed", sa.Boolean, nullable=False),
        sa.Column("device", sa.String(255), nullable=False),
        sa.Column("seconds", sa.Double, nullable=False),
        sa.Column("detail", sa.Text),
        sa.Column("row_hash", sa.String(64), nullable=False),
    )
    _triggers.create("validation_checks")
    for name, table, cols in _INDICES:
        op.create_index(name, table, cols)


def downgrade() -> None:
    for name, table, _cols in reversed(_INDICES):
        op.drop_index(name, table_name=table)
    _triggers.drop("validation_checks")
    op.drop_table("validation_checks")
    if op.get_bind().dialect.name == "sqlite":
        # a native DROP COLUMN keeps the table (and its triggers) instead of copying it
        op.execute("ALTER TABLE runs DROP COLUMN n_checks")
    else:
        op.drop_column("runs", "n_checks")
