"""The hash layout of every run, and the database's identity for checkpoints.

``runs.hash_layout`` names the field lists a run (and its child rows) was hashed with, so
that a later revision can add a hashed column without breaking the verification of runs
recorded before it; every run recorded before this revision used layout 1.
``chain_head.store_id`` is a random identity drawn here, which signed checkpoints name.

Revision ID: 0006_hash_layout
Revises: 0003_impact
Create Date: 2025-12-03
"""
from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0006_hash_layout"
down_revision = "0003_impact"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("runs.hash_layout and chain_head.store_id: the store's identity (its checkpoints no longer match) and the hash layout of every run (runs hashed with a later layout no longer verify)")


def upgrade() -> None:
    # Adding a column rewrites no row, so the append-only triggers stay quiet.
    op.add_column("runs", sa.Column("hash_layout", sa.Integer, nullable=False,
                                    server_default=sa.text("1")))
    op.add_column("chain_head", sa.Column("store_id", sa.String(32)))
    # chain_head refuses DELETE only; its one row is updated on every append anyway
    op.execute(sa.text("UPDATE chain_head SET store_id = :sid WHERE id = 1")
               .bindparams(sid=uuid.uuid4().hex))


def downgrade() -> None:
    # Runs recorded with a layout above 1 would no longer verify below this revision; the
    # layouts of this revision itself are all 1.
    if op.get_bind().dialect.name == "sqlite":
        # native DROP COLUMN keeps the tables (and their triggers) instead of copying them
        op.execute("ALTER TABLE runs DROP COLUMN hash_layout")
        op.execute("ALTER TABLE chain_head DROP COLUMN store_id")
    else:
        op.drop_column("runs", "hash_layout")
        op.drop_column("chain_head", "store_id")
