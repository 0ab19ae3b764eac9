"""The store's own record: when it was created, and the losses an operator chose.

``chain_head.created_at`` is the time the store was created; a store created before this
revision gets the time its first run was recorded (or this upgrade's, when it held none).
``audit_losses`` records each schema downgrade that dropped or rewrote audit tables of a
store holding runs (allowed only after an export, see ``enginecfg db downgrade``); it is
append-only, and it survives every downgrade, this revision's included: the record of a
loss must not go with the loss.  (A downgrade may have created it below this revision: then
it is kept, and given its triggers here.)

Revision ID: 0008_store_record
Revises: 0007_actor
Create Date: 2026-12-04
"""
from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

from enginecfg.migrations import _triggers

revision = "0008_store_record"
down_revision = "0007_actor"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = "chain_head.created_at: when the store was created"


def upgrade() -> None:
    op.add_column("chain_head", sa.Column("created_at", sa.Double, nullable=True))
    # chain_head refuses DELETE only; its one row is updated on every append anyway
    op.execute(sa.text("UPDATE chain_head SET created_at = COALESCE("
                       "(SELECT MIN(recorded_at) FROM runs), :now) WHERE id = 1")
               .bindparams(now=time.time()))
    if not sa.inspect(op.get_bind()).has_table("audit_losses"):
        op.create_table(
            "audit_losses",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("recorded_at", sa.Double, nullable=False),
            sa.Column("store_id", sa.String(32)),
            sa.Column("head_position", sa.Integer, nullable=False),
            sa.Column("head_hash", sa.String(64), nullable=False),
            sa.Column("runs", sa.Integer, nullable=False),
            sa.Column("from_revision", sa.String(64), nullable=False),
            sa.Column("to_revision", sa.String(64), nullable=False),
            sa.Column("dropped", sa.Text, nullable=False),
            sa.Column("export_path", sa.Text, nullable=False),
            sa.Column("export_sha256", sa.String(64), nullable=False),
            sa.Column("os_user", sa.String(255)),
            sa.Column("actor", sa.String(255)),
            sa.Column("host", sa.String(255)),
        )
    _triggers.create_function()
    _triggers.drop("audit_losses")
    _triggers.create("audit_losses")


def downgrade() -> None:
    # audit_losses and its triggers stay (see the module docstring)
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE chain_head DROP COLUMN created_at")
    else:
        op.drop_column("chain_head", "created_at")
