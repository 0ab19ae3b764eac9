"""Every stored column is held by the record: with the append-only triggers and the foreign
keys dropped (an editor with the database file or its owner role), rewriting any one column
of any audit table or of the store's own record makes ``audit verify --checkpoint ...
--key-file ...`` fail; put back, the history verifies again.  What a command shows (``why``,
``show``, ``history``, ``diff``, ``runs``, ``export``, the page) is read from these columns,
so no command can show a forged value that verification passes."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Boolean, Double, Integer, String, and_, create_engine, select, text

from support import CONFIGS, run_cli
from enginecfg import Pipeline
from enginecfg.store import AuditStore
from enginecfg.store.models import AUDIT_TABLES, Base, JSONValue
from enginecfg.testing import emit_run

from .conftest import drop_triggers

#: the tables whose every column a command shows or verify relies on
TABLES = AUDIT_TABLES + ("chain_head",)


def _forged(column, old):
    """Another value of *column*'s type (the same length for a text, so that a VARCHAR(n)
    takes it; far from the old number, so that no unique key collides)."""
    kind = column.type
    if isinstance(kind, JSONValue):
        return {"forged": True} if old != {"forged": True} else {"forged": False}
    if isinstance(kind, Boolean):
        return not old
    if isinstance(kind, Integer):
        return (old or 0) + 1000
    if isinstance(kind, Double):
        return (old or 0.0) + 0.5
    if isinstance(kind, String):
        if not old:
            return "forged"
        return ("Y" if old[0] == "X" else "X") + old[1:]
    raise AssertionError(f"no forged value for {column} ({kind!r})")


def _editor(url: str):
    """A connection maker that writes past the store's guards: no append-only triggers, no
    foreign keys (SQLite: a plain connection, which does not turn them on; PostgreSQL: the
    constraints dropped, as the tables' owner may)."""
    if url.startswith("sqlite"):
        return create_engine(url)
    from enginecfg.store.engine import make_engine

    engine = make_engine(url)
    with engine.begin() as conn:
        for table, name in conn.execute(text(
                "SELECT c.relname, k.conname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
                "WHERE k.contype = 'f' AND c.relnamespace = current_schema()::regnamespace")).all():
            conn.execute(text(f'ALTER TABLE "{table}" DROP CONSTRAINT "{name}"'))
    return engine


@pytest.fixture
def recorded(db_url, tmp_path):
    """A store holding a real run (explanations, source, figures, an actor), a run with a
    GPU-validation check and a rejected one; a signed checkpoint of it; its triggers gone."""
    with AuditStore(db_url, actor="ci-nightly").attach() as store:
        real = Pipeline(gpu_validation="off").resolve(str(CONFIGS / "qwen3.5-27b"),
                                                       enable_prefix_caching=True)
        checked = emit_run(checks=1)
        emit_run(fail="rejected")
    assert store.write_failed == 0, store.record_error
    with store.engine.begin() as conn:
        assert drop_triggers(conn) > 0
    store.close()
    pem, pub, saved = tmp_path / "k.pem", tmp_path / "k.pub.pem", tmp_path / "cp.json"
    assert run_cli("audit", "keygen", "--out", str(pem)).returncode == 0
    made = run_cli("audit", "checkpoint", "--key-file", str(pem), "-o", str(saved), "--db", db_url)
    assert made.returncode == 0, made.stderr
    return db_url, real.run_id, checked, ["--checkpoint", str(saved), "--key-file", str(pub)]


def _target_rows(conn, real: str, checked: str) -> dict[str, dict]:
    """One row of each table: the real run's (its first change that carries an explanation),
    the synthetic run's validation check, the chain head."""
    t = Base.metadata.tables
    pick = {
        "runs": select(t["runs"]).where(t["runs"].c.id == real),
        "stage_executions": select(t["stage_executions"]).where(
            t["stage_executions"].c.run_id == real).order_by(t["stage_executions"].c.stage_order),
        "changes": select(t["changes"]).where(t["changes"].c.run_id == real,
                                              t["changes"].c.explanation.is_not(None))
        .order_by(t["changes"].c.seq),
        "messages": select(t["messages"]).where(t["messages"].c.run_id == real)
        .order_by(t["messages"].c.seq),
        "validation_checks": select(t["validation_checks"]).where(
            t["validation_checks"].c.run_id == checked),
        "chain_head": select(t["chain_head"]),
    }
    return {name: dict(conn.execute(q.limit(1)).mappings().one()) for name, q in pick.items()}


def _verify(db_url: str, args: list[str]):
    return run_cli("audit", "verify", "--db", db_url, *args)


def test_an_edit_of_any_stored_column_fails_verification_against_a_checkpoint(recorded):
    db_url, real, checked, args = recorded
    intact = _verify(db_url, args)
    assert intact.returncode == 0 and "extends 1 signed checkpoint" in intact.stdout, intact.stderr
    editor = _editor(db_url)
    with editor.connect() as conn:
        rows = _target_rows(conn, real, checked)
    assert rows["changes"]["explanation"], "the real run explains a change"
    passed, tried = [], []
    for name in TABLES:
        table = Base.metadata.tables[name]
        keys = [c.name for c in table.primary_key.columns]
        for column in table.columns:
            old = rows[name][column.name]
            new = _forged(column, old)
            where = {k: (new if k == column.name else rows[name][k]) for k in keys}

            def edit(value, match):
                with editor.begin() as conn:
                    done = conn.execute(table.update().where(and_(*[table.c[k] == v for k, v in match.items()]))
                                        .values({column.name: value}))
                    assert done.rowcount == 1, (name, column.name)

            edit(new, {k: rows[name][k] for k in keys})
            verdict = _verify(db_url, args)
            tried.append(f"{name}.{column.name}")
            if verdict.returncode != 1 or "NOT intact" not in verdict.stdout:
                passed.append((f"{name}.{column.name}", verdict.returncode, verdict.stdout + verdict.stderr))
            edit(old, where)
    editor.dispose()
    assert passed == []
    assert "changes.explanation" in tried and len(tried) == sum(
        len(Base.metadata.tables[n].columns) for n in TABLES)
    again = _verify(db_url, args)  # every value put back: intact again
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_forged_explanation_is_named_and_why_shows_what_verify_refuses(recorded):
    db_url, real, _, args = recorded
    editor = _editor(db_url)
    with editor.begin() as conn:
        conn.execute(text("UPDATE changes SET explanation = 'FORGED explanation' WHERE run_id = :r "
                          "AND explanation IS NOT NULL"), {"r": real})
    editor.dispose()
    assert "FORGED explanation" in run_cli("why", real, "cache_config.block_size", "--db", db_url).stdout
    for extra in ([], args):
        verdict = _verify(db_url, [*extra, "--json"])
        doc = json.loads(verdict.stdout)
        assert verdict.returncode == 1 and not doc["ok"]
        assert (doc["first_bad"]["kind"], doc["first_bad"]["table"], doc["first_bad"]["run_id"]) == (
            "edited_row", "changes", real)
