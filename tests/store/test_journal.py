"""The journal of runs under way: an entry whose process is gone becomes an ``interrupted`` run
at the next write, once; a line its process left cut short is left out; an entry whose process
lives is left alone; runs of built-in stages alone are not journaled."""

from __future__ import annotations

import os
import time

from enginecfg.pipeline import events
from enginecfg.store import AuditStore
from enginecfg.store.journal import RunJournal, entry_header, journal_dir
from enginecfg.store.rows import Identity
from enginecfg.testing import emit_run

WHO = Identity(host="host-7", pid=4711, version="0.1.0", os_user="ops", actor="ci")


def _started(run_id: str) -> events.RunStarted:
    return events.RunStarted(run_id=run_id, started_at=time.time(), model="/models/m",
                             architecture="A", engine_args={}, input_config={"x": 1},
                             input_fingerprint="f", stages=("pooling", "site-policy", "impact"),
                             vllm_version="0.34.0", origins=("built-in", "site 1.0", "built-in"))


def _journal_of_a_gone_process(url: str, run_id: str, *, cut: bytes = b"") -> None:
    """An entry as a process leaves it when it ends in a plugin's stage: written, never
    removed, its lock released (here by closing the only descriptor that held it)."""
    journal = RunJournal(journal_dir(url))
    journal.begin(run_id, entry_header(_started(run_id), WHO))
    journal.note(run_id, "stage_started", events.StageStarted(run_id=run_id, stage="site-policy",
                                                               order=1, origin="site 1.0"))
    journal.note(run_id, "config_changed", events.ConfigChanged(
        run_id=run_id, seq=1, stage="site-policy", field="scheduler_config.max_num_seqs",
        old=None, new=64, reason="site policy"))
    entry = journal._entries.pop(run_id)
    if cut:
        os.write(entry.fd, cut)
    os.close(entry.fd)


def test_an_entry_of_a_gone_process_is_recorded_once_as_interrupted(db_url):
    _journal_of_a_gone_process(db_url, "a" * 32, cut=b'{"kind": "config_changed", "ev')
    with AuditStore(db_url).attach() as store:
        emit_run()
        emit_run()
    assert store.recovered == 1 and store.recovery_failed == 0
    lost = store.get_run("a" * 32)
    assert (lost["status"], lost["failed_stage"], lost["position"]) == ("interrupted", "site-policy", 1)
    assert (lost["host"], lost["pid"], lost["actor"], lost["vllm_version"]) == ("host-7", 4711, "ci", "0.34.0")
    assert [(c["field"], c["new"]) for c in lost["changes"]] == [("scheduler_config.max_num_seqs", 64)]
    assert "while stage 'site-policy' (site 1.0) ran" in lost["error"]["message"]
    assert list(journal_dir(db_url).iterdir()) == []
    with AuditStore(db_url).attach() as again:
        emit_run()
    assert again.recovered == 0 and len(again.list_runs()) == 4
    assert again.verify().ok
    again.close()
    store.close()


def test_a_run_recorded_before_its_entry_went_is_not_recorded_twice(db_url):
    with AuditStore(db_url).attach() as store:
        rid = emit_run()
    _journal_of_a_gone_process(db_url, rid)
    with AuditStore(db_url).attach() as again:
        emit_run()
    assert again.recovered == 0 and len(again.list_runs()) == 2
    assert list(journal_dir(db_url).iterdir()) == []
    again.close()
    store.close()


def test_an_entry_whose_process_lives_is_left_alone(db_url):
    journal = RunJournal(journal_dir(db_url))
    journal.begin("b" * 32, entry_header(_started("b" * 32), WHO))  # held by this process
    with AuditStore(db_url).attach() as store:
        emit_run()
    assert store.recovered == 0 and [r["run_id"] for r in store.list_runs()] != ["b" * 32]
    journal.end("b" * 32)
    assert list(journal_dir(db_url).iterdir()) == []
    store.close()


def test_runs_of_built_in_stages_alone_are_not_journaled(tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(url).attach() as store:
        emit_run()  # the synthetic runs name no plugin stage
    assert not journal_dir(url).exists()
    store.close()
