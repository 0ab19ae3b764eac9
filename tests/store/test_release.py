"""The vLLM release in the audit record (issue 28): ``runs.vllm_version`` (revision
0010_release) and the start-up GPU, stored, hashed from layout 4, shown and filtered by
``runs``, ``show``, ``history``, ``diff`` and ``export``; old rows read 0.19.0."""

from __future__ import annotations

import csv
import io
import json

import pytest
from sqlalchemy import inspect, select, text

from support import CONFIGS, run_cli
from enginecfg import EngineConfig, Pipeline
from enginecfg.store import AuditStore
from enginecfg.store import engine as eng
from enginecfg.store import hashing
from enginecfg.store.models import Run
from enginecfg.testing import emit_run

from .conftest import drop_triggers

QWEN = CONFIGS / "qwen3.5-27b"
BEFORE = "0009_impact_memory"


def _run(release: str | None = None, **args):
    return Pipeline(gpu_validation="off", vllm_version=release).run(
        EngineConfig.from_pretrained(QWEN, **args))


def _columns(engine) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns("runs")}


def test_old_rows_read_0190_after_the_migration_and_keep_verifying(db_url, monkeypatch):
    """Runs recorded before revision 0010 (hash layout 3, no release column) read 0.19.0
    once it is added, and still verify; a run recorded after it is hashed with layout 4."""
    store = AuditStore(db_url)
    with monkeypatch.context() as m:  # enginecfg as it recorded before this revision
        m.setattr(hashing, "LAYOUT_STEPS", hashing.LAYOUT_STEPS[:3])
        with store.attach():
            old = [emit_run(), emit_run(checks=1)]
    assert store.write_failed == 0, store.record_error
    engine = store.engine
    eng.downgrade(engine, BEFORE)  # the schema those runs were written at
    assert "vllm_version" not in _columns(engine)
    eng.upgrade(engine)
    assert eng.current_revision(engine) == eng.head_revision()
    assert "vllm_version" in _columns(engine)
    store._ready = False
    for rid in old:
        run = store.get_run(rid)
        assert run["vllm_version"] == "0.19.0" and run["hash_layout"] == 3
    with store.attach():
        new = _run("0.34.0")
    assert store.write_failed == 0, store.record_error
    fresh = store.get_run(new.run_id)
    assert fresh["vllm_version"] == "0.34.0" and fresh["hash_layout"] == hashing.current_layout() >= 4
    assert [r["run_id"] for r in store.list_runs(vllm_version="0.19.0")] == old[::-1]
    assert [r["run_id"] for r in store.list_runs(vllm_version="0.34.0")] == [new.run_id]
    res = store.verify()
    assert res.ok and res.runs_checked == 3, res.first_bad
    store.close()


def test_the_downgrade_that_drops_the_release_is_refused_then_recorded(db_url, tmp_path):
    with AuditStore(db_url).attach() as store:
        _run("0.34.0")
        _run()
    store.close()
    refused = run_cli("db", "downgrade", BEFORE, "--db", db_url)
    assert refused.returncode == 2, refused.stderr
    assert "runs.vllm_version" in refused.stderr and "--i-have-exported" in refused.stderr
    export = tmp_path / "all.jsonl"
    assert run_cli("export", "--all", "-o", str(export), "--db", db_url).returncode == 0
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    assert sorted(r["row"]["vllm_version"] for r in rows if r.get("table") == "runs") == [
        "0.19.0", "0.34.0"]
    done = run_cli("db", "downgrade", BEFORE, "--db", db_url, "--i-have-exported", str(export))
    assert done.returncode == 0, done.stderr
    engine = eng.make_engine(db_url)
    try:
        assert eng.current_revision(engine) == BEFORE
        assert "vllm_version" not in _columns(engine)
        assert engine.connect().execute(text("SELECT COUNT(*) FROM runs")).scalar() == 2
    finally:
        engine.dispose()
    assert run_cli("db", "upgrade", "--db", db_url).returncode == 0  # verify never migrates
    verdict = run_cli("audit", "verify", "--db", db_url)
    assert verdict.returncode == 1 and "runs.vllm_version" in verdict.stdout


