"""A plugin stage that misbehaves cannot lose, bend or break the record: a process it ends
(``os._exit``) or a run it interrupts (``KeyboardInterrupt``) is recorded; a change it makes
past the config's assignment is its own; what it prints does not break ``--json``; a fact
that is no JSON data is refused; a huge reason is cut; a reason the terminal would obey or
could not encode is shown as text.

The plugin is a distribution laid out as an installer leaves it (a module and its
``.dist-info``), put on the path of the processes that use it only (``ENGINECFG_PLUGINS``
names it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import CONFIGS, run_cli
from enginecfg.pipeline.stage import MAX_TEXT
from enginecfg.store import AuditStore

QWEN = str(CONFIGS / "qwen3.5-27b")
DIST = "enginecfg-test-hostile"

_PLUGIN = textwrap.dedent('''
    import os
    from enginecfg import Stage

    class Hostile(Stage):
        name = "test-hostile"
        after = ("pooling",)
        before = ("engine-defaults",)

        def run(self, cfg, ctx):
            mode = os.environ.get("HOSTILE_MODE", "")
            ctx.set("scheduler_config", "max_num_seqs", 9, reason=os.environ.get("HOSTILE_REASON", "set"))
            if mode == "exit":
                os._exit(0)
            if mode == "interrupt":
                raise KeyboardInterrupt
            if mode == "print":
                print("hello from a plugin")
            if mode == "setattr":
                object.__setattr__(cfg.scheduler_config, "max_num_seqs", 7)
            if mode == "object":
                ctx.record("odd", {"ok": [1, 2], "bad": object()})
            if mode == "huge":
                ctx.warn("w" * 10_000_000)
''')


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile-plugin")
    info = root / "enginecfg_test_hostile-0.1.dist-info"
    info.mkdir()
    (root / "enginecfg_test_hostile.py").write_text(_PLUGIN)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[enginecfg.stages]\nhostile = enginecfg_test_hostile:Hostile\n")
    return root


@pytest.fixture
def with_plugin(plugin_path, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_path))
    monkeypatch.setenv("ENGINECFG_PLUGINS", DIST)

    def run(mode: str, *argv: str, reason: str = "set"):
        return run_cli("run", QWEN, *argv, env={"HOSTILE_MODE": mode, "HOSTILE_REASON": reason})
    return run


def _process(plugin_path: Path, mode: str, *argv: str, reason: str = "set", **env: str):
    """``enginecfg run QWEN ARGV`` as a real process with the plugin installed."""
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugin_path), os.environ["PYTHONPATH"]]),
                ENGINECFG_PLUGINS=DIST, HOSTILE_MODE=mode, HOSTILE_REASON=reason, **env)
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", "run", QWEN, *argv],
                          capture_output=True, timeout=180, env=full,
                          cwd=os.environ["ENGINECFG_TEST_TMP"])


def _runs(url: str) -> list[dict]:
    return json.loads(run_cli("runs", "--json", "--db", url).stdout)


def test_a_plugin_that_ends_the_process_leaves_a_record(plugin_path, db_url):
    ended = _process(plugin_path, "exit", "--db", db_url, "--json")
    assert ended.returncode == 0 and ended.stdout == b""  # os._exit(0): nothing more happened
    assert run_cli("runs", "--db", db_url).returncode == 2  # no run could be written yet
    after = run_cli("run", QWEN, "--db", db_url)  # the next writer records it first
    assert after.returncode == 0, after.stderr
    runs = _runs(db_url)
    assert [r["status"] for r in runs] == ["resolved", "interrupted"]
    lost = run_cli("show", runs[1]["run_id"], "--json", "--db", db_url)
    doc = json.loads(lost.stdout)
    assert doc["failed_stage"] == "test-hostile"
    assert "while stage 'test-hostile' (enginecfg-test-hostile 0.1) ran" in doc["error"]["message"]
    assert [(c["stage"], c["field"], c["new"]) for c in doc["changes"]][-1] == (
        "test-hostile", "scheduler_config.max_num_seqs", 9)  # what it did before it ended
    assert {s["stage"]: s["outcome"] for s in doc["stages"]}["test-hostile"] == "failed"
    verdict = run_cli("audit", "verify", "--db", db_url)
    assert verdict.returncode == 0 and "intact: 2 run(s)" in verdict.stdout
    again = run_cli("run", QWEN, "--db", db_url)  # recorded once, not again
    assert again.returncode == 0 and len(_runs(db_url)) == 3


def test_a_plugin_that_raises_keyboard_interrupt_leaves_a_record(plugin_path, db_url):
    stopped = _process(plugin_path, "interrupt", "--db", db_url)
    assert stopped.returncode == 130 and b"interrupted" in stopped.stderr
    (run,) = _runs(db_url)
    assert run["status"] == "interrupted" and "KeyboardInterrupt" in run["error"]
    store = AuditStore(db_url, read_only=True)
    try:
        assert store.get_run(run["run_id"])["failed_stage"] == "test-hostile"
        assert store.verify().ok
    finally:
        store.close()


def test_a_change_past_the_assignment_is_the_plugins_not_a_built_ins(with_plugin, tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    proc = with_plugin("setattr", "--db", url, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    changes = [(c["stage"], c["field"], c["new"], c["via"]) for c in doc["changes"]
               if c["field"] == "scheduler_config.max_num_seqs"]
    assert changes == [("test-hostile", "scheduler_config.max_num_seqs", 9, "context"),
                       ("test-hostile", "scheduler_config.max_num_seqs", 7, "direct")]


def test_what_a_plugin_prints_does_not_break_json(with_plugin, tmp_path):
    proc = with_plugin("print", "--no-audit", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "resolved"
    assert "hello from a plugin" in proc.stderr


def test_a_fact_that_is_no_json_data_is_refused_not_stored_as_its_repr(with_plugin, tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    proc = with_plugin("object", "--db", url, "--json")
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["status"] == "invalid" and doc["error"]["field"] == "facts.odd"
    assert "it['bad'] is of type object, not JSON data" in doc["error"]["message"]
    stored = run_cli("show", doc["run_id"], "--json", "--db", url).stdout
    assert "<object object at" not in stored and "test-hostile" in stored


def test_a_huge_reason_is_cut_and_says_so(with_plugin, tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    proc = with_plugin("huge", "--db", url, "--json", reason="r" * 10_000_000)
    assert proc.returncode == 0, proc.stderr[-500:]
    doc = json.loads(proc.stdout)
    reason = [c["reason"] for c in doc["changes"] if c["stage"] == "test-hostile"][0]
    message = [m["message"] for m in doc["messages"] if m["stage"] == "test-hostile"][0]
    for text in (reason, message):
        assert len(text) < MAX_TEXT + 100
        assert text.endswith("[... cut: 10,000,000 characters, the first 10,000 kept]")
    shown = run_cli("show", doc["run_id"], "--json", "--db", url).stdout
    assert len(shown) < 1_000_000


def test_a_reason_the_terminal_would_obey_or_cannot_encode_is_shown_as_text(plugin_path, tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    reason = "clear \x1b[2J screen, title \x1b]0;owned\x07, bad byte caf\udce9"
    # a strict UTF-8 terminal: a lone surrogate used to raise after the run was recorded
    proc = _process(plugin_path, "", "--db", url, reason=reason, PYTHONIOENCODING="utf-8:strict")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.decode("utf-8")
    assert "\x1b" not in out and "\x07" not in out
    assert "clear \\x1b[2J screen, title \\x1b]0;owned\\x07, bad byte caf\\udce9" in out
    rid = _runs(url)[0]["run_id"]
    for argv in (["show", rid], ["why", rid, "scheduler_config.max_num_seqs"]):
        shown = run_cli(*argv, "--db", url).stdout
        assert "\x1b" not in shown and "\\x1b[2J" in shown, argv
    doc = json.loads(run_cli("show", rid, "--json", "--db", url).stdout)
    assert doc["changes"][0]["reason"] == reason.replace("\udce9", "\\udce9")  # stored exactly
