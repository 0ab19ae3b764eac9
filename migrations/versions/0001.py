"""Initial audit tables: runs, stage executions, changes, messages, the chain head.

Revision ID: 0001
Revises:
Create Date: 2025-12-02
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from enginecfg.migrations import _triggers
from enginecfg.store.models import JSONValue

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("every audit table: runs, stage executions, changes, messages and the chain head (the store's identity with it)")

_TABLES = ("runs", "stage_executions", "changes", "messages")


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("chain_pos", sa.Integer, nullable=False, unique=True),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double, nullable=False),
        sa.Column("recorded_at", sa.Double, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("enginecfg_version", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("architecture", sa.String(255)),
        sa.Column("engine_args", JSONValue, nullable=False),
        sa.Column("planned_stages", JSONValue, nullable=False),
        sa.Column("input_config", JSONValue, nullable=False),
        sa.Column("input_fingerprint", sa.String(128), nullable=False),
        sa.Column("result", JSONValue),
        sa.Column("result_fingerprint", sa.String(128)),
        sa.Column("error", JSONValue),
        sa.Column("failed_stage", sa.String(255)),
        sa.Column("n_stages", sa.Integer, nullable=False),
        sa.Column("n_changes", sa.Integer, nullable=False),
        sa.Column("n_messages", sa.Integer, nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("row_hash", sa.String(64), nullable=False, unique=True),
    )
    op.create_table(
        "stage_executions",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("stage_order", sa.Integer, primary_key=True),
        sa.Column("stage", sa.String(255), nullable=False),
        sa.Column("origin", sa.String(255), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("duration_s", sa.Double),
        sa.Column("n_changes", sa.Integer, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("row_hash", sa.String(64), nullable=False),
    )
    op.create_table(
        "changes",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("stage", sa.String(255), nullable=False),
        sa.Column("field", sa.String(255), nullable=False),
        sa.Column("old", JSONValue),
        sa.Column("new", JSONValue),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("via", sa.String(16), nullable=False),
        sa.Column("row_hash", sa.String(64), nullable=False),
    )
    op.create_table(
        "messages",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("stage", sa.String(255), nullable=False),
        sa.Column("level", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("row_hash", sa.String(64), nullable=False),
    )
    chain_head = op.create_table(
        "chain_head",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("head_hash", sa.String(64), nullable=False),
    )
    op.bulk_insert(chain_head, [{"id": 1, "position": 0, "head_hash": "0" * 64}])

    _triggers.create_function()
    for table in _TABLES:
        _triggers.create(table)
    _triggers.create("chain_head", refuse_update=False)


def downgrade() -> None:
    for table in (*_TABLES, "chain_head"):
        _triggers.drop(table)
    _triggers.drop_function()
    for table in ("chain_head", "messages", "changes", "stage_executions", "runs"):
        op.drop_table(table)
