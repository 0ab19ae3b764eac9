"""The store as a bus subscriber: one transaction per run, nothing half-written, never
raising into the pipeline, append-only tables."""

from __future__ import annotations

import gc
import math
import weakref

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from enginecfg.pipeline import events
from enginecfg.store import AuditStore
from enginecfg.testing import emit_run
from enginecfg.store.models import Change, Message, Run, StageExecution, ValidationCheck


def _count(store, model) -> int:
    with store.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(model)).scalar_one()


def test_a_finished_run_is_recorded_whole(store):
    rid = emit_run(block_size=16, checks=2)
    assert store.recorded == 1 and store.write_failed == 0
    run = store.get_run(rid)
    assert run["status"] == "resolved"
    assert run["position"] == 1
    assert [s["stage"] for s in run["stages"]] == run["planned_stages"]
    assert run["stages"][1]["outcome"] == "changed" and run["stages"][1]["n_changes"] == 3
    assert [c["seq"] for c in run["changes"]] == [1, 2, 3, 4, 5]
    last = run["changes"][-1]
    assert (last["stage"], last["field"], last["old"], last["new"]) == (
        "hybrid-alignment", "cache_config.block_size", 16, 1056)
    assert last["reason"].startswith("Setting attention block size to 1056")
    assert [m["level"] for m in run["messages"]] == ["WARNING", "INFO"]
    assert len(run["validation_checks"]) == 2 and run["validation_checks"][0]["passed"] is True
    assert run["result"]["config"]["cache_config"]["block_size"] == 1056
    assert run["engine_args"] == {"block_size": 16}
    assert run["input_config"]["cache_config"]["block_size"] == 16
    assert run["result_fingerprint"] == run["result"]["fingerprint"]
    assert run["pid"] > 0 and run["host"] and run["enginecfg_version"]


@pytest.mark.parametrize("status", ["rejected", "invalid"])
def test_a_failed_run_is_recorded_with_status_and_error(store, status):
    rid = emit_run(fail=status)
    run = store.get_run(rid)
    assert run["status"] == status
    assert run["error"]["field"] == "cache_config.mamba_block_size"
    assert run["failed_stage"] == "vllm-checks"
    assert run["stages"][-1]["outcome"] == "failed"
    assert store.list_runs(status=status)[0]["run_id"] == rid


def test_a_run_that_never_finishes_leaves_nothing(store):
    rid = emit_run(stop_after_changes=True)
    assert rid in store.pending_runs
    for model in (Run, StageExecution, Change, Message):
        assert _count(store, model) == 0
    assert store.verify().ok


def test_events_of_runs_the_store_did_not_see_start_are_ignored(store):
    events.config_changed.send("nobody", event=events.ConfigChanged(
        run_id="nobody", seq=1, stage="s", field="cache_config.block_size", old=1, new=2,
        reason="r"))
    events.run_finished.send("nobody", event=events.RunFinished(
        run_id="nobody", finished_at=0.0, status="resolved", document={}, fingerprint="x"))
    assert store.recorded == 0 and _count(store, Run) == 0


def test_detach_stops_recording_and_context_manager_detaches(db_url):
    store = AuditStore(db_url)
    with store.attach():
        emit_run()
    emit_run()
    assert store.recorded == 1
    store.attach()
    emit_run()
    store.detach()
    emit_run()
    assert store.recorded == 2 and _count(store, Run) == 2
    store.close()


def test_receivers_are_held_strongly(db_url):
    AuditStore(db_url).attach()   # no reference kept by the caller
    gc.collect()
    rid = emit_run()
    reader = AuditStore(db_url)
    assert reader.get_run(rid)["run_id"] == rid
    # clean up the anonymous store
    for receiver in list(events.run_finished.receivers.values()):
        owner = getattr(receiver, "__self__", None)
        if isinstance(owner, AuditStore):
            owner.close()
    reader.close()


def test_two_stores_record_into_two_databases(db_url, tmp_path):
    other = AuditStore(f"sqlite:///{tmp_path / 'other.db'}").attach()
    with AuditStore(db_url).attach() as store:
        rid = emit_run()
    assert store.get_run(rid)["run_id"] == other.get_run(rid)["run_id"] == rid
    other.close()
    store.close()


