"""Every column a command shows is hashed: the explanation of each change, too.

``changes.explanation`` (revision ``0003_explanations``: the rule and the numbers behind a
new value, which ``why``, ``show`` and the page print) was stored beside the hashed fields
but outside them, so an explanation rewritten with the triggers dropped still verified.
From hash layout 5 on it is part of each change's hash, and the run's ``hash_layout`` part of
the run's (:mod:`enginecfg.store.hashing`).

The schema itself does not change: no column is added or rewritten, so no row is touched and
the append-only triggers stay as they are.  The revision is the store's statement that its
runs are recorded with layout 5 from now on: an enginecfg that knows only revision
``0010_release`` (and layouts 1 to 4) does not find this revision and refuses to open the store
for writing, so it cannot go on appending runs whose explanations are unhashed.  Runs recorded
before keep their layout and still verify; their explanations stay outside their hashes.

Revision ID: 0011_hashed_explanations
Revises: 0010_release
Create Date: 2026-12-08
"""
from __future__ import annotations

revision = "0011_hashed_explanations"
down_revision = "0010_release"
branch_labels = None
depends_on = None
#: what :func:`downgrade` loses of the audit history; ``enginecfg db downgrade`` reads it
downgrade_loses = ("hash layout 5 (changes.explanation hashed): runs recorded with it are "
                   "reported as unknown_layout by an enginecfg that reads revision 0010_release, "
                   "which would record runs with unhashed explanations again")


def upgrade() -> None:
    """Nothing to alter: the revision marks the store as written with hash layout 5."""


def downgrade() -> None:
    """Nothing to alter (see ``downgrade_loses`` for what undoing it gives up)."""
