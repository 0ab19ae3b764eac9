"""One start verdict per run, and no start gate passes a start that was not worked out.

A run's ``impact`` fact carries whether vLLM would start: False when the engine start fails
(the model class cannot be built, a start-up step raises), whatever the memory says; None when
the start-up step could not be worked out.  ``--require-start`` passes only True (``explain``,
``run``); ``upgrade`` gives each release's verdict; ``runs``, ``show``, ``history``, ``why`` and
the audit page show it beside the status.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from support import CONFIGS, EXAMPLES

from enginecfg import Pipeline
from enginecfg.pipeline.models.capacity import Impact, ImpactUnavailable
from enginecfg.store import AuditStore

QWEN = str(EXAMPLES / "qwen3.5-27b")
GEMMA = str(EXAMPLES / "gemma-4-26b-a4b")
BAMBA = str(CONFIGS / "bamba-default")


def cli(*args, db=None, columns=120):
    env = dict(os.environ, ENGINECFG_PLUGINS="none", COLUMNS=str(columns))
    if db:
        env["ENGINECFG_DB"] = db
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          timeout=300, cwd=os.environ["ENGINECFG_TEST_TMP"], env=env)


# -- the verdict the impact fact carries ----------------------------------------------------------

def test_a_start_that_meets_vllms_own_assertion_does_not_start(warm_snapshots):
    # 0.34.0 has no hybrid alignment at config time: the Mamba state TP 3 cannot divide is met
    # when the engine starts, so the config resolves and the engine does not start
    result = Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(QWEN, tensor_parallel_size=3)
    assert result.status == "resolved"
    imp = result.impact
    assert isinstance(imp, ImpactUnavailable) and imp.starts is False
    assert imp.start_error.startswith("AssertionError (tensor parallel size 3 does not divide")
    assert "10240 is not divisible by 3" in imp.start_error
    doc = result.to_dict()
    assert doc["impact"]["starts"] is False and doc["startup"]["failure"]["rule"] == "S2"


def test_a_model_class_that_cannot_be_built_does_not_start_whatever_the_memory(warm_snapshots):
    result = Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(BAMBA)
    imp = result.impact
    assert isinstance(imp, Impact) and imp.fits is None  # the memory holds it ...
    assert imp.starts is False  # ... but the Transformers backend cannot build its layers
    assert imp.start_error.startswith("ValueError: Layer 0 (linear_attention) does not dispatch")


def test_a_start_up_step_not_worked_out_gives_no_verdict(tmp_path, warm_snapshots):
    raw = json.loads((CONFIGS / "jamba-default" / "config.json").read_text())
    raw["mamba_dt_rank"] = -3
    (tmp_path / "config.json").write_text(json.dumps(raw))
    result = Pipeline(gpu_validation="off").resolve(tmp_path)
    assert result.status == "resolved" and result.impact.starts is None


# -- the gates ------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["explain", "run"])
def test_require_start_refuses_a_start_that_fails_at_start_up(command, warm_snapshots):
    proc = cli(command, QWEN, "-tp", "3", "--vllm-version", "0.34.0", "--no-audit", "--require-start")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "does not start (--require-start)" in proc.stderr
    assert "AssertionError" in proc.stderr and "10240 is not divisible by 3" in proc.stderr
    assert "Does not start: vLLM 0.34.0 would stop at start-up with AssertionError" in " ".join(proc.stdout.split())


def test_require_start_refuses_a_model_class_vllm_cannot_build(warm_snapshots):
    proc = cli("explain", BAMBA, "--vllm-version", "0.34.0", "--no-audit", "--require-start")
    assert proc.returncode == 1
    # vLLM never gets to log a KV-cache size, so the report quotes none
    assert "GPU KV cache size" not in proc.stdout and "Largest max_model_len" not in proc.stdout
    assert "Concurrent requests" not in proc.stdout


@pytest.mark.parametrize("command", ["explain", "run"])
def test_require_start_refuses_a_start_not_worked_out(command, tmp_path, warm_snapshots):
    raw = json.loads((CONFIGS / "jamba-default" / "config.json").read_text())
    raw["mamba_dt_rank"] = -3
    (tmp_path / "config.json").write_text(json.dumps(raw))
    proc = cli(command, str(tmp_path), "--no-audit", "--require-start")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "start not worked out (--require-start)" in proc.stderr
    assert cli(command, str(tmp_path), "--no-audit").returncode == 0  # without the gate: a resolved run


def test_upgrade_gives_each_release_its_start_verdict(warm_snapshots):
    text = " ".join(cli("upgrade", QWEN, "-tp", "3").stdout.split())
    assert "vLLM 0.19.0 refuses this setting: rejected: 10240 is not divisible by 3" in text
    assert "vLLM 0.34.0 resolves it but would not start: AssertionError (tensor parallel size 3" in text
    text = " ".join(cli("upgrade", QWEN).stdout.split())
    assert "vLLM 0.19.0 resolves it and starts." in text and "vLLM 0.34.0 resolves it and starts." in text


# -- beside the status ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def recorded(tmp_path_factory, warm_snapshots):
    db = f"sqlite:///{tmp_path_factory.mktemp('verdict') / 'audit.db'}"
    for args in ([GEMMA, "--attention-backend", "FLASH_ATTN"], [QWEN], [QWEN, "-tp", "3", "--vllm-version", "0.34.0"]):
        proc = cli("run", *args, "--gpu-validation", "off", db=db)
        assert proc.returncode == 0, proc.stderr
    return db, [r["run_id"] for r in json.loads(cli("runs", "--json", db=db).stdout)]


def test_runs_show_history_and_why_say_whether_vllm_starts(recorded):
    db, (tp3, qwen, gemma) = recorded
    runs = json.loads(cli("runs", "--json", db=db).stdout)
    assert [r["starts"] for r in runs] == [False, True, False]
    lines = {line.split()[0]: line for line in cli("runs", db=db, columns=200).stdout.splitlines()[3:]
             if line.strip() and not line.startswith(" ")}
    assert "resolved  does not start" in lines[gemma[:12]]
    assert "resolved  starts" in lines[qwen[:12]]
    assert "resolved  does not start" in lines[tp3[:12]]
    show = cli("show", gemma[:12], db=db, columns=200).stdout
    assert any(line.split() == ["start", "does", "not", "start"] for line in show.splitlines())
    history = cli("history", "cache_config.block_size", db=db, columns=200).stdout
    assert "resolved  does not start" in history and "resolved  starts" in history
    why = cli("why", gemma[:12], "cache_config.block_size", db=db).stdout
    assert f"({'resolved, does not start'}, {GEMMA})" in " ".join(why.split())


def test_the_pages_run_list_says_whether_vllm_starts(recorded):
    from enginecfg.ui.pages import open_pages

    db, (tp3, qwen, gemma) = recorded
    app = open_pages(db, bound_to="127.0.0.1")
    try:
        seen = {}
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "QUERY_STRING": "", "HTTP_HOST": "127.0.0.1:8100",
                   "wsgi.input": io.BytesIO()}
        body = b"".join(app(environ, lambda status, headers: seen.update(status=status))).decode()
        assert seen["status"].startswith("200")
        assert "<th>status</th><th>start</th>" in body
        row = body.split(f">{gemma[:12]}</a>")[1].split("</tr>")[0]
        assert 'start-no">does not start</td>' in row
        row = body.split(f">{qwen[:12]}</a>")[1].split("</tr>")[0]
        assert '<td class="start nowrap">starts</td>' in row
        environ.update(PATH_INFO=f"/run/{gemma}")
        body = b"".join(app(environ, lambda status, headers: None)).decode()
        assert "does not start" in body
    finally:
        app.store.close()


def test_the_store_column_holds_the_verdict_the_document_carries(tmp_path, warm_snapshots):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with AuditStore(url).attach() as store:
        result = Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(BAMBA)
    assert store.list_runs()[0]["starts"] is False and result.impact.starts is False
    assert store.verify().ok
    store.close()
