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

from enginecfg.pipeline.hf import cache as hfcache
from enginecfg.pipeline.errors import InvalidInputError
from support import CONFIGS, REPO

QWEN = json.loads((CONFIGS / "qwen3.5-27b" / "config.json").read_text())


@pytest.fixture(autouse=True)
def _through_the_worker(monkeypatch):
    """These tests are about the worker: never build in this process."""
    monkeypatch.setattr(hfcache, "_in_process", lambda: False)


#: the worker as it ships, with one more op for these tests: ``{"op": "sleep", "seconds": s}``
#: answers after *s* seconds, so that a request is still in flight when a test kills the
#: worker or lets its time run out
_SLOW_WORKER = textwrap.dedent("""
    import importlib.util, os, sys, time
    init = sys.argv[1]
    spec = importlib.util.spec_from_file_location(
        "enginecfg", init, submodule_search_locations=[os.path.dirname(init)])
    package = importlib.util.module_from_spec(spec)
    sys.modules["enginecfg"] = package
    spec.loader.exec_module(package)
    from enginecfg.pipeline.hf import _worker
    shipped = _worker._answer

    def answer(request):
        if isinstance(request, dict) and request.get("op") == "sleep":
            time.sleep(float(request["seconds"]))
            return {"id": request.get("id"), "slept": True}
        return shipped(request)

    _worker._answer = answer
    sys.exit(_worker.main())
""")


@pytest.fixture
def slow_worker(monkeypatch):
    """This process's worker started from :data:`_SLOW_WORKER` (restarts too), then stopped."""
    import enginecfg

    hfcache.shutdown_worker()
    monkeypatch.setattr(hfcache, "_worker_command", lambda *args: [
        sys.executable, "-P", "-c", _SLOW_WORKER, os.path.abspath(enginecfg.__file__), *args])
    yield
    hfcache.shutdown_worker()


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


def test_killing_the_worker_mid_request_costs_nothing(slow_worker):
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


def test_a_request_past_its_timeout_fails_and_the_next_one_succeeds(slow_worker):
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
    from enginecfg.pipeline.hf import cache as hfcache
    cfg = json.load(open({config!r}))
    cfg["enginecfg_test_tag"] = "child-%d-%d" % (os.getpid(), time.time_ns())
    hfcache.snapshot_for(cfg)
    print(hfcache.worker_pid(), flush=True)
    if sys.argv[1] == "wait":
        time.sleep(600)
    sys.stdin.readline()  # "exit": once the test has seen the worker alive
""")


@pytest.mark.parametrize("end", ["exit", "sigkill", "sigterm"])
def test_no_worker_outlives_its_parent(tmp_path, end):
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(repo=str(REPO), config=str(CONFIGS / "qwen3.5-27b" / "config.json")))
    proc = subprocess.Popen([sys.executable, "-P", str(script), "exit" if end == "exit" else "wait"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=os.environ["ENGINECFG_TEST_TMP"])
    try:
        line = proc.stdout.readline()
        assert line.strip().isdigit(), proc.stderr.read()
        worker = int(line)
        assert not _gone(worker)
        if end == "exit":
            proc.stdin.write("\n")
            proc.stdin.flush()
        elif end == "sigkill":
            proc.kill()
        elif end == "sigterm":
            proc.terminate()  # default action: no atexit handlers run
        proc.wait(60)
        assert _wait_gone(worker), f"worker {worker} outlived its parent ({end})"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _loaded_torch(pid: int) -> bool:
    with open(f"/proc/{pid}/maps") as fh:
        return any("libtorch" in line for line in fh)


def _with_torch(items: list[dict]) -> list[dict]:
    """The snapshots as transformers builds them with torch importable (this process)."""
    import torch  # noqa: F401  - transformers converts dtype names to torch objects only then

    from enginecfg.pipeline.hf._worker import snapshot_item

    return [json.loads(json.dumps(snapshot_item(item), default=str)) for item in items]


def test_dtype_names_are_torchs_own():
    import torch

    from enginecfg.pipeline.hf._worker import TORCH_DTYPE_NAMES

    for name, canonical in TORCH_DTYPE_NAMES.items():
        value = getattr(torch, name)
        assert isinstance(value, torch.dtype), name
        assert str(value).removeprefix("torch.") == canonical, name


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/maps")
def test_the_worker_builds_without_torch_what_transformers_builds_with_it():
    configs = [json.loads((d / "config.json").read_text()) for d in sorted(CONFIGS.iterdir())
               if (d / "config.json").is_file()]
    gemma = json.loads((CONFIGS / "gemma-4-26b-a4b" / "config.json").read_text())
    configs += [dict(QWEN, torch_dtype="half", enginecfg_test_tag="half"),
                dict(gemma, text_config=dict(gemma["text_config"], dtype="double")),
                dict(QWEN, dtype=3, enginecfg_test_tag="int")]
    items = [{"config": dict(c, enginecfg_test_tag=f"{i}-{time.time_ns()}")} for i, c in enumerate(configs)]
    hfcache.shutdown_worker()
    got = hfcache.worker_request({"op": "snapshots", "items": items})["results"]
    pid = hfcache.worker_pid()
    assert not _loaded_torch(pid)
    assert got == _with_torch(items)
    assert got[-3]["attrs"]["dtype"] == "float16"
    assert got[-2]["attrs"]["text_config"]["attrs"]["dtype"] == "float64"
    # a name only torch can answer for: the worker imports torch and answers as transformers does
    odd = [{"config": dict(QWEN, torch_dtype="not_a_dtype")}]
    answer = hfcache.worker_request({"op": "snapshots", "items": odd})["results"]
    assert answer == _with_torch(odd)
    assert answer[0]["error"]["type"] == "AttributeError"
    assert _loaded_torch(pid) and hfcache.worker_pid() == pid
