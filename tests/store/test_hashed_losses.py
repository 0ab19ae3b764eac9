"""Each recorded loss of history is held by the hashes as the runs are (revision
0012_hashed_losses): with the append-only triggers dropped, an edit of any column of an
``audit_losses`` row, a loss deleted, added or moved, fails ``audit verify``; put back, only
the losses themselves are reported (``recorded_loss``)."""

from __future__ import annotations

import pytest
from sqlalchemy import and_, select

from support import run_cli
from enginecfg.store import AuditStore
from enginecfg.store.models import AuditLoss
from enginecfg.testing import emit_run

from .conftest import drop_triggers
from .test_every_column import _editor, _forged

LOSSES = AuditLoss.__table__


def _downgrade_and_back(url: str, export) -> None:
    """One step down (recorded as a loss, after a full export), then up to the head again."""
    assert run_cli("export", "--all", "-o", str(export), "--db", url).returncode == 0
    done = run_cli("db", "downgrade", "-1", "--db", url, "--i-have-exported", str(export))
    assert done.returncode == 0, done.stderr
    assert run_cli("db", "upgrade", "--db", url).returncode == 0


def _kinds(url: str) -> list[tuple[str, str]]:
    store = AuditStore(url, auto_upgrade=False)
    try:
        return [(p.kind, p.table) for p in store.verify().problems]
    finally:
        store.close()


@pytest.fixture
def two_losses(db_url, tmp_path):
    """A store holding runs and two recorded losses (each a step down and back up), its
    triggers gone; an editor that writes past the store's guards."""
    with AuditStore(db_url).attach() as store:
        emit_run(checks=1)
        emit_run()
    assert store.write_failed == 0, store.record_error
    store.close()
    _downgrade_and_back(db_url, tmp_path / "first.jsonl")
    _downgrade_and_back(db_url, tmp_path / "second.jsonl")
    # the upgrade hashed the loss recorded while the chain's columns were gone
    assert _kinds(db_url) == [("recorded_loss", "audit_losses")] * 2
    editor = _editor(db_url)
    with editor.begin() as conn:
        drop_triggers(conn)
    yield db_url, editor
    editor.dispose()


def _rows(editor) -> list[dict]:
    with editor.connect() as conn:
        return [dict(r) for r in conn.execute(select(LOSSES).order_by(LOSSES.c.id)).mappings()]


def test_an_edit_of_any_column_of_a_recorded_loss_is_found(two_losses):
    db_url, editor = two_losses
    rows = _rows(editor)
    assert all(r["row_hash"] for r in rows) and rows[1]["prev_hash"] == rows[0]["row_hash"]
    passed = []
    for row in rows:
        for column in LOSSES.columns:
            old = row[column.name]
            new = _forged(column, old)

            def edit(value, key):
                with editor.begin() as conn:
                    done = conn.execute(LOSSES.update().where(and_(LOSSES.c.id == key))
                                        .values({column.name: value}))
                    assert done.rowcount == 1

            edit(new, row["id"])
            found = [k for k in _kinds(db_url) if k[0] != "recorded_loss"]
            if not found:
                passed.append((row["id"], column.name))
            edit(old, new if column.name == "id" else row["id"])
    assert passed == []
    assert _kinds(db_url) == [("recorded_loss", "audit_losses")] * 2  # put back: intact


def test_a_loss_deleted_added_or_moved_is_found(two_losses):
    db_url, editor = two_losses
    first, last = _rows(editor)

    def change(*statements):
        with editor.begin() as conn:
            for s in statements:
                conn.execute(s)

    change(LOSSES.delete().where(LOSSES.c.id == last["id"]))      # the newest loss, removed
    assert ("head_mismatch", "chain_head") in _kinds(db_url)
    change(LOSSES.insert().values(**last))
    assert _kinds(db_url) == [("recorded_loss", "audit_losses")] * 2
    change(LOSSES.delete().where(LOSSES.c.id == first["id"]))     # the oldest loss, removed
    assert ("broken_link", "audit_losses") in _kinds(db_url)
    change(LOSSES.insert().values(**{**first, "id": last["id"] + 1}))  # ... put back after
    kinds = _kinds(db_url)
    assert ("broken_link", "audit_losses") in kinds and ("head_mismatch", "chain_head") in kinds