def test_layout_4_hashes_the_release_and_a_tampered_release_is_detected(store):
    assert "vllm_version" in hashing.layout(4).run_fields
    assert "vllm_version" not in hashing.layout(3).run_fields
    r = _run("0.34.0")
    assert store.verify().ok
    with store.engine.connect() as conn:  # the row as the store reads it back
        row = dict(conn.execute(select(Run.__table__).where(Run.id == r.run_id)).mappings().one())
        kids = {t: [h for (h,) in conn.execute(text(
            f"SELECT row_hash FROM {t} WHERE run_id = :i ORDER BY {o}"), {"i": r.run_id})]
            for t, o in hashing.CHILD_ORDER.items()}
    assert row["vllm_version"] == "0.34.0" and row["hash_layout"] == hashing.current_layout() >= 4
    # the hash covers the column: the same row naming another release hashes otherwise
    assert hashing.run_hash(row, kids) == row["row_hash"]
    assert hashing.run_hash({**row, "vllm_version": "0.19.0"}, kids) != row["row_hash"]
    # an auditor's view: the column rewritten in the database is reported
    with store.engine.begin() as conn:
        drop_triggers(conn)
        conn.execute(text("UPDATE runs SET vllm_version = '0.19.0' WHERE id = :i"), {"i": r.run_id})
    res = store.verify()
    assert not res.ok
    assert res.first_bad.kind == "edited_run" and "vllm_version" in res.first_bad.message


def test_the_start_up_gpu_is_named_also_by_a_run_without_figures(store):
    """One GPU per run: ``runs.gpu`` names the card, from the KV-cache figures or, where the
    run has none (the impact stage left out), from the run document's start-up GPU."""
    with_figures = Pipeline(gpu_validation="off", gpu="A100-80GB").run(EngineConfig.from_pretrained(QWEN))
    without = Pipeline(gpu_validation="off", gpu="L40S", disable=["impact"]).run(
        EngineConfig.from_pretrained(QWEN))
    a, b = store.get_run(with_figures.run_id), store.get_run(without.run_id)
    assert a["gpu"] == "A100-80GB" and a["kv_tokens"]
    assert b["gpu"] == "L40S" and b["kv_tokens"] is None and b["result"]["impact"] is None
    assert store.verify().ok
    with store.engine.begin() as conn:
        drop_triggers(conn)
        conn.execute(text("UPDATE runs SET gpu = 'H200' WHERE id = :i"), {"i": without.run_id})
    assert not store.verify().ok


