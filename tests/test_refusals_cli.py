"""What the command line says when it refuses: the flag behind a rejection is named beside vLLM's
text, and input no number can stand for (an infinite or overflowing memory, a grid of bad rows) is
bad input, exit 2, in one clear line, with no exception text and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import EXAMPLES

QWEN = str(EXAMPLES / "qwen3.5-27b")


def cli(*args, columns=100):
    env = dict(os.environ, ENGINECFG_PLUGINS="none", COLUMNS=str(columns))
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          timeout=300, cwd=os.environ["ENGINECFG_TEST_TMP"], env=env)


# -- the flag behind a rejection ------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--tensor-parallel-size", "-tp"])
def test_a_rejection_names_the_flag_beside_vllms_text(flag, warm_snapshots):
    proc = cli("run", QWEN, flag, "3", "--no-audit", "--gpu-validation", "off")
    assert proc.returncode == 1
    line = proc.stderr.strip().splitlines()[-1]
    assert line == ("enginecfg: rejected [hybrid-alignment]: 10240 is not divisible by 3 "
                    "(--tensor-parallel-size 3)")


def test_upgrade_names_the_flag_of_the_release_that_refuses(warm_snapshots):
    proc = cli("upgrade", QWEN, "-tp", "3")
    assert "10240 is not divisible by 3 (--tensor-parallel-size 3)" in proc.stdout
    assert "enginecfg: vLLM 0.19.0: rejected: 10240 is not divisible by 3 (--tensor-parallel-size 3)" in proc.stderr


def test_a_message_that_names_its_flag_already_is_left_as_it_is(warm_snapshots):
    proc = cli("run", QWEN, "-tp", "0", "--no-audit")
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert line.count("--tensor-parallel-size") == 1, line


def test_given_flag_spells_the_flag_as_given():
    from enginecfg.pipeline.engine_args import given_flag

    assert given_flag("parallel_config.tensor_parallel_size", {"tensor_parallel_size": 3}) == \
        "--tensor-parallel-size 3"
    assert given_flag("max_model_len", {"max_model_len": 8192}) == "--max-model-len 8192"
    assert given_flag("cache_config.enable_prefix_caching", {"enable_prefix_caching": False}) == \
        "--no-enable-prefix-caching"
    assert given_flag("parallel_config.tensor_parallel_size", {}) is None  # not given: nothing to name
    assert given_flag("hf_config.text_config", {"tensor_parallel_size": 3}) is None
    assert given_flag(None, {"tensor_parallel_size": 3}) is None
