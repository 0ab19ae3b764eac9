"""The long-lived transformers worker: reused, restarted when killed, timed out, never orphaned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from enginecfg.pipeline import hfcache
from enginecfg.pipeline.errors import InvalidInputError
from support import CONFIGS, REPO

QWEN = json.loads((CONFIGS / "qwen3.5-27b" / "config.json").read_text())


@pytest.fixture(autouse=True)
def _through_the_worker(monkeypatch):
    """These tests are about the worker: never build in this process."""
    monkeypatch.setenv("ENGINECFG_HF_INPROCESS", "0")


def _fresh(tag: str) -> dict:
    """A config no cache has seen (an extra key transformers keeps as an attribute)."""
    return dict(QWEN, enginecfg_test_tag=f"{tag}-{os.getpid()}-{time.time_ns()}")


def _gone(pid: int) -> bool:
    """True when *pid* no longer runs (absent, or a zombie nobody has reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def test_one_worker_serves_every_miss_of_a_process():
    first = hfcache.snapshot_for(_fresh("a"))
    pid = hfcache.worker_pid()
    assert pid is not None
    second = hfcache.snapshot_for(_fresh("b"))
    assert hfcache.worker_pid() == pid  # reused, not one process per config
    assert first["attrs"]["enginecfg_test_tag"] != second["attrs"]["enginecfg_test_tag"]
    assert first["class"] == second["class"] == "Qwen3_5Config"


def test_killing_the_worker_mid_request_costs_nothing():
    hfcache.worker_request({"op": "ping"})
    old = hfcache.worker_pid()
    answers: list = []
    errors: list = []

    def slow_request():
        try:
            answers.append(hfcache.worker_request({"op": "sleep", "seconds": 1.5}))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=slow_request)
    t.start()
    time.sleep(0.4)  # the request is in flight: the worker is sleeping on it
    assert t.is_alive()
    os.kill(old, signal.SIGKILL)
    t.join(300)
    assert not errors, errors
    assert answers and answers[0]["slept"] is True  # sent once more to a fresh worker
    assert _wait_gone(old)
    snap = hfcache.snapshot_for(_fresh("after-kill"))  # and the next request succeeds
    assert snap["class"] == "Qwen3_5Config"
    assert hfcache.worker_pid() not in (None, old)


def test_a_request_past_its_timeout_fails_and_the_next_one_succeeds():
    hfcache.worker_request({"op": "ping"})
    old = hfcache.worker_pid()
    t0 = time.monotonic()
    with pytest.raises(InvalidInputError) as info:
        hfcache.worker_request({"op": "sleep", "seconds": 60}, timeout_s=1.0)
    assert time.monotonic() - t0 < 30
    assert info.value.field == "transformers" and "no answer within 1 s" in str(info.value)
    assert _wait_gone(old)  # the stuck worker was killed, not left behind
    assert hfcache.snapshot_for(_fresh("after-timeout"))["class"] == "Qwen3_5Config"


def test_a_bad_timeout_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv(hfcache.TIMEOUT_ENV, "soon")
    with pytest.raises(InvalidInputError) as info:
        hfcache.worker_request({"op": "ping"})
    assert hfcache.TIMEOUT_ENV in str(info.value) and "soon" in str(info.value)


_CHILD = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {repo!r})
    os.environ["ENGINECFG_HF_INPROCESS"] = "0"
    from enginecfg.pipeline import hfcache
    cfg = json.load(open({config!r}))
    cfg["enginecfg_test_tag"] = "child-%d-%d" % (os.getpid(), time.time_ns())
    hfcache.snapshot_for(cfg)
    print(hfcache.worker_pid(), flush=True)
    if sys.argv[1] == "wait":
        time.sleep(600)
""")


@pytest.mark.parametrize("end", ["exit", "sigkill", "sigterm"])
def test_no_worker_outlives_its_parent(tmp_path, end):
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(repo=str(REPO), config=str(CONFIGS / "qwen3.5-27b" / "config.json")))
    proc = subprocess.Popen([sys.executable, "-P", str(script), "exit" if end == "exit" else "wait"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=os.environ["ENGINECFG_TEST_TMP"])
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), proc.stderr.read()
        worker = int(line)
        assert not _gone(worker)
        if end == "sigkill":
            proc.kill()
        elif end == "sigterm":
            proc.terminate()  # default action: no atexit handlers run
        proc.wait(60)
        assert _wait_gone(worker), f"worker {worker} outlived its parent ({end})"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
