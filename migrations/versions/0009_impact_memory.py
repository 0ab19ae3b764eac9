"""What each run's KV-cache figures assumed, and whether vLLM would start, in columns.

``runs.gpu`` (the GPU preset, or a card given by its memory), ``gpu_memory_bytes``,
``gpu_memory_utilization``, ``kv_cache_memory`` (the bytes the figures gave the KV cache),
``kv_cache_memory_bytes`` and ``num_gpu_blocks_override`` (vLLM's flags as given, NULL when
not) and ``starts`` (whether vLLM 0.19.0 would get through its start-up checks): projections
of ``runs.result["impact"]``, so that runs can be filtered by the GPU and the memory they
assumed, and those that would not start found.  Hashed from hash layout 3 on; runs recorded
before this revision keep their layout and NULL here.  Adding nullable columns rewrites no
row, so the append-only triggers stay quiet.

Revision ID: 0009_impact_memory
Revises: 0008_store_record
Create Date: 2026-12-05
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_impact_memory"
down_revision = "0008_store_record"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("runs.gpu, gpu_memory_bytes, gpu_memory_utilization, kv_cache_memory, "
                   "kv_cache_memory_bytes, num_gpu_blocks_override and starts: what each run's "
                   "KV-cache figures assumed (hashed: runs recorded with them no longer verify)")

_COLUMNS = (
    ("gpu", sa.String(64)),
    ("gpu_memory_bytes", sa.BigInteger),
    ("gpu_memory_utilization", sa.Double),
    ("kv_cache_memory", sa.BigInteger),
    ("kv_cache_memory_bytes", sa.BigInteger),
    ("num_gpu_blocks_override", sa.BigInteger),
    ("starts", sa.Boolean),
)
_INDEXES = ("gpu", "starts")


def upgrade() -> None:
    for name, kind in _COLUMNS:
        op.add_column("runs", sa.Column(name, kind, nullable=True))
    for name in _INDEXES:
        op.create_index(f"ix_runs_{name}", "runs", [name])


def downgrade() -> None:
    for name in reversed(_INDEXES):
        op.drop_index(f"ix_runs_{name}", table_name="runs")
    for name, _kind in reversed(_COLUMNS):
        if op.get_bind().dialect.name == "sqlite":
            # a native DROP COLUMN keeps the table (and its triggers) instead of copying it
            op.execute(f"ALTER TABLE runs DROP COLUMN {name}")
        else:
            op.drop_column("runs", name)