def test_json_values_round_trip_exactly_including_non_finite(store):
    rid = uid = "f" * 32
    events.run_started.send(rid, event=events.RunStarted(
        run_id=rid, started_at=1.0e9 + 0.123456789, model="<dict>", architecture=None,
        engine_args={"dtype": "auto", "tp": [1, 2]}, input_config={"x": {"nan": math.nan,
                                                                           "inf": math.inf}},
        input_fingerprint="fp", stages=("a",)))
    values = [None, 0, -1.5e-300, 1e308, math.inf, -math.inf, [1, "two", None],
              {"nested": {"k": [True, False]}}, "text with 'quotes' and \"dq\" and ünïcode",
              {"$float": "not a tag"}, {"$float": "inf"}, {"$esc": {"$float": "nan"}},
              {"$float": "inf", "other": 1}]
    for i, v in enumerate(values, start=1):
        events.config_changed.send(rid, event=events.ConfigChanged(
            run_id=rid, seq=i, stage="a", field=f"s.f{i}", old=v, new=[v], reason="r"))
    events.run_finished.send(rid, event=events.RunFinished(
        run_id=rid, finished_at=1.0e9 + 1, status="resolved",
        document={"config": {"s": {"x": math.inf}}}, fingerprint="fp2"))
    assert store.write_failed == 0, store.record_error
    run = store.get_run(uid)
    assert [c["old"] for c in run["changes"]] == values
    assert run["input_config"]["x"]["inf"] == math.inf
    assert math.isnan(run["input_config"]["x"]["nan"])
    assert run["result"]["config"]["s"]["x"] == math.inf
    assert run["architecture"] is None
    assert store.verify().ok


def test_architecture_falls_back_to_the_result_document(store):
    rid = emit_run(architecture=None)
    assert store.get_run(rid)["architecture"] == "Qwen3NextForCausalLM"


def test_write_failure_never_raises_into_the_pipeline(db_url, tmp_path):
    # a read-only SQLite file, and a server that is not there
    seed = AuditStore(f"sqlite:///{tmp_path / 'ro.db'}")
    seed.verify()
    seed.close()
    for url in (f"sqlite:///file:{tmp_path / 'ro.db'}?mode=ro&uri=true",
                "postgresql+psycopg://nobody:x@127.0.0.1:1/none?connect_timeout=2"):
        store = AuditStore(url).attach()
        rid = emit_run()             # must not raise
        assert store.recorded == 0 and store.write_failed == 1
        assert store.write_failures[0].run_id == rid
        assert store.last_error is not None
        assert rid in store.record_error and "\n" not in store.record_error
        emit_run()
        assert store.write_failed == 2
        store.close()


def test_duplicate_run_id_is_a_recorded_failure_not_a_crash(store):
    emit_run(run_id="a" * 32)
    emit_run(run_id="a" * 32)
    assert store.recorded == 1 and store.write_failed == 1
    assert store.verify().ok


@pytest.mark.parametrize("table", ["runs", "stage_executions", "changes", "messages",
                                   "validation_checks"])
def test_triggers_refuse_update_and_delete(store, table):
    emit_run(checks=1)
    for stmt in (f"UPDATE {table} SET run_id = run_id" if table != "runs"
                 else "UPDATE runs SET status = 'resolved'",
                 f"DELETE FROM {table}"):
        with pytest.raises(DBAPIError, match="append-only"):
            with store.engine.begin() as conn:
                conn.execute(text(stmt))
    assert store.verify().ok


def test_chain_head_cannot_be_deleted(store):
    with pytest.raises(DBAPIError, match="append-only"):
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM chain_head"))


def test_postgresql_refuses_truncate(store):
    if store.engine.dialect.name != "postgresql":
        pytest.skip("TRUNCATE is a PostgreSQL statement")
    emit_run()
    with pytest.raises(DBAPIError, match="append-only"):
        with store.engine.begin() as conn:
            conn.execute(text("TRUNCATE changes"))


def test_chain_positions_follow_recording_order(store):
    ids = [emit_run() for _ in range(5)]
    with store.engine.connect() as conn:
        rows = conn.execute(select(Run.id, Run.chain_pos, Run.prev_hash, Run.row_hash)
                            .order_by(Run.chain_pos)).all()
    assert [r.id for r in rows] == ids
    assert [r.chain_pos for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0].prev_hash == "0" * 64
    assert all(b.prev_hash == a.row_hash for a, b in zip(rows, rows[1:]))


def test_validation_checks_nan_error_is_stored_as_null(store):
    rid = "c" * 32
    events.run_started.send(rid, event=events.RunStarted(
        run_id=rid, started_at=1.0, model="m", architecture="A", engine_args={},
        input_config={}, input_fingerprint="f", stages=("gpu-validation",)))
    events.validation_checked.send(rid, event=events.ValidationChecked(
        run_id=rid, check="c", kernel="k", shapes={"a": [1]}, dtype="float16",
        max_error=math.nan, tolerance=1e-3, passed=False, device="cpu", seconds=0.5,
        detail="diverged"))
    events.run_failed.send(rid, event=events.RunFailed(
        run_id=rid, finished_at=2.0, status="rejected",
        error={"type": "ConfigRejectedError", "message": "kernel mismatch", "field": None},
        stage="gpu-validation", document={}))
    check = store.get_run(rid)["validation_checks"][0]
    assert check["max_error"] is None and check["passed"] is False
    assert _count(store, ValidationCheck) == 1
    assert store.verify().ok
