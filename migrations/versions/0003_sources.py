"""Where each run's model came from: repo id and resolved commit, or folder, and the sha256
of every file read (``runs.source``, JSON).

Revision ID: 0003_sources
Revises: 0003_explanations
Create Date: 2025-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from enginecfg.store.models import JSONValue

revision = "0003_sources"
down_revision = "0003_explanations"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("runs.source: where each model came from and its files' sha256 (hashed: runs recorded with a source no longer verify)")


def upgrade() -> None:
    # Adding a nullable column rewrites no row, so the append-only triggers stay quiet; runs
    # written before this revision keep NULL, and their hashes do not cover the column.
    op.add_column("runs", sa.Column("source", JSONValue, nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # a native DROP COLUMN keeps the table (and its triggers) instead of copying it
        op.execute("ALTER TABLE runs DROP COLUMN source")
    else:
        op.drop_column("runs", "source")
