"""``enginecfg upgrade`` on the command line: --json, the human report, bad input, a release
that refuses, and the README's example as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from support import REPO

QWEN = "examples/models/qwen3.5-27b"


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100", "ENGINECFG_PLUGINS": "none"}
    return subprocess.run([sys.executable, "-m", "enginecfg", "upgrade", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_json_is_the_library_result(warm_snapshots):
    from enginecfg.commands import upgrade

    p = _cli(QWEN, "--json", "--kv-cache-dtype", "fp8")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    want = json.loads(json.dumps(upgrade(str(REPO / QWEN), kv_cache_dtype="fp8").to_dict(), default=str))
    assert doc["fields"] == want["fields"] and doc["capacity"] == want["capacity"]
    assert doc["engine_args"] == {"kv_cache_dtype": "fp8"} and doc["gpu"] == "H200"
    assert doc["from"]["vllm_version"] == "0.19.0" and doc["to"]["vllm_version"] == "0.34.0"
    assert "startup.engine_block_size" in doc["changed"]


def test_human_report_shows_decisions_rules_and_capacity(warm_snapshots):
    p = _cli(QWEN, "--gpu", "H100")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "vLLM 0.19.0 -> 0.34.0 on H100" in out
    assert re.search(r"^startup\.engine_block_size \*\s+784\s+832$", out, re.M)
    # every column has its header: the changed mark ends the decision's name
    header = re.search(r"^Decisions \(\* changed\):\n(.*)\n(-[- ]*)$", out, re.M)
    assert header[1].split() == ["decision", "0.19.0", "0.34.0"]
    assert len(header[2].split()) == 3
    assert "0.28 [C3.2]: prefix caching is on by default" in out
    assert "GPU KV cache size (tokens)" in out and "concurrency at 8,192 tokens" in out


def test_bad_input_is_one_line_and_exit_2():
    same = _cli(QWEN, "--from", "0.34.0", "--to", "0.34.0")
    assert same.returncode == 2 and same.stdout == ""
    assert "to_version" in same.stderr and "also the from_version" in same.stderr and "Traceback" not in same.stderr
    unknown = _cli(QWEN, "--to", "0.99.0")
    assert unknown.returncode == 2 and "allowed: 0.19.0, 0.19.1, 0.20.0" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1


def test_a_release_that_refuses_exits_with_its_code_and_shows_the_other(warm_snapshots):
    p = _cli(QWEN, "--calculate-kv-scales")
    assert p.returncode == 2
    assert "vLLM 0.34.0 refuses this setting" in p.stdout and "vLLM 0.19.0 resolves it" in p.stdout
    assert re.search(r"^cache_config\.block_size( \*)?\s+784\s+-", p.stdout, re.M)
    assert "enginecfg: vLLM 0.34.0: invalid" in p.stderr


def test_the_readme_upgrade_example_runs_as_written(warm_snapshots):
    section = (REPO / "README.md").read_text().split("## Upgrading", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```console\n\$ (enginecfg upgrade [^\n]+)\n(.*?)```", section, re.S)
    command, shown = block[1], block[2]
    p = _cli(*command.split()[2:])
    assert p.returncode == 0, p.stderr
    assert p.stdout == shown
