"""One report, no contradiction: figures that count different things say so beside each other.

- ``--num-gpu-blocks-override`` under vLLM 0.19.0: the start-up check measures the memory, while
  the blocks may hold far less than one request of max_model_len; the largest max_model_len that
  fits then says both.
- ``plan`` over several releases: "KV tokens" is vLLM's logged "GPU KV cache size", which 0.34.0
  works out by another formula than 0.19.0 (RULES.md K6); the table says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import EXAMPLES

from enginecfg.commands import explain, plan

QWEN = str(EXAMPLES / "qwen3.5-27b")


def cli(*args, columns=100):
    env = dict(os.environ, ENGINECFG_PLUGINS="none", COLUMNS=str(columns))
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          timeout=300, cwd=os.environ["ENGINECFG_TEST_TMP"], env=env)


@pytest.mark.parametrize("blocks", [10, 100, 5000])
def test_the_override_says_what_its_blocks_hold(blocks, warm_snapshots):
    imp = explain(QWEN, num_gpu_blocks_override=blocks).impact
    assert imp.starts and imp.max_model_len_fits == imp.max_model_len == 262144  # vLLM 0.19.0 measures memory
    held = imp.override_max_model_len
    # a request of max_model_len fits the blocks exactly when the blocks hold one of that length
    assert (imp.max_concurrency >= 1) == (held == imp.max_model_len)
    assert imp.to_dict()["override_max_model_len"] == held


def test_explain_with_ten_blocks_does_not_claim_they_hold_max_model_len(warm_snapshots):
    proc = cli("explain", QWEN, "--num-gpu-blocks-override", "10", "--no-audit")
    text = " ".join(proc.stdout.split())
    assert "262,144 (max_model_len) 0.03x" in text
    assert ("Largest max_model_len that fits: 262,144 in the memory, which vLLM 0.19.0's start-up check "
            "measures; the 10 blocks --num-gpu-blocks-override keeps hold one request of at most 5,488 tokens.") in text
    assert "Largest max_model_len that fits: 262,144." not in text


def test_without_an_override_the_line_is_as_before(warm_snapshots):
    text = " ".join(cli("explain", QWEN, "--no-audit").stdout.split())
    assert "Largest max_model_len that fits: 262,144." in text
    assert explain(QWEN).impact.override_max_model_len is None


def test_plan_over_two_releases_says_kv_tokens_changed_formula(warm_snapshots):
    proc = cli("plan", QWEN, "--vllm-version", "0.19.0,0.34.0", "--tp", "1", columns=200)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "KV tokens are not one measure across releases: 0.20.1-0.28 [K6]: the logged 'GPU KV cache size' is " \
           "floor(concurrency x max_model_len) (was blocks over groups x the smallest block)" in text
    doc = json.loads(cli("plan", QWEN, "--vllm-version", "0.19.0,0.34.0", "--tp", "1", "--json").stdout)
    assert "K6" in [r["rule"] for r in doc["capacity_rules"]]


def test_plan_over_one_release_has_no_such_note(warm_snapshots):
    assert plan(QWEN, {"tensor_parallel_size": [1]}).capacity_rules == ()
    assert plan(QWEN, {"tensor_parallel_size": [1]}, vllm_version="0.34.0").capacity_rules == ()
    assert "not one measure" not in cli("plan", QWEN, "--tp", "1").stdout
