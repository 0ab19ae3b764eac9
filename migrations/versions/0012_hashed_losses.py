"""Each recorded loss of history is hashed and chained, as the runs are.

``audit_losses`` (revision ``0008_store_record``) was append-only by its triggers but outside
every hash: a loss rewritten or deleted with the triggers dropped left ``audit verify``
satisfied.  From this revision on each row carries ``row_hash`` (sha256 of its fields, see
:func:`enginecfg.store.hashing.loss_hash`) and ``prev_hash`` (the hash of the loss recorded
before it, GENESIS for the first), and ``chain_head.losses_head`` names the last one's hash:
``audit verify`` recomputes each, follows the chain in ``id`` order and compares its end with
the head, so an edited, deleted, inserted or reordered loss is reported.

The upgrade hashes the losses recorded before it (their triggers dropped for that UPDATE and
made again): what it cannot tell is whether one of them was altered before it ran.  A row
that already holds a hash (recorded by a downgrade below ``0008_store_record`` that made the
table) keeps it, and the chain goes on from it.

Revision ID: 0012_hashed_losses
Revises: 0011_hashed_explanations
Create Date: 2026-12-09
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from enginecfg.migrations import _triggers
from enginecfg.store.hashing import LOSS_FIELDS, loss_hash

revision = "0012_hashed_losses"
down_revision = "0011_hashed_explanations"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("audit_losses.prev_hash, audit_losses.row_hash and chain_head.losses_head: "
                   "the hash chain over the recorded losses (an edited or deleted loss is no "
                   "longer found until the upgrade hashes them again)")

_GENESIS = "0" * 64


def upgrade() -> None:
    bind = op.get_bind()
    have = {c["name"] for c in sa.inspect(bind).get_columns("audit_losses")}
    for name in ("prev_hash", "row_hash"):
        if name not in have:
            op.add_column("audit_losses", sa.Column(name, sa.String(64), nullable=True))
    op.add_column("chain_head", sa.Column("losses_head", sa.String(64), nullable=False,
                                          server_default=sa.text(f"'{_GENESIS}'")))
    losses = sa.table("audit_losses", sa.column("row_hash"),
                      *[sa.column(name) for name in LOSS_FIELDS])
    prev, pending = _GENESIS, []
    for row in bind.execute(sa.select(losses).order_by(losses.c.id)).mappings().all():
        if row["row_hash"] is None:
            own = loss_hash({**row, "prev_hash": prev})
            pending.append({"key": row["id"], "prev": prev, "own": own})
            prev = own
        else:
            prev = row["row_hash"]
    if pending:
        _triggers.create_function()
        _triggers.drop("audit_losses")
        bind.execute(sa.update(losses).where(losses.c.id == sa.bindparam("key"))
                     .values(prev_hash=sa.bindparam("prev"), row_hash=sa.bindparam("own")),
                     pending)
        _triggers.create("audit_losses")
    # chain_head refuses DELETE only; its one row is updated on every append anyway
    bind.execute(sa.text("UPDATE chain_head SET losses_head = :head WHERE id = 1")
                 .bindparams(head=prev))


def downgrade() -> None:
    # the losses themselves stay (see 0008_store_record): only their hashes go
    if op.get_bind().dialect.name == "sqlite":
        # a native DROP COLUMN keeps the table (and its triggers) instead of copying it
        op.execute("ALTER TABLE audit_losses DROP COLUMN row_hash")
        op.execute("ALTER TABLE audit_losses DROP COLUMN prev_hash")
        op.execute("ALTER TABLE chain_head DROP COLUMN losses_head")
    else:
        op.drop_column("audit_losses", "row_hash")
        op.drop_column("audit_losses", "prev_hash")
        op.drop_column("chain_head", "losses_head")
