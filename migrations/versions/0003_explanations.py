"""Change explanations: the rule and the numbers behind each change, in words.

A nullable text column on ``changes``: changes recorded before this revision have none, and
a change whose reason says it all has none either.  Adding a column rewrites no row, so the
append-only triggers stay quiet.

Revision ID: 0003_explanations
Revises: 0002
Create Date: 2026-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_explanations"
down_revision = "0002"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("changes.explanation: the rule and numbers behind every change")


def upgrade() -> None:
    op.add_column("changes", sa.Column("explanation", sa.Text, nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # a native DROP COLUMN keeps the table (and its triggers) instead of copying it
        op.execute("ALTER TABLE changes DROP COLUMN explanation")
    else:
        op.drop_column("changes", "explanation")
