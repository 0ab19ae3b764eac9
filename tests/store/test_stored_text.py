"""Text a database driver cannot send: a lone surrogate, and NUL on PostgreSQL.

Python holds a lone surrogate for a file name's byte that is not UTF-8 (a model folder named
in Latin-1, as ``sys.argv`` and ``os`` functions give it) and for a ``\\udXXX`` escape in a
JSON file; a ``\\u0000`` escape gives NUL, which PostgreSQL's text refuses.  A run that
holds either is recorded all the same (its text columns spell the character as its JSON
escape, on both backends; its JSON documents keep it exactly), its hashes verify, and the
audit commands find it by the text the user gives them.  Before, such a run resolved and
was not recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from enginecfg.pipeline import events
from enginecfg.pipeline.jsonvalue import canonical_json
from enginecfg.store import AuditStore
from enginecfg.store.hashing import PreparedRunHash, canonical, child_hash, child_hashes, run_hash
from enginecfg.store.models import storable_text
from enginecfg.testing import base_config, emit_run
from support import CONFIGS, run_cli

LATIN1_FOLDER = os.fsdecode(b"caf\xe9-7b")  # what a process is given for that folder name
LONE = "Qwen\ud800ForCausalLM"  # json.loads of "Qwen\\ud800ForCausalLM"
NUL = "gemma\x00"  # json.loads of "gemma\\u0000"


def test_the_names_hold_lone_surrogates():
    assert "\udce9" in LATIN1_FOLDER and json.loads('"Qwen\\ud800ForCausalLM"') == LONE
    for text in (LATIN1_FOLDER, LONE):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            continue
        raise AssertionError(f"{text!r} encodes: the tests below would prove nothing")


def test_storable_text_escapes_only_nul_and_lone_surrogates():
    assert storable_text("/models/" + LATIN1_FOLDER) == "/models/caf\\udce9-7b"
    assert storable_text(LONE) == "Qwen\\ud800ForCausalLM"
    assert storable_text(NUL) == "gemma\\u0000"
    assert storable_text("\x00" + LATIN1_FOLDER) == "\\u0000caf\\udce9-7b"
    for text in ("plain", "é ∞ 模型", "a\\ud800 literal", ""):
        assert storable_text(text) is text


def _publish(run_id: str, model: str) -> dict:
    """One run whose every kind of text holds a lone surrogate or NUL: the model path, the
    architecture, changed fields, a reason, messages, the input and result documents."""
    cfg = base_config()
    cfg["model_config"]["architecture"] = LONE
    cfg["hf_config"][LATIN1_FOLDER] = LONE
    events.run_started.send(run_id, event=events.RunStarted(
        run_id=run_id, started_at=time.time(), model=model, architecture=LONE,
        engine_args={"served_model_name": LATIN1_FOLDER}, input_config=json.loads(json.dumps(cfg)),
        input_fingerprint="f" * 64, stages=("defaults",)))
    events.stage_started.send(run_id, event=events.StageStarted(
        run_id=run_id, stage="defaults", order=0, origin="built-in"))
    events.config_changed.send(run_id, event=events.ConfigChanged(
        run_id=run_id, seq=1, stage="defaults", field="hf_config." + LATIN1_FOLDER, old=LONE,
        new=LATIN1_FOLDER, reason=f"renamed for {model}", level="INFO"))
    events.config_changed.send(run_id, event=events.ConfigChanged(  # in no document
        run_id=run_id, seq=2, stage="defaults", field="hf_config.x" + NUL, old=1, new=2,
        reason="only the change knows it", level="INFO"))
    events.warning_issued.send(run_id, event=events.WarningIssued(
        run_id=run_id, seq=1, stage="defaults", level="WARNING", message=f"{LONE} is not known"))
    events.warning_issued.send(run_id, event=events.WarningIssued(
        run_id=run_id, seq=2, stage="defaults", level="INFO", message=f"model type {NUL!s}"))
    events.stage_finished.send(run_id, event=events.StageFinished(
        run_id=run_id, stage="defaults", order=0, outcome="changed", duration_s=0.001, changes=2,
        error=None))
    cfg["hf_config"][LATIN1_FOLDER] = LATIN1_FOLDER
    cfg["hf_config"]["model_type"] = NUL
    doc = {"status": "resolved", "run_id": run_id, "model": model, "config": cfg,
           "fingerprint": "e" * 64}
    events.run_finished.send(run_id, event=events.RunFinished(
        run_id=run_id, finished_at=time.time(), status="resolved", document=doc,
        fingerprint=doc["fingerprint"]))
    return doc


def test_a_run_with_lone_surrogates_is_recorded_verifies_and_is_found(db_url):
    store = AuditStore(db_url).attach()
    try:
        model = "/models/" + LATIN1_FOLDER
        before = emit_run(model="/models/plain")
        doc = _publish("0123456789abcdef" * 2, model)
        after = emit_run(model="/models/plain")
        assert store.write_failed == 0, store.record_error
        assert store.recorded == 3

        row = store.get_run("0123456789abcdef" * 2)
        assert row["model"] == "/models/caf\\udce9-7b"
        assert row["architecture"] == "Qwen\\ud800ForCausalLM"
        # the JSON documents hold the very texts
        assert row["input_config"]["model_config"]["architecture"] == LONE
        assert row["result"]["config"]["hf_config"][LATIN1_FOLDER] == LATIN1_FOLDER
        assert row["result"] == doc
        change, only_changed = row["changes"]
        assert change["field"] == "hf_config.caf\\udce9-7b"
        assert only_changed["field"] == "hf_config.xgemma\\u0000"
        assert (change["old"], change["new"]) == (LONE, LATIN1_FOLDER)
        assert change["reason"] == "renamed for /models/caf\\udce9-7b"
        assert row["messages"][0]["message"] == "Qwen\\ud800ForCausalLM is not known"
        assert row["messages"][1]["message"] == "model type gemma\\u0000"
        assert row["result"]["config"]["hf_config"]["model_type"] == NUL

        report = store.verify()
        assert report.ok and report.runs_checked == 3, report

        # found by the text the user gives (as the shell hands it over), not its stored spelling
        assert [r["run_id"] for r in store.list_runs(model=model)] == [row["run_id"]]
        assert [r["run_id"] for r in store.list_runs(model=LATIN1_FOLDER)] == [row["run_id"]]
        assert [r["run_id"] for r in store.list_runs(architecture=LONE)] == [row["run_id"]]
        history = store.field_history("hf_config." + LATIN1_FOLDER, changed_only=True)
        assert [h["run_id"] for h in history] == [row["run_id"]]
        why = store.why(row["run_id"], "hf_config." + LATIN1_FOLDER)
        assert (why["initial"], why["final"], why["changes"][0]["new"]) == (LONE, LATIN1_FOLDER, LATIN1_FOLDER)
        # a field only a change holds: its values come from the change, found as the user types it
        why = store.why(row["run_id"], "hf_config.x" + NUL)
        assert (why["found"], why["initial"], why["final"]) == (True, 1, 2)
        store.check_field("hf_config.x" + NUL)  # `enginecfg history` asks this first
        store.check_field("hf_config." + LATIN1_FOLDER)
        assert {before, after} <= {r["run_id"] for r in store.list_runs()}
    finally:
        store.close()


def test_hashes_of_texts_without_lone_surrogates_are_their_plain_utf8():
    """Every hash already stored stays valid: a text without lone surrogates is hashed as its
    plain UTF-8, the way every hash was computed before, by each of the three ways the store
    hashes (a row, many rows from one encoding, the run in two steps and on the server)."""
    rows = [{"run_id": "r1", "seq": i, "stage": "defaults", "field": "cache_config.block_size",
             "old": None, "new": 16, "reason": f"défaut ∞ {i}", "level": "INFO", "via": None,
             "explanation": f"règle ∞ {i}"} for i in (1, 2, 3)]
    plain = [hashlib.sha256(canonical_json({"table": "changes", **r}, ascii_only=False)
                            .encode("utf-8")).hexdigest() for r in rows]
    assert [child_hash("changes", r) for r in rows] == plain
    assert child_hashes("changes", rows) == plain
    assert canonical({"a": "模型", "b": "a\x00b"}) == '{"a":"模型","b":"a\\u0000b"}'.encode("utf-8")
    run = {"id": "r1", "model": "/models/模型", "architecture": "A", "input_config": {"x": "é"},
           "hash_layout": 1, "chain_pos": 3, "prev_hash": "a" * 64, "recorded_at": 5.0}
    body_hash = run_hash(run, {"changes": plain})
    prepared = PreparedRunHash(run, {"changes": plain})
    assert prepared.finish(chain_pos=3, prev_hash="a" * 64, recorded_at=5.0) == body_hash
    a, b, c = prepared.around_head(recorded_at=5.0)
    assert hashlib.sha256(a + b"3" + b + b"a" * 64 + c).hexdigest() == body_hash


def test_a_lone_surrogate_in_a_json_value_is_hashed_as_its_escape_and_no_other_value_alike():
    run = {"id": "r1", "model": "/models/plain", "architecture": "A",
           "input_config": {"x": LONE}, "hash_layout": 1, "chain_pos": 3, "prev_hash": "a" * 64,
           "recorded_at": 5.0}
    children = {"changes": ["b" * 64]}
    assert canonical(LONE) == b'"Qwen\\ud800ForCausalLM"'
    # the three ways agree: one step (verify), two steps (the writer), on the server
    body_hash = run_hash(run, children)
    prepared = PreparedRunHash(run, children)
    assert prepared.finish(chain_pos=3, prev_hash="a" * 64, recorded_at=5.0) == body_hash
    a, b, c = prepared.around_head(recorded_at=5.0)
    assert hashlib.sha256(a + b"3" + b + b"a" * 64 + c).hexdigest() == body_hash
    # a JSON value that spells the escape literally is another value, with another hash
    literal = dict(run, input_config={"x": "Qwen\\ud800ForCausalLM"})
    assert canonical("Qwen\\ud800ForCausalLM") == b'"Qwen\\\\ud800ForCausalLM"'
    assert run_hash(literal, children) != body_hash


def test_a_literal_escape_and_the_character_are_told_apart_by_the_documents(store):
    """Text columns spell the character as its escape, so a text holding that spelling
    literally is stored alike there: a filter returns both runs, and the JSON documents,
    which keep each text exactly, tell them apart."""
    lone, literal = _publish("a" * 32, "/models/" + LATIN1_FOLDER), _publish("b" * 32, "/models/caf\\udce9-7b")
    assert store.write_failed == 0, store.record_error
    found = {r["run_id"] for r in store.list_runs(model=LATIN1_FOLDER)}
    assert found == {"a" * 32, "b" * 32}
    assert store.get_run("a" * 32)["result"]["model"] == lone["model"] == "/models/" + LATIN1_FOLDER
    assert store.get_run("b" * 32)["result"]["model"] == literal["model"] == "/models/caf\\udce9-7b"
    assert store.verify().ok


def test_a_nul_stored_raw_before_it_was_escaped_is_still_found_on_sqlite(tmp_path, monkeypatch):
    """SQLite stored NUL as it is until it was escaped: those rows still verify, and a
    filter finds them by the text as typed."""
    from enginecfg.store import rows

    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}").attach()
    try:
        with monkeypatch.context() as m:
            m.setattr(rows, "storable_texts", lambda table, rows: None)  # the old writer
            old = emit_run(model="/models/gemma\x00", architecture="Gemma\x00")
        new = emit_run(model="/models/gemma\x00", architecture="Gemma\x00")
        assert store.write_failed == 0, store.record_error
        assert store.get_run(old)["model"] == "/models/gemma\x00"
        assert store.get_run(new)["model"] == "/models/gemma\\u0000"
        assert {r["run_id"] for r in store.list_runs(model="/models/gemma\x00")} == {old, new}
        assert {r["run_id"] for r in store.list_runs(model="gemma\x00")} == {old, new}
        assert {r["run_id"] for r in store.list_runs(architecture="Gemma\x00")} == {old, new}
        assert store.verify().ok
    finally:
        store.close()


def test_cli_records_a_model_folder_whose_name_is_not_utf8(tmp_path, warm_snapshots):
    folder = tmp_path / LATIN1_FOLDER
    folder.mkdir()
    (folder / "config.json").write_bytes((CONFIGS / "qwen3.5-27b" / "config.json").read_bytes())
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    proc = run_cli("run", str(folder), "--gpu-validation", "off", "--db", db)
    assert proc.returncode == 0, proc.stderr
    assert "NOT written" not in proc.stderr
    listed = run_cli("runs", "--model", LATIN1_FOLDER, "--db", db, "--json")
    assert listed.returncode == 0, listed.stderr
    [run] = json.loads(listed.stdout)
    assert run["model"] == storable_text(str(folder))
    assert run_cli("audit", "verify", "--db", db).returncode == 0
