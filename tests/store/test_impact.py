"""The KV-cache impact of a run in the audit store: stored, diffed, followed, verified."""

from __future__ import annotations

from sqlalchemy import text
from support import CONFIGS

from enginecfg import EngineConfig, Pipeline

from .conftest import drop_triggers

QWEN = CONFIGS / "qwen3.5-27b"


def _run(**args):
    return Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(QWEN, **args))


def test_impact_is_stored_diffed_and_followed(store):
    a = _run()
    b = _run(kv_cache_dtype="fp8")
    ra, rb = store.get_run(a.run_id), store.get_run(b.run_id)
    assert ra["result"]["impact"] == a.to_dict()["impact"]
    assert ra["kv_tokens"] == a.impact.kv_tokens > 0
    assert rb["max_concurrency"] == b.impact.max_concurrency
    # fp8 halves the attention page: more blocks, more tokens, more concurrent requests
    assert rb["kv_tokens"] > ra["kv_tokens"]

    diff = {d["field"]: d for d in store.diff_runs(a.run_id, b.run_id)["differences"]}
    assert diff["engine_args.kv_cache_dtype"]["b"] == "fp8"
    assert diff["impact.kv_tokens"]["a"] == ra["kv_tokens"]
    assert diff["impact.kv_tokens"]["b"] == rb["kv_tokens"]
    assert "impact.max_concurrency" in diff and "impact.concurrency.8192" in diff
    # the groups are opened by index: the attention group's block doubled, its dtype changed
    attn = len(ra["result"]["impact"]["groups"]) - 1
    assert diff[f"impact.groups.{attn}.block_size"]["b"] == 2 * diff[f"impact.groups.{attn}.block_size"]["a"]
    assert "impact.groups.0.block_size" not in diff  # the Mamba groups did not move

    hist = store.field_history("impact.max_concurrency", model="qwen3.5-27b")
    assert [h["run_id"] for h in hist] == [b.run_id, a.run_id]
    assert [h["value"] for h in hist] == [rb["max_concurrency"], ra["max_concurrency"]]
    assert store.verify().ok


def test_verify_notices_an_edited_impact_column(store):
    r = _run()
    with store.engine.begin() as conn:
        drop_triggers(conn)
        conn.execute(text("UPDATE runs SET kv_tokens = kv_tokens * 2 WHERE id = :i"), {"i": r.run_id})
    result = store.verify()
    assert not result.ok
    assert any("impact columns" in p.message for p in result.problems)


def test_migration_0003_impact_adds_and_removes_the_columns(db_url):
    from sqlalchemy import inspect

    from enginecfg.store import engine as eng

    engine = eng.make_engine(db_url)
    try:
        eng.upgrade(engine)
        cols = {c["name"] for c in inspect(engine).get_columns("runs")}
        assert {"kv_tokens", "max_concurrency", "max_model_len_fits"} <= cols
        eng.downgrade(engine, "0003_sources")
        cols = {c["name"] for c in inspect(engine).get_columns("runs")}
        assert not ({"kv_tokens", "max_concurrency", "max_model_len_fits"} & cols)
        eng.upgrade(engine)
        assert eng.current_revision(engine) == eng.head_revision()
    finally:
        engine.dispose()


def _publish(run_id: str, impact: dict) -> None:
    import time

    from enginecfg.pipeline import events
    from enginecfg.testing import base_config

    cfg = base_config()
    events.run_started.send(run_id, event=events.RunStarted(
        run_id=run_id, started_at=time.time(), model="/models/m", architecture="A", engine_args={},
        input_config=cfg, input_fingerprint="f" * 64, stages=()))
    doc = {"status": "resolved", "config": cfg, "impact": impact, "fingerprint": "e" * 64}
    events.run_finished.send(run_id, event=events.RunFinished(
        run_id=run_id, finished_at=time.time(), status="resolved", document=doc,
        fingerprint="e" * 64))


