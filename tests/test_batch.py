"""Batch entry points: many configs, one transformers request, the same answers as one by one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from enginecfg import EngineConfig, InvalidInputError, Pipeline
from enginecfg.pipeline.hf import cache as hfcache
from support import CONFIGS, REPO

NAMES = ["qwen3.5-27b", "mamba-130m-hf", "jamba-1.5-mini", "nemotron-vl-embed-avg", "gemma-4-26b-a4b"]


def _fresh_dirs(tmp_path, names=NAMES) -> list:
    """Copies of fixture configs no cache has seen (one extra key each)."""
    tag = f"{os.getpid()}-{time.time_ns()}"
    out = []
    for name in names:
        d = tmp_path / name
        d.mkdir(parents=True)
        cfg = json.loads((CONFIGS / name / "config.json").read_text())
        cfg["enginecfg_batch_tag"] = tag
        (d / "config.json").write_text(json.dumps(cfg))
        out.append(d)
    return out


@pytest.fixture
def requests(monkeypatch):
    """The worker requests made (the real worker answers them)."""
    monkeypatch.setattr(hfcache, "_in_process", lambda: False)  # through the worker
    sent = []
    real = hfcache._worker.request

    def counting(request, timeout_s=None):
        sent.append(request.get("op"))
        return real(request, timeout_s)

    monkeypatch.setattr(hfcache._worker, "request", counting)
    return sent


def _doc(result) -> dict:
    doc = result.to_dict()
    return {k: doc[k] for k in ("config", "changes", "messages", "fingerprint", "status")}


def test_from_pretrained_many_is_one_request_and_equals_one_by_one(tmp_path, requests):
    dirs = _fresh_dirs(tmp_path)
    cfgs = EngineConfig.from_pretrained_many(dirs, block_size=32)
    assert requests == ["snapshots"]  # five new configs, one request
    assert [c.model for c in cfgs] == [str(d) for d in dirs]
    hfcache.clear()
    one_by_one = [EngineConfig.from_pretrained(d, block_size=32) for d in dirs]  # from the disk cache
    assert requests == ["snapshots"]
    p = Pipeline(gpu_validation="off")
    assert [_doc(p.run(c)) for c in cfgs] == [_doc(p.run(c)) for c in one_by_one]


def test_from_pretrained_many_raises_what_the_first_bad_path_raises(tmp_path):
    good = CONFIGS / "qwen3.5-27b"
    with pytest.raises(InvalidInputError) as info:
        EngineConfig.from_pretrained_many([good, tmp_path / "absent"])
    with pytest.raises(InvalidInputError) as alone:
        EngineConfig.from_pretrained(tmp_path / "absent")
    assert str(info.value) == str(alone.value)
    with pytest.raises(InvalidInputError) as info:
        EngineConfig.from_pretrained_many(str(good))  # one path, not a list of them
    assert info.value.field == "paths"
    with pytest.raises(InvalidInputError) as info:
        EngineConfig.from_pretrained_many([good], no_such_argument=1)
    assert info.value.field == "no_such_argument"
    # a bad value is refused by the run, at vLLM's step, as from_pretrained's config is
    (cfg,) = EngineConfig.from_pretrained_many([good], block_size="big")
    with pytest.raises(InvalidInputError) as info:
        Pipeline(gpu_validation="off").run(cfg)
    assert info.value.field == "block_size"


def test_run_many_returns_every_outcome_in_order(tmp_path, requests):
    dirs = _fresh_dirs(tmp_path, NAMES[:3])
    items = [dirs[0], tmp_path / "absent", dirs[1], EngineConfig.from_pretrained(CONFIGS / "zamba2-default"), dirs[2]]
    before = len(requests)
    out = Pipeline(gpu_validation="off").run_many(items, errors="return")
    assert requests[before:] == ["snapshots"]  # three new configs, one request
    assert [type(r).__name__ for r in out] == ["RunResult", "InvalidInputError", "RunResult", "RunResult",
                                              "RunResult"]
    assert out[1].run_id and out[1].status == "invalid"  # recorded as a failed run, as resolve() does
    assert [r.config.model for r in out if hasattr(r, "config")] == [str(dirs[0]), str(dirs[1]),
                                                                     items[3].model, str(dirs[2])]
    with pytest.raises(InvalidInputError) as info:
        Pipeline(gpu_validation="off").run_many(_fresh_dirs(tmp_path / "again", NAMES[:1]) + items[1:3])
    assert info.value.field == "model"
    with pytest.raises(InvalidInputError) as info:
        Pipeline(gpu_validation="off").run_many(items, errors="ignore")
    assert info.value.field == "errors"


def _cli(*args: str) -> subprocess.CompletedProcess:
    """This checkout's CLI, as ``python -c`` started in the checkout's root would run it."""
    code = f"import sys; sys.path.insert(0, {str(REPO)!r}); from enginecfg.cli import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-P", "-c", code, *args], capture_output=True, text=True,
                          env=dict(os.environ, ENGINECFG_PLUGINS="none"), cwd=os.environ["ENGINECFG_TEST_TMP"],
                          timeout=300)


def test_cli_runs_several_paths_one_json_document_per_line(tmp_path):
    dirs = _fresh_dirs(tmp_path, NAMES[:3])
    bad = tmp_path / "absent"
    proc = _cli("run", str(dirs[0]), str(bad), str(dirs[1]), str(dirs[2]), "--json", "--no-audit",
                "--gpu-validation", "off", "--block-size", "32")
    assert proc.returncode == 2, proc.stderr  # the worst of the four
    lines = proc.stdout.splitlines()
    assert len(lines) == 4
    docs = [json.loads(line) for line in lines]
    assert [d["status"] for d in docs] == ["resolved", "invalid", "resolved", "resolved"]
    assert [d["model"] for d in docs] == [str(dirs[0]), str(bad), str(dirs[1]), str(dirs[2])]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("enginecfg: invalid")]
    assert len(errors) == 1 and str(bad) in errors[0], proc.stderr
    single = [_doc_of(_cli("run", str(d), "--json", "--no-audit", "--gpu-validation", "off", "--block-size", "32"))
              for d in dirs]
    for doc, alone in zip([docs[0], docs[2], docs[3]], single):
        assert doc["config"] == alone["config"] and doc["fingerprint"] == alone["fingerprint"]


def _doc_of(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
