"""Queries: filters, prefixes, history, why, diff, export; user text is data, never SQL."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.store import AmbiguousRunError, UnknownRunError
from enginecfg.testing import emit_run


@pytest.fixture
def runs(store):
    a = emit_run(model="/models/alpha", final_block_size=1056)
    time.sleep(0.01)
    b = emit_run(model="/models/beta", architecture="MambaForCausalLM", block_size=16,
                 final_block_size=2048)
    time.sleep(0.01)
    c = emit_run(model="/models/alpha", fail="rejected")
    return store, a, b, c


def test_list_runs_newest_first_and_filters(runs):
    store, a, b, c = runs
    assert [r["run_id"] for r in store.list_runs()] == [c, b, a]
    assert [r["run_id"] for r in store.list_runs(model="/models/alpha")] == [c, a]
    assert [r["run_id"] for r in store.list_runs(model="alpha")] == [c, a]
    assert [r["run_id"] for r in store.list_runs(architecture="MambaForCausalLM")] == [b]
    assert [r["run_id"] for r in store.list_runs(status="rejected")] == [c]
    assert [r["run_id"] for r in store.list_runs(limit=1)] == [c]
    t_b = store.get_run(b)
    import datetime as dt

    # ISO times are rounded to microseconds: step back 1 ms (runs are 10 ms apart)
    since = dt.datetime.fromisoformat(t_b["started_at"]) - dt.timedelta(milliseconds=1)
    assert [r["run_id"] for r in store.list_runs(since=since)] == [c, b]
    assert [r["run_id"] for r in store.list_runs(until=since)] == [a]
    assert store.list_runs(since=time.time() + 3600) == []
    assert store.list_runs()[0]["error"].startswith("--mamba-block-size")


def test_user_text_is_data_not_sql(runs):
    store, a, b, c = runs
    for evil in ("' OR 1=1 --", "%", "_", "alpha%", "x'; DROP TABLE runs; --"):
        assert store.list_runs(model=evil) == []
        assert store.list_runs(architecture=evil) == []
        with pytest.raises(UnknownRunError):
            store.get_run(evil)
        assert store.field_history(evil) == []
    assert len(store.list_runs()) == 3


def test_get_run_by_unique_prefix_and_errors(runs):
    store, a, b, c = runs
    assert store.get_run(a[:10])["run_id"] == a
    with pytest.raises(UnknownRunError, match="no stored run"):
        store.get_run("0" * 32)
    with pytest.raises(UnknownRunError):
        store.get_run("")
    emit_run(run_id="abc123" + "0" * 26)
    emit_run(run_id="abc123" + "1" * 26)
    with pytest.raises(AmbiguousRunError, match="several runs"):
        store.get_run("abc123")
    assert issubclass(AmbiguousRunError, InvalidInputError)


def test_field_history_newest_first_with_stage_and_reason(runs):
    store, a, b, c = runs
    h = store.field_history("cache_config.block_size")
    assert [e["run_id"] for e in h] == [c, b, a]
    assert [e["value"] for e in h] == [1056, 2048, 1056]
    last = h[1]["changes"][-1]
    assert (last["stage"], last["old"], last["new"]) == ("hybrid-alignment", 16, 2048)
    assert "2048 tokens" in last["reason"]
    assert [e["run_id"] for e in store.field_history("cache_config.block_size",
                                                     model="beta")] == [b]
    assert len(store.field_history("cache_config.block_size", limit=2)) == 2
    # a field no stage changed still has a value in every run
    tp = store.field_history("parallel_config.tensor_parallel_size")
    assert [e["value"] for e in tp] == [1, 1, 1] and not any(e["changed"] for e in tp)
    assert store.field_history("parallel_config.tensor_parallel_size", changed_only=True) == []
    assert store.field_history("no_such.field") == []


def test_why_gives_initial_changes_and_final(runs):
    store, a, b, c = runs
    w = store.why(b, "cache_config.block_size")
    assert (w["initial"], w["final"], w["found"]) == (16, 2048, True)
    assert [(x["stage"], x["new"]) for x in w["changes"]] == [("engine-defaults", 16),
                                                               ("hybrid-alignment", 2048)]
    sect = store.why(b, "cache_config")   # a section: every change under it
    assert {x["field"] for x in sect["changes"]} == {
        "cache_config.block_size", "cache_config.enable_prefix_caching",
        "cache_config.mamba_cache_mode"}
    untouched = store.why(a, "parallel_config.tensor_parallel_size")
    assert (untouched["initial"], untouched["final"], untouched["changes"]) == (1, 1, [])
    assert store.why(a, "nope.nothing")["found"] is False


def test_diff_runs(runs):
    store, a, b, c = runs
    d = store.diff_runs(a, b[:8])
    assert (d["a"], d["b"]) == (a, b)
    by = {x["field"]: x for x in d["differences"]}
    assert (by["cache_config.block_size"]["a"], by["cache_config.block_size"]["b"]) == (1056, 2048)
    assert by["model"]["b"] == "/models/beta"
    assert by["engine_args.block_size"]["only_in"] == "b"
    assert "parallel_config.tensor_parallel_size" not in by
    assert store.diff_runs(a, a)["differences"] == []


@pytest.mark.parametrize("table", ["runs", "changes", "messages", "stage_executions",
                                   "validation_checks"])
def test_export_jsonl_and_csv(runs, table):
    store = runs[0]
    buf = io.StringIO()
    n = store.export(buf, fmt="jsonl", table=table)
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert len(lines) == n
    if table == "runs":
        assert n == 3 and [r["chain_pos"] for r in lines] == [1, 2, 3]
    if table == "changes":
        assert n == 15 and lines[0]["row_hash"]
    buf = io.StringIO()
    assert store.export(buf, fmt="csv", table=table) == n
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert len(rows) == n
    if table == "changes":
        assert json.loads(rows[0]["new"]) in (True, 16, "align", 1056, 2048)


def test_an_export_as_csv_escapes_stored_text(store):
    """A stored text with line ends, controls and a formula comes out one line, escaped and
    marked (the rule of ``jsonvalue.csv_cell``)."""
    emit_run(model='=HYPERLINK("x")\n/models/\x1bevil\ttab\\')
    buf = io.StringIO()
    assert store.export(buf, fmt="csv", table="runs") == 1
    assert len(buf.getvalue().splitlines()) == 2
    [row] = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert row["model"] == "'=HYPERLINK(\"x\")\\x0a/models/\\x1bevil\\x09tab\\\\"


def test_export_rejects_unknown_format_and_table(store):
    with pytest.raises(InvalidInputError, match="format"):
        store.export(io.StringIO(), fmt="xml")
    with pytest.raises(InvalidInputError, match="table"):
        store.export(io.StringIO(), table="sqlite_master")


def test_history_pages_read_one_snapshot_while_runs_are_recorded(store, monkeypatch):
    """``field_history`` reads runs newest first, a page at a time: a run recorded between two
    pages must not shift the next page (which repeated a run on PostgreSQL at READ COMMITTED)."""
    from enginecfg.store import queries

    ids = [emit_run(model=f"/models/m{i % 3}") for i in range(205)]  # more than one page
    real = queries._change_dict
    appended: list[str] = []

    def change_then_append(c):
        if not appended:
            appended.append(emit_run(model="/models/new"))  # through the store's own writer
        return real(c)

    monkeypatch.setattr(queries, "_change_dict", change_then_append)
    got = [h["run_id"] for h in store.field_history("cache_config.block_size", limit=None)]
    assert appended
    assert len(got) == len(set(got)), "a run came back twice"
    assert sorted(got) == sorted(ids)