def test_figures_the_columns_cannot_hold_keep_the_run_and_verify(store):
    """A NaN, an infinite count, a count past 64 bits, a number past a double: the run is
    recorded, its result keeps the figure, its column is NULL, and verify calls it intact
    (before: the first three kept the run out of the store; a NaN concurrency was stored
    and then reported as an edited run on every verify)."""
    import math

    cases = {
        "1" * 32: ({"kv_tokens": 2 ** 70}, {"kv_tokens": None}),
        "2" * 32: ({"kv_tokens": math.inf, "max_model_len_fits": math.nan}, {"kv_tokens": None, "max_model_len_fits": None}),
        "3" * 32: ({"max_concurrency": math.nan}, {"max_concurrency": None}),
        "4" * 32: ({"max_concurrency": 10 ** 400}, {"max_concurrency": None}),
        "5" * 32: ({"max_concurrency": math.inf, "kv_tokens": 2 ** 63 - 1}, {"max_concurrency": math.inf, "kv_tokens": 2 ** 63 - 1}),
    }
    for run_id, (impact, _) in cases.items():
        _publish(run_id, impact)
    assert store.write_failed == 0, store.record_error
    assert store.recorded == len(cases)
    for run_id, (impact, columns) in cases.items():
        with store.engine.connect() as conn:
            held = conn.execute(text("SELECT kv_tokens, max_concurrency, max_model_len_fits "
                                     "FROM runs WHERE id = :id"), {"id": run_id}).one()._asdict()
        for key, value in columns.items():
            assert held[key] == value, (run_id, key, held[key])
        stored = store.get_run(run_id)["result"]["impact"]
        assert set(stored) == set(impact)
        for key, value in impact.items():  # the document keeps the exact figure
            assert stored[key] == value or (math.isnan(stored[key]) and math.isnan(value))
    report = store.verify()
    assert report.ok and report.runs_checked == len(cases), report


def test_a_nan_concurrency_held_in_its_column_before_still_verifies(store, monkeypatch):
    """Runs recorded before a NaN figure projected to NULL hold NaN in the column on
    PostgreSQL (SQLite turns it into NULL itself): the same figure, so not an edit."""
    import math

    from enginecfg.store import rows

    real = rows.impact_columns
    with monkeypatch.context() as m:  # the writer as it was: the NaN into the column
        m.setattr(rows, "impact_columns", lambda doc: {**real(doc), "max_concurrency": math.nan})
        _publish("6" * 32, {"max_concurrency": math.nan, "kv_tokens": 5})
    assert store.write_failed == 0, store.record_error
    report = store.verify()
    assert report.ok, report
    # an edit is still an edit
    with store.engine.begin() as conn:
        drop_triggers(conn)
        conn.execute(text("UPDATE runs SET max_concurrency = 2.5 WHERE id = :id"), {"id": "6" * 32})
    assert not store.verify().ok


def test_the_memory_a_run_assumed_is_stored_and_queryable(store):
    """``--gpu-memory-utilization 0.6`` stores the 0.6 figures, and what each figure assumed
    (GPU, its memory, utilization, KV bytes, override, whether vLLM starts) is in columns (at 0.5
    the profiling run's peak leaves Qwen3.5-27B too little for one request of max_model_len)."""
    half = Pipeline(gpu_validation="off", impact={"gpu_memory_utilization": 0.6}).run(
        EngineConfig.from_pretrained(QWEN))
    small = Pipeline(gpu_validation="off", impact={"gpu": "A100-40GB"}).run(EngineConfig.from_pretrained(QWEN))
    fixed = Pipeline(gpu_validation="off", impact={"kv_cache_memory_bytes": 20 * 2**30,
                                                   "num_gpu_blocks_override": 300}).run(
        EngineConfig.from_pretrained(QWEN))
    default = _run()
    assert half.impact.kv_tokens < default.impact.kv_tokens
    r = store.get_run(half.run_id)
    assert r["kv_tokens"] == half.impact.kv_tokens and r["max_concurrency"] == half.impact.max_concurrency
    assert (r["gpu"], r["gpu_memory_bytes"], r["gpu_memory_utilization"]) == ("H200", 150_109_880_320, 0.6)
    assert r["kv_cache_memory"] == half.impact.memory.kv_cache_memory and r["starts"] is True
    assert r["kv_cache_memory_bytes"] is None and r["num_gpu_blocks_override"] is None
    r = store.get_run(small.run_id)
    assert (r["gpu"], r["starts"], r["kv_cache_memory"]) == ("A100-40GB", False, 0)
    assert r["result"]["impact"]["start_error"].startswith("ValueError: No available memory")
    r = store.get_run(fixed.run_id)
    assert (r["kv_cache_memory_bytes"], r["num_gpu_blocks_override"], r["kv_cache_memory"]) == (
        20 * 2**30, 300, 20 * 2**30)
    listed = {x["run_id"]: x for x in store.list_runs()}
    assert listed[small.run_id]["starts"] is False and listed[small.run_id]["gpu"] == "A100-40GB"
    # history, why and diff take the figures
    hist = store.field_history("impact.memory.gpu_memory_utilization")
    assert [h["value"] for h in hist] == [0.9, 0.9, 0.9, 0.6]
    assert [h["value"] for h in store.field_history("impact.starts")] == [True, True, False, True]
    assert store.field_history("impact.concurrency.8192")[0]["value"] == default.impact.concurrency[8192]
    assert store.field_history("impact.groups.3.block_size")[0]["value"] == 784
    why = store.why(half.run_id, "impact.kv_tokens")
    assert why["found"] and why["fact"] and why["final"] == half.impact.kv_tokens and why["changes"] == []
    store.check_field("impact.max_concurrency")
    store.check_field("impact.memory.gpu")
    diff = {d["field"]: d for d in store.diff_runs(half.run_id, default.run_id)["differences"]}
    assert diff["impact.memory.gpu_memory_utilization"]["a"] == 0.6
    assert store.verify().ok


