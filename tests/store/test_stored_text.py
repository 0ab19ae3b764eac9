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
from enginecfg.pipeline.canonical import canonical_json
from enginecfg.store import AuditStore
from enginecfg.store.hashing import PreparedRunHash, canonical, child_hash, run_hash
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


def test_storable_text_escapes_only_lone_surrogates():
    assert storable_text("/models/" + LATIN1_FOLDER) == "/models/caf\\udce9-7b"
    assert storable_text(LONE) == "Qwen\\ud800ForCausalLM"
    assert storable_text(NUL) == "gemma\\u0000"
    assert storable_text("\x00" + LATIN1_FOLDER) == "\\u0000caf\\udce9-7b"
    for text in ("plain", "é ∞ 模型", "a\\ud800 literal", ""):
        assert storable_text(text) is text


def _publish(run_id: str, model: str) -> dict:
    """One run whose every kind of text holds a lone surrogate: the model path, the
    architecture, a changed field, a reason, a message, the input and result documents."""
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
    events.warning_issued.send(run_id, event=events.WarningIssued(
        run_id=run_id, seq=1, stage="defaults", level="WARNING", message=f"{LONE} is not known"))
    events.warning_issued.send(run_id, event=events.WarningIssued(
        run_id=run_id, seq=2, stage="defaults", level="INFO", message=f"model type {NUL!s}"))
    events.stage_finished.send(run_id, event=events.StageFinished(
        run_id=run_id, stage="defaults", order=0, outcome="changed", duration_s=0.001, changes=1,
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
        [change] = row["changes"]
        assert change["field"] == "hf_config.caf\\udce9-7b"
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
        assert store.why(row["run_id"], "hf_config." + LATIN1_FOLDER)["changes"][0]["new"] == LATIN1_FOLDER
        assert {before, after} <= {r["run_id"] for r in store.list_runs()}
    finally:
        store.close()


def test_hashes_of_texts_without_lone_surrogates_are_unchanged():
    """Every hash already stored stays valid: valid text is hashed as its plain UTF-8."""
    row = {"run_id": "r1", "seq": 1, "stage": "defaults", "field": "cache_config.block_size",
           "old": None, "new": 16, "reason": "défaut ∞", "level": "INFO", "via": None}
    text = canonical_json({"table": "changes", **row}, ascii_only=False)
    assert child_hash("changes", row) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert canonical({"a": "模型"}) == '{"a":"模型"}'.encode("utf-8")


def test_a_lone_surrogate_is_hashed_as_its_escape_and_cannot_pass_for_other_text():
    run = {"id": "r1", "model": "/models/" + LATIN1_FOLDER, "architecture": LONE,
           "input_config": {"x": LONE}, "hash_layout": 1, "chain_pos": 3, "prev_hash": "a" * 64,
           "recorded_at": 5.0}
    children = {"changes": ["b" * 64]}
    assert b'"Qwen\\ud800ForCausalLM"' in canonical(LONE)
    # the run's hash in two steps (the writer's way) equals the one-step hash (verify's way)
    prepared = PreparedRunHash(run, children)
    assert prepared.finish(chain_pos=3, prev_hash="a" * 64, recorded_at=5.0) == run_hash(run, children)
    # a text that spells the escape literally is another text, with another hash
    literal = dict(run, architecture="Qwen\\ud800ForCausalLM")
    assert run_hash(literal, children) != run_hash(run, children)


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
