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


# -- memory no number can stand for ----------------------------------------------------------------

@pytest.mark.parametrize("value", ["1e400", "inf", "1e308", "nan", "8589934592"])
@pytest.mark.parametrize("command", [["explain"], ["run", "--no-audit"], ["upgrade"], ["plan", "--tp", "1"]])
def test_a_gpu_memory_no_card_can_have_is_bad_input(command, value, warm_snapshots):
    extra = ["--no-audit"] if command[0] == "explain" else []
    proc = cli(command[0], QWEN, *command[1:], *extra, "--gpu-memory", value)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "OverflowError" not in proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("enginecfg: invalid: invalid gpu_memory_gib (--gpu-memory): got ")
    assert line.endswith("allowed: a number > 0 and < 8,589,934,592")


def test_the_largest_gpu_memory_allowed_still_gives_figures(warm_snapshots):
    proc = cli("explain", QWEN, "--no-audit", "--gpu-memory", "8589934591", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["impact"]["memory"]["gpu_memory_bytes"] == 8589934591 * 2**30


# -- a grid of bad rows -----------------------------------------------------------------------------

@pytest.mark.parametrize("columns", [80, 200])
def test_a_plan_whose_every_row_is_bad_input_exits_2_and_marks_nothing(columns, warm_snapshots):
    proc = cli("plan", QWEN, "--tp", "0", columns=columns)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "invalid tensor_parallel_size" in proc.stdout
    assert "best:" not in proc.stdout  # no legend of marks no row has
    assert "no setting of the grid has figures" in proc.stderr
    doc = json.loads(cli("plan", QWEN, "--tp", "0,-1", "--json").stdout)
    assert [r["error"].split(":")[0] for r in doc["rows"]] == [
        "invalid tensor_parallel_size (-tp/--tensor-parallel-size)"] * 2
    assert set(doc["best"].values()) == {None}


def test_a_plan_with_one_good_row_exits_0_and_marks_it(warm_snapshots):
    proc = cli("plan", QWEN, "--tp", "0,1", columns=80)
    assert proc.returncode == 0, proc.stderr
    assert "best: c concurrency at 8,192, x context, g granularity" in proc.stdout


def test_plan_exit_code_as_run_maps_refusals(warm_snapshots):
    from enginecfg.commands import plan

    assert plan(QWEN, {"tensor_parallel_size": [0]}).exit_code == 2
    assert plan(QWEN, {"tensor_parallel_size": [3]}).exit_code == 1  # vLLM 0.19.0 rejects TP 3 here
    assert plan(QWEN, {"tensor_parallel_size": [3, 1]}).exit_code == 0
