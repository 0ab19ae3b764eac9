"""Who ran each run: the operating-system user and the actor named explicitly.

``runs.os_user`` is the user of the recording process; ``runs.actor`` the name given with
``--actor`` or ``ENGINECFG_ACTOR`` (a service account, a CI job), NULL when none was given.
Both are hashed from hash layout 2 on; runs recorded before this revision keep layout 1 and
NULL here.  Adding nullable columns rewrites no row, so the append-only triggers stay quiet.

Revision ID: 0007_actor
Revises: 0006_hash_layout
Create Date: 2026-12-04
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_actor"
down_revision = "0006_hash_layout"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("runs.os_user and runs.actor: who ran each run (hashed: runs recorded "
                   "with them no longer verify)")

_COLUMNS = ("os_user", "actor")


def upgrade() -> None:
    for name in _COLUMNS:
        op.add_column("runs", sa.Column(name, sa.String(255), nullable=True))
        op.create_index(f"ix_runs_{name}", "runs", [name])


def downgrade() -> None:
    for name in reversed(_COLUMNS):
        op.drop_index(f"ix_runs_{name}", table_name="runs")
        if op.get_bind().dialect.name == "sqlite":
            # a native DROP COLUMN keeps the table (and its triggers) instead of copying it
            op.execute(f"ALTER TABLE runs DROP COLUMN {name}")
        else:
            op.drop_column("runs", name)