def test_runs_show_history_and_diff_across_two_releases(tmp_path):
    """``enginecfg run`` of Qwen3.5-27B under 0.19.0 and under 0.34.0, then every audit
    command on the two runs."""
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    for release in ("0.19.0", "0.34.0"):
        done = run_cli("run", str(QWEN), "--vllm-version", release, "--gpu-validation", "off",
                       "--db", db, "--json")
        assert done.returncode == 0, done.stderr
    runs = json.loads(run_cli("runs", "--json", "--db", db).stdout)
    by = {r["vllm_version"]: r["run_id"] for r in runs}
    assert set(by) == {"0.19.0", "0.34.0"} and all(r["gpu"] for r in runs)

    only = json.loads(run_cli("runs", "--vllm-version", "0.34.0", "--json", "--db", db).stdout)
    assert [r["run_id"] for r in only] == [by["0.34.0"]]
    assert json.loads(run_cli("runs", "--vllm-version", "0.20.0", "--json", "--db", db).stdout) == []
    table = run_cli("runs", "--db", db).stdout
    assert "vllm" in table and "0.34.0" in table and "0.19.0" in table
    rows = list(csv.DictReader(io.StringIO(run_cli("runs", "--csv", "--db", db).stdout)))
    assert {r["run_id"]: r["vllm"] for r in rows} == {v[:12]: k for k, v in by.items()}
    empty = run_cli("runs", "--vllm-version", " ", "--db", db)
    assert empty.returncode == 2 and "--vllm-version" in empty.stderr

    shown = run_cli("show", by["0.34.0"], "--db", db).stdout
    assert "release and GPU" in shown and "vLLM release        0.34.0" in shown
    assert "NVIDIA H200" in shown and "compute capability  9.0" in shown
    assert json.loads(run_cli("show", by["0.34.0"], "--json", "--db", db).stdout)["vllm_version"] == "0.34.0"

    hist = json.loads(run_cli("history", "cache_config.block_size", "--json", "--db", db).stdout)
    assert {h["vllm_version"]: h["value"] for h in hist} == {"0.19.0": 784, "0.34.0": 64}
    assert "0.34.0" in run_cli("history", "cache_config.block_size", "--db", db).stdout

    diff = run_cli("diff", by["0.19.0"], by["0.34.0"], "--db", db)
    assert diff.returncode == 0, diff.stderr
    assert "the releases differ: a = vLLM 0.19.0, b = vLLM 0.34.0" in " ".join(diff.stdout.split())
    res = json.loads(run_cli("diff", by["0.19.0"], by["0.34.0"], "--json", "--db", db).stdout)
    assert res["releases_differ"] and (res["vllm_version_a"], res["vllm_version_b"]) == ("0.19.0", "0.34.0")
    d = {x["field"]: x for x in res["differences"]}
    assert (d["vllm_version"]["a"], d["vllm_version"]["b"]) == ("0.19.0", "0.34.0")
    assert (d["startup.block_size"]["a"], d["startup.block_size"]["b"]) == (16, 832)
    assert (d["cache_config.mamba_cache_mode"]["a"], d["cache_config.mamba_cache_mode"]["b"]) == ("none", "align")
    # fields one release has and the other has not: shown as such
    assert any(x["only_in"] == "b" for x in res["differences"])
    assert "(absent)" in diff.stdout
    same = json.loads(run_cli("diff", by["0.34.0"], by["0.34.0"], "--json", "--db", db).stdout)
    assert same["differences"] == [] and not same["releases_differ"]
    # why is unchanged: the chain of changes of one run
    why = json.loads(run_cli("why", by["0.19.0"], "cache_config.block_size", "--json", "--db", db).stdout)
    assert why["final"] == 784


def test_export_round_trip_carries_the_release_and_rehashes(store, tmp_path):
    """``export --raw`` of every table gives back rows whose hashes recompute (the release
    included); the ISO and CSV exports name the release too."""
    r34, r19 = _run("0.34.0"), _run()
    exported = {}
    for table in hashing.CHILD_ORDER | {"runs": None}:
        buf = io.StringIO()
        store.export(buf, table=table, raw=True)
        exported[table] = [json.loads(line) for line in buf.getvalue().splitlines()]
    runs = {row["id"]: row for row in exported["runs"]}
    assert (runs[r34.run_id]["vllm_version"], runs[r19.run_id]["vllm_version"]) == ("0.34.0", "0.19.0")
    for rid, row in runs.items():
        kids = {t: [k for k in exported[t] if k["run_id"] == rid] for t in hashing.CHILD_ORDER}
        for t, rows in kids.items():
            for k in rows:
                assert hashing.child_hash(t, k, row["hash_layout"]) == k["row_hash"]
        hashes = {t: [k["row_hash"] for k in rows] for t, rows in kids.items()}
        assert hashing.run_hash(row, hashes) == row["row_hash"]
        assert hashing.run_hash({**row, "vllm_version": "9.9.9"}, hashes) != row["row_hash"]
    buf = io.StringIO()
    store.export(buf, fmt="csv")
    assert {r["run_id"]: r["vllm_version"] for r in csv.DictReader(io.StringIO(buf.getvalue()))} == {
        r34.run_id: "0.34.0", r19.run_id: "0.19.0"}
