"""The KV-cache impact of a run in columns: KV tokens, maximum concurrency, largest context.

The full ``impact`` record is part of the run document (``runs.result``, covered by the
row hash); these columns are its headline figures, so that runs can be filtered and ordered
by capacity without parsing every document.  Runs written before this revision have none.

Revision ID: 0003_impact
Revises: 0003_sources
Create Date: 2025-12-03
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_impact"
down_revision = "0003_sources"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("runs.kv_tokens, max_concurrency and max_model_len_fits: an upgrade does "
                   "not refill them, so runs recorded with KV figures no longer verify")

_COLUMNS = (
    ("kv_tokens", sa.BigInteger),
    ("max_concurrency", sa.Double),
    ("max_model_len_fits", sa.BigInteger),
)


def upgrade() -> None:
    # Adding nullable columns rewrites no row, so the append-only triggers stay quiet.
    for name, kind in _COLUMNS:
        op.add_column("runs", sa.Column(name, kind, nullable=True))
    op.create_index("ix_runs_max_concurrency", "runs", ["max_concurrency"])


def downgrade() -> None:
    op.drop_index("ix_runs_max_concurrency", table_name="runs")
    for name, _kind in reversed(_COLUMNS):
        if op.get_bind().dialect.name == "sqlite":
            # a native DROP COLUMN keeps the table (and its triggers) instead of copying it
            op.execute(f"ALTER TABLE runs DROP COLUMN {name}")
        else:
            op.drop_column("runs", name)
