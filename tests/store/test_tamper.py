"""Tamper evidence: with the triggers dropped (an attacker with file or owner access),
every kind of edit is found by ``verify``, which names the first bad record."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select, text

from enginecfg.testing import emit_run
from enginecfg.store.hashing import run_hash
from enginecfg.store.models import Run

from .conftest import drop_triggers


@pytest.fixture
def chain(store):
    """Five recorded runs and a connection-maker with the triggers gone."""
    ids = [emit_run(checks=1) for _ in range(5)]
    with store.engine.begin() as conn:
        assert drop_triggers(conn) > 0
    assert store.verify().ok
    return store, ids


def _tamper(store, *statements: tuple[str, dict]) -> None:
    with store.engine.begin() as conn:
        for sql, params in statements:
            conn.execute(text(sql), params)


def _first(store):
    res = store.verify()
    assert not res.ok
    return res.first_bad


def test_intact_chain_verifies(chain):
    store, ids = chain
    res = store.verify()
    assert res.ok and res.runs_checked == 5 and res.head_position == 5
    assert res.first_bad is None


def test_edited_change_row_is_named(chain):
    store, ids = chain
    _tamper(store, ("UPDATE changes SET new = :v WHERE run_id = :r AND seq = 5",
                    {"v": json.dumps(16), "r": ids[2]}))
    bad = _first(store)
    assert (bad.kind, bad.table, bad.run_id, bad.key, bad.position) == (
        "edited_row", "changes", ids[2], 5, 3)


def test_edited_change_with_its_row_hash_recomputed_is_still_found(chain):
    store, ids = chain
    _tamper(store, ("UPDATE changes SET reason = 'nothing to see', row_hash = :h "
                    "WHERE run_id = :r AND seq = 1", {"h": "0" * 64, "r": ids[1]}))
    from enginecfg.store.hashing import child_hash

    with store.engine.connect() as conn:
        row = dict(conn.execute(text("SELECT * FROM changes WHERE run_id = :r AND seq = 1"),
                                {"r": ids[1]}).mappings().one())
    row["old"] = json.loads(row["old"]) if isinstance(row["old"], str) else row["old"]
    row["new"] = json.loads(row["new"]) if isinstance(row["new"], str) else row["new"]
    _tamper(store, ("UPDATE changes SET row_hash = :h WHERE run_id = :r AND seq = 1",
                    {"h": child_hash("changes", row), "r": ids[1]}))
    bad = _first(store)
    assert (bad.kind, bad.table, bad.run_id) == ("edited_run", "runs", ids[1])


def test_edited_run_row_is_named(chain):
    store, ids = chain
    _tamper(store, ("UPDATE runs SET status = 'rejected' WHERE id = :r", {"r": ids[3]}))
    bad = _first(store)
    assert (bad.kind, bad.table, bad.run_id, bad.position) == ("edited_run", "runs", ids[3], 4)


def test_deleted_child_row_is_named(chain):
    store, ids = chain
    _tamper(store, ("DELETE FROM messages WHERE run_id = :r AND seq = 1", {"r": ids[0]}))
    bad = _first(store)
    assert (bad.kind, bad.table, bad.run_id) == ("missing_rows", "messages", ids[0])


def test_inserted_child_row_is_named(chain):
    store, ids = chain
    _tamper(store, ("INSERT INTO changes (run_id, seq, stage, field, old, new, reason, level, "
                    "via, row_hash) VALUES (:r, 99, 'x', 'cache_config.block_size', '1', '2', "
                    "'forged', 'INFO', 'context', :h)", {"r": ids[4], "h": "1" * 64}))
    bad = _first(store)
    assert (bad.kind, bad.table, bad.run_id) == ("extra_rows", "changes", ids[4])


def test_deleted_run_in_the_middle_is_named(chain):
    store, ids = chain
    deletes = [(f"DELETE FROM {t} WHERE run_id = :r", {"r": ids[2]})
               for t in ("stage_executions", "changes", "messages", "validation_checks")]
    _tamper(store, *deletes, ("DELETE FROM runs WHERE id = :r", {"r": ids[2]}))
    res = store.verify()
    assert not res.ok
    bad = res.first_bad
    assert (bad.kind, bad.run_id, bad.position) == ("missing_run", ids[3], 4)
    assert "3" in bad.message
    assert any(p.kind == "broken_link" and p.run_id == ids[3] for p in res.problems)


def test_deleted_last_run_is_found_through_the_chain_head(chain):
    store, ids = chain
    deletes = [(f"DELETE FROM {t} WHERE run_id = :r", {"r": ids[4]})
               for t in ("stage_executions", "changes", "messages", "validation_checks")]
    _tamper(store, *deletes, ("DELETE FROM runs WHERE id = :r", {"r": ids[4]}))
    bad = _first(store)
    assert (bad.kind, bad.table, bad.position) == ("head_mismatch", "chain_head", 5)


def _forged_row(store, after: dict) -> dict:
    row = dict(after)
    row.update(id="e" * 32, chain_pos=after["chain_pos"] + 1, prev_hash=after["row_hash"],
               status="resolved", model="/models/forged", n_stages=0, n_changes=0,
               n_messages=0, n_checks=0)
    row["row_hash"] = run_hash(row, {})
    return row


def test_forged_run_appended_with_a_correct_hash_is_found(chain):
    store, ids = chain
    with store.engine.connect() as conn:
        last = dict(conn.execute(select(Run.__table__).order_by(Run.chain_pos.desc())
                                 .limit(1)).mappings().one())
    row = _forged_row(store, last)
    with store.engine.begin() as conn:
        conn.execute(Run.__table__.insert(), [row])
    bad = _first(store)
    assert (bad.kind, bad.table) == ("head_mismatch", "chain_head")


def test_forged_run_inserted_in_the_middle_is_named(chain):
    store, ids = chain
    # make room: move runs 3.. up by one (the attacker's renumbering), insert at 3
    with store.engine.connect() as conn:
        second = dict(conn.execute(select(Run.__table__).where(Run.id == ids[1]))
                      .mappings().one())
    for rid in reversed(ids[2:]):
        _tamper(store, ("UPDATE runs SET chain_pos = chain_pos + 1 WHERE id = :r", {"r": rid}))
    row = _forged_row(store, second)
    with store.engine.begin() as conn:
        conn.execute(Run.__table__.insert(), [row])
    res = store.verify()
    assert not res.ok
    # the forged run itself fits its predecessor; the run after it does not
    assert (res.first_bad.run_id, res.first_bad.position) == (ids[2], 4)


def test_reordered_positions_are_named(chain):
    store, ids = chain
    _tamper(store,
            ("UPDATE runs SET chain_pos = -1 WHERE id = :r", {"r": ids[1]}),
            ("UPDATE runs SET chain_pos = 2 WHERE id = :r", {"r": ids[2]}),
            ("UPDATE runs SET chain_pos = 3 WHERE id = :r", {"r": ids[1]}))
    bad = _first(store)
    assert (bad.kind, bad.run_id, bad.position) == ("broken_link", ids[2], 2)


def test_orphan_child_rows_are_found(store):
    if store.engine.dialect.name != "sqlite":
        pytest.skip("needs foreign keys switched off, which PostgreSQL reserves to superusers")
    import sqlite3

    emit_run()
    raw = sqlite3.connect(store.engine.url.database)  # foreign keys are off by default
    raw.execute("INSERT INTO messages (run_id, seq, stage, level, message, row_hash) VALUES "
                "('9999', 1, 's', 'INFO', 'm', 'x')")
    raw.commit()
    raw.close()
    bad = _first(store)
    assert (bad.kind, bad.table, bad.run_id) == ("orphan_rows", "messages", "9999")


def test_verify_cli_exit_codes_and_json(chain, capsys):
    import argparse

    from enginecfg.cli.audit import register

    store, ids = chain
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="cmd"))

    def run(*argv):
        args = parser.parse_args(list(argv))
        return args.func(args)

    assert run("audit", "verify", "--db", store.url) == 0
    assert "intact: 5 run(s)" in capsys.readouterr().out
    _tamper(store, ("UPDATE changes SET reason = 'x' WHERE run_id = :r AND seq = 2",
                    {"r": ids[1]}))
    assert run("audit", "verify", "--db", store.url) == 1
    out = capsys.readouterr().out
    assert "NOT intact" in out and ids[1] in out
    assert run("audit", "verify", "--json", "--db", store.url) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["first_bad"]["run_id"] == ids[1]
    assert doc["first_bad"]["table"] == "changes" and doc["first_bad"]["key"] == 2



def test_a_run_appended_while_verify_walks_is_not_taken_for_tampering(store, monkeypatch):
    """A store written during ``audit verify`` (engines recording runs meanwhile): the walk
    judges the snapshot it began with.  The run appended after the head was read, committed
    before the walk's next read, is neither walked nor reported; the next walk takes it in.
    (On PostgreSQL at READ COMMITTED it was reported as added to the tail.)"""
    from enginecfg.store import verify as verify_module

    first = [emit_run() for _ in range(3)]
    real_children = verify_module._children
    appended: list[str] = []

    def children_then_append(conn, run_ids):
        found = real_children(conn, run_ids)
        if not appended:
            appended.append(emit_run())  # committed through the store's own writer connection
        return found

    monkeypatch.setattr(verify_module, "_children", children_then_append)
    report = store.verify()
    assert appended and store.recorded == len(first) + 1
    assert report.ok, report.problems
    assert report.runs_checked == len(first)
    monkeypatch.undo()
    again = store.verify()
    assert again.ok and again.runs_checked == len(first) + 1
