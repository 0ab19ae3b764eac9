"""The auditor's record (issue 27): no built-in command loses history; verify says what it
checked and catches a store replaced by an emptied one; who ran each run is stored, hashed
and filterable; skipped stages keep their origin; a config that failed to load is recorded
under its resolved path."""

from __future__ import annotations

import json
import os

import pytest
from sqlalchemy import inspect, text

from support import CONFIGS, run_cli
from enginecfg.store import AuditStore
from enginecfg.store import checkpoint as cp
from enginecfg.store import engine as eng
from enginecfg.testing import emit_run

from .conftest import drop_triggers

SECRET = "correct horse battery staple, 2025"


def _revisions() -> list[str]:
    """Every revision, newest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(eng.alembic_config())
    return [r.revision for r in script.walk_revisions()]


REVISIONS = _revisions()


def _store_with_runs(url: str, n: int = 3) -> list[str]:
    with AuditStore(url, actor="ci-job-7").attach() as store:
        ids = [emit_run(checks=1) for _ in range(n)]
        assert store.write_failed == 0, store.record_error
    store.close()
    return ids


def _intact(url: str) -> int:
    store = AuditStore(url, auto_upgrade=False)
    try:
        res = store.verify()
        assert res.ok, res.first_bad
        return res.runs_checked
    finally:
        store.close()


@pytest.mark.parametrize("target", REVISIONS[1:] + ["base"])
def test_each_downgrade_of_a_store_with_runs_is_refused_then_recorded(db_url, tmp_path, target):
    """Every revision's downgrade, one step below the head and all the way down: refused on
    a store holding runs (the runs stay, intact); with a checked export it runs, the loss is
    recorded, and verify reports it."""
    ids = _store_with_runs(db_url)
    refused = run_cli("db", "downgrade", target, "--db", db_url)
    assert refused.returncode == 2 and "refused" in refused.stderr and "--i-have-exported" in refused.stderr
    engine = eng.make_engine(db_url)
    try:
        assert eng.current_revision(engine) == REVISIONS[0]
    finally:
        engine.dispose()
    assert _intact(db_url) == 3                                     # the runs are intact

    export = tmp_path / "export.jsonl"
    assert run_cli("export", "--all", "-o", str(export), "--db", db_url).returncode == 0
    done = run_cli("db", "downgrade", target, "--db", db_url, "--i-have-exported", str(export))
    assert done.returncode == 0, done.stderr
    engine = eng.make_engine(db_url)
    try:
        assert eng.current_revision(engine) == (None if target == "base" else target)
        assert "audit_losses" in inspect(engine).get_table_names()  # kept by every downgrade
    finally:
        engine.dispose()
    unread = run_cli("audit", "verify", "--db", db_url)               # reads never migrate
    assert unread.returncode == 2 and "enginecfg db upgrade" in unread.stderr, unread.stderr
    assert run_cli("db", "upgrade", "--db", db_url).returncode == 0
    verdict = run_cli("audit", "verify", "--db", db_url)
    assert verdict.returncode == 1
    assert "dropped on purpose" in verdict.stdout and str(export.resolve()) in verdict.stdout
    assert f"to {target}" in verdict.stdout
    store = AuditStore(db_url)
    try:
        first = store.verify().first_bad
        assert first.kind == "recorded_loss"
        if target == "base":
            assert store.list_runs() == []
        else:
            assert {r["run_id"] for r in store.list_runs()} == set(ids)
    finally:
        store.close()


def test_an_export_that_does_not_cover_the_store_is_refused(db_url, tmp_path):
    _store_with_runs(db_url)
    export = tmp_path / "export.jsonl"
    assert run_cli("export", "--all", "-o", str(export), "--db", db_url).returncode == 0
    lines = export.read_text().splitlines()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:-1]) + "\n")                      # cut short
    proc = run_cli("db", "downgrade", "base", "--db", db_url, "--i-have-exported", str(cut))
    assert proc.returncode == 2 and "incomplete" in proc.stderr
    one = tmp_path / "runs.jsonl"                                     # one table only
    assert run_cli("export", "-o", str(one), "--db", db_url).returncode == 0
    proc = run_cli("db", "downgrade", "base", "--db", db_url, "--i-have-exported", str(one))
    assert proc.returncode == 2 and "export --all" in proc.stderr
    _store_with_runs(db_url, 1)                                       # recorded since
    proc = run_cli("db", "downgrade", "base", "--db", db_url, "--i-have-exported", str(export))
    assert proc.returncode == 2 and "recorded since" in proc.stderr
    assert _intact(db_url) == 4


def test_an_empty_store_downgrades_without_an_export(db_url):
    engine = eng.make_engine(db_url)
    try:
        eng.upgrade(engine)
    finally:
        engine.dispose()
    one = run_cli("db", "downgrade", "-1", "--db", db_url)
    assert one.returncode == 0 and REVISIONS[1] in one.stdout, one.stderr
    bad = run_cli("db", "downgrade", "nonsense", "--db", db_url)
    assert bad.returncode == 2 and "a revision below the current one" in bad.stderr
    assert run_cli("db", "downgrade", "base", "--db", db_url).returncode == 0


def test_verify_says_what_it_checked(db_url):
    _store_with_runs(db_url)
    proc = run_cli("audit", "verify", "--db", db_url)
    assert proc.returncode == 0
    store = AuditStore(db_url)
    try:
        res = store.verify()
    finally:
        store.close()
    assert res.store_id and res.created_at and (res.first_position, res.last_position) == (1, 3)
    assert f"checked store {res.store_id} (created " in proc.stdout
    assert "positions 1..3" in proc.stdout
    doc = json.loads(run_cli("audit", "verify", "--json", "--db", db_url).stdout)
    assert doc["store_id"] == res.store_id and doc["first_position"] == 1 and doc["last_position"] == 3


def _replace_with_an_empty_store(url: str) -> None:
    """The attacker: drop every audit table and let the next use make a fresh, empty store."""
    engine = eng.make_engine(url)
    try:
        with engine.begin() as conn:
            drop_triggers(conn)
            for table in ("validation_checks", "messages", "changes", "stage_executions", "runs",
                          "chain_head", "audit_losses", "alembic_version"):
                conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
    finally:
        engine.dispose()


def test_a_store_replaced_by_an_emptied_one_fails_verify_against_the_mirror(db_url, tmp_path,
                                                                          monkeypatch):
    mirror = tmp_path / "mirror.jsonl"
    monkeypatch.setenv(cp.MIRROR_ENV, str(mirror))
    monkeypatch.setenv(cp.MIRROR_EVERY_ENV, "2")
    monkeypatch.setenv(cp.KEY_ENV, SECRET)
    _store_with_runs(db_url, 4)
    ok = run_cli("audit", "verify", "--db", db_url)
    assert ok.returncode == 0 and "2 checkpoint(s)" in ok.stdout, ok.stdout
    _replace_with_an_empty_store(db_url)
    store = AuditStore(db_url)
    try:
        assert store.verify().ok                                      # the chain alone: fine
    finally:
        store.close()
    bad = run_cli("audit", "verify", "--db", db_url)
    assert bad.returncode == 1 and "NOT intact" in bad.stdout and "re-created" in bad.stdout
    # and against a checkpoint file kept elsewhere, without the mirror
    assert run_cli("audit", "verify", "--no-mirror", "--db", db_url).returncode == 0


def test_a_store_that_shrank_fails_verify_against_the_mirror(db_url, tmp_path, monkeypatch):
    from .test_checkpoint import rewrite

    monkeypatch.setenv(cp.MIRROR_ENV, str(tmp_path / "mirror.jsonl"))
    monkeypatch.setenv(cp.MIRROR_EVERY_ENV, "2")
    monkeypatch.setenv(cp.KEY_ENV, SECRET)
    _store_with_runs(db_url, 4)
    store = AuditStore(db_url)
    try:
        rewrite(store, 3, drop_from=3)                  # the tail removed, the head moved back
        assert store.verify().ok
    finally:
        store.close()
    bad = run_cli("audit", "verify", "--db", db_url)
    assert bad.returncode == 1 and "runs were removed" in bad.stdout


def test_the_actor_is_stored_hashed_and_filterable(db_url, monkeypatch):
    monkeypatch.setenv("ENGINECFG_ACTOR", "svc-deploy")
    with AuditStore(db_url).attach() as store:                        # the environment
        by_env = emit_run()
    store.close()
    monkeypatch.delenv("ENGINECFG_ACTOR")
    with AuditStore(db_url, actor="ci-job-7").attach() as store:      # the Python API
        by_api = emit_run()
    with AuditStore(db_url).attach() as anon:                         # the OS user alone
        by_user = emit_run()
    anon.close()
    run = store.get_run(by_api)
    assert run["actor"] == "ci-job-7" and run["os_user"] == store.identity.os_user
    assert store.get_run(by_env)["actor"] == "svc-deploy"
    assert store.get_run(by_user)["actor"] is None
    assert [r["run_id"] for r in store.list_runs(actor="ci-job-7")] == [by_api]
    assert {r["run_id"] for r in store.list_runs(actor=store.identity.os_user)} == {by_env, by_api, by_user}
    out = run_cli("runs", "--actor", "svc-deploy", "--json", "--db", db_url)
    assert [r["run_id"] for r in json.loads(out.stdout)] == [by_env]
    assert store.verify().ok
    with store.engine.begin() as conn:                                # hashed: an edit shows
        drop_triggers(conn)
        conn.execute(text("UPDATE runs SET actor = 'someone-else' WHERE id = :r"), {"r": by_api})
    bad = store.verify().first_bad
    assert (bad.kind, bad.run_id) == ("edited_run", by_api)
    store.close()


@pytest.mark.parametrize("given", ["", "   ", "x" * 256, "tab\there"])
def test_a_bad_actor_is_refused_with_a_clear_error(given, tmp_path):
    from enginecfg.pipeline.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="actor"):
        AuditStore(f"sqlite:///{tmp_path / 'a.db'}", actor=given)
    proc = run_cli("run", str(CONFIGS / "mamba-130m-hf"), "--actor", given,
                   "--db", f"sqlite:///{tmp_path / 'a.db'}")
    assert proc.returncode == 2 and "--actor" in proc.stderr and "Traceback" not in proc.stderr


def test_skipped_stages_keep_their_origin_and_a_failed_load_its_resolved_path(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad2").mkdir()
    ok = run_cli("run", str(CONFIGS / "mamba-130m-hf"), "--json", "--db", url, "--actor", "ci")
    assert ok.returncode == 0, ok.stderr
    bad = run_cli("run", "bad2", "--json", "--db", url)
    assert bad.returncode == 2
    store = AuditStore(url)
    try:
        good = store.get_run(json.loads(ok.stdout)["run_id"])
        skipped = [s for s in good["stages"] if s["outcome"] == "skipped"]
        assert skipped and all(s["origin"] != "unknown" for s in good["stages"]), good["stages"]
        failed = store.list_runs(status="invalid")[0]
        assert failed["model"] == os.path.join(str(tmp_path), "bad2")
    finally:
        store.close()
    shown = run_cli("show", good["run_id"], "--db", url)
    for words in ("actor", "ci (os user", "source", "config.json sha256", "GPU validation",
                  "capacity", "KV tokens"):
        assert words in shown.stdout, words
