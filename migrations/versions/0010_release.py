"""The vLLM release whose rules decided each run.

``runs.vllm_version`` names the release a run speaks for (the run document's
``vllm_version``: ``0.19.0``, ``0.34.0``).  NOT NULL, with ``0.19.0`` as the server default:
every run recorded before this revision was decided by vLLM 0.19.0's rules, the only ones
enginecfg had, so the old rows read as 0.19.0 without being rewritten (adding a column with a
constant default writes no row, so the append-only triggers stay quiet).

The GPU the engine starts on needs no new column: ``runs.gpu`` (revision
``0009_impact_memory``) already names the card, since one GPU per run serves both the start-up
step and the KV-cache figures; from hash layout 4 on it is filled from the run document's
``gpu`` also where the run has no figures.  The whole card (device name, memory, compute
capability) is in the run's hashed result document.

Hashed from hash layout 4 on; runs recorded before keep their layout, and their 0.19.0 here is
not part of their hash.

Revision ID: 0010_release
Revises: 0009_impact_memory
Create Date: 2026-12-06
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_release"
down_revision = "0009_impact_memory"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("runs.vllm_version: the vLLM release whose rules decided each run (hashed: "
                   "runs recorded with it no longer verify)")

#: the release of every run recorded before this revision
EARLIER_RELEASE = "0.19.0"


def upgrade() -> None:
    op.add_column("runs", sa.Column("vllm_version", sa.String(64), nullable=False,
                                    server_default=sa.text(f"'{EARLIER_RELEASE}'")))
    op.create_index("ix_runs_vllm_version", "runs", ["vllm_version"])


def downgrade() -> None:
    op.drop_index("ix_runs_vllm_version", table_name="runs")
    if op.get_bind().dialect.name == "sqlite":
        # a native DROP COLUMN keeps the table (and its triggers) instead of copying it
        op.execute("ALTER TABLE runs DROP COLUMN vllm_version")
    else:
        op.drop_column("runs", "vllm_version")