def test_verify_notices_an_edited_memory_column(store):
    r = _run()
    with store.engine.begin() as conn:
        drop_triggers(conn)
        conn.execute(text("UPDATE runs SET gpu_memory_utilization = 0.5 WHERE id = :i"), {"i": r.run_id})
    result = store.verify()
    assert not result.ok


def test_migration_0009_adds_and_removes_the_memory_columns(db_url):
    from sqlalchemy import inspect

    from enginecfg.store import engine as eng

    names = {"gpu", "gpu_memory_bytes", "gpu_memory_utilization", "kv_cache_memory", "kv_cache_memory_bytes",
             "num_gpu_blocks_override", "starts"}
    engine = eng.make_engine(db_url)
    try:
        eng.upgrade(engine)
        assert names <= {c["name"] for c in inspect(engine).get_columns("runs")}
        eng.downgrade(engine, "0008_store_record")
        assert not (names & {c["name"] for c in inspect(engine).get_columns("runs")})
        eng.upgrade(engine)
        assert eng.current_revision(engine) == eng.head_revision()
    finally:
        engine.dispose()


def test_runs_recorded_before_the_memory_columns_still_verify(store, monkeypatch):
    """A run hashed with layout 2 (before revision 0009) holds NULL in the memory columns,
    and its figures in the hashed result: not an edit."""
    from enginecfg.store import hashing, rows

    real = rows.memory_columns
    with monkeypatch.context() as m:  # the writer as it was before revision 0009
        m.setattr(hashing, "LAYOUT_STEPS", hashing.LAYOUT_STEPS[:2])
        m.setattr(rows, "memory_columns", lambda doc: dict.fromkeys(real(doc)))
        old = _run()
    assert store.get_run(old.run_id)["hash_layout"] == 2 and store.get_run(old.run_id)["gpu"] is None
    new = _run()
    assert store.get_run(new.run_id)["hash_layout"] == hashing.current_layout() >= 3
    assert store.verify().ok


def test_the_memory_budget_and_its_range_are_recorded_and_followed(store):
    """The budget's parts and the KV figures over its range are in the hashed result: ``history``,
    ``why`` and ``diff`` take them as they take the other figures."""
    a = _run()
    b = Pipeline(gpu_validation="off", impact={"estimate_cudagraphs": True}).run(EngineConfig.from_pretrained(QWEN))
    ra = store.get_run(a.run_id)
    memory = ra["result"]["impact"]["memory"]
    assert [p["name"] for p in memory["parts"]] == ["weights", "activation_peak", "non_torch", "cuda_graphs"]
    assert memory["kv_cache_memory_low"] < memory["kv_cache_memory"] < memory["kv_cache_memory_high"]
    assert ra["result"]["impact"]["kv_range"]["kv_tokens"] == list(a.impact.kv_range.kv_tokens)
    hist = store.field_history("impact.memory.kv_cache_memory_low")
    assert [h["value"] for h in hist] == [b.impact.memory.kv_cache_memory_low, a.impact.memory.kv_cache_memory_low]
    store.check_field("impact.kv_range.kv_tokens")
    diff = {d["field"]: d for d in store.diff_runs(a.run_id, b.run_id)["differences"]}
    assert diff["impact.memory.parts.3.subtracted"] == {**diff["impact.memory.parts.3.subtracted"], "a": False, "b": True}
    assert store.verify().ok
