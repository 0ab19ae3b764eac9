"""Every change explanation, on every fixture case, against the run's own numbers.

An explanation states a rule and the numbers the stage used.  This test reads those
numbers back out of the words and checks them: each ``a x b = c``, ``a - b = c``,
``ceil(a / b) = c`` and ``lcm(..a, ..b) = c`` must be true arithmetic; the page sizes
named must be the run's page facts; the "smallest multiple of M that is at least N is B"
claim must hold for the multiple the rule calls for (the kernel alignment, or in 'all' mode
lcm(Mamba chunk or given Mamba block size, alignment)); and B must be the value set.
"""

from __future__ import annotations

import math
import re

import pytest

from support import FIXTURES, load_cases
from enginecfg import EngineConfig, Pipeline
from enginecfg.pipeline.plugins import builtin_stages

CASES = [c for c in load_cases() if c["expected"]["status"] == "resolved"]
_N = r"(\d[\d,]*)"
_MUL = re.compile(rf"{_N} x {_N} = {_N}")
_SUB = re.compile(rf"{_N} - {_N} = {_N}")
_CEIL = re.compile(rf"ceil\({_N} / {_N}\) = {_N}")
_LCM = re.compile(rf"lcm\([^)]*?{_N}, [^)]*?{_N}\) = {_N}")
_SMALLEST = re.compile(rf"smallest multiple of (?:the kernel alignment )?{_N} that is at least {_N} is {_N}")
#: stages whose changes are computed from numbers or a rule, and so must explain them
EXPLAINING_STAGES = {"hybrid-alignment", "mamba-cache-mode", "gemma4-backend", "ssm-dtype",
                     "engine-defaults"}


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _ints(match) -> list[int]:
    return [_int(g) for g in match.groups()]


def _check_arithmetic(text: str) -> int:
    """Check every arithmetic claim in *text*; returns how many there were."""
    n = 0
    for m in _MUL.finditer(text):
        a, b, c = _ints(m)
        assert a * b == c, (m[0], text)
        n += 1
    for m in _SUB.finditer(text):
        a, b, c = _ints(m)
        assert a - b == c, (m[0], text)
        n += 1
    for m in _CEIL.finditer(text):
        a, b, c = _ints(m)
        assert -(a // -b) == c, (m[0], text)
        n += 1
    for m in _LCM.finditer(text):
        a, b, c = _ints(m)
        assert math.lcm(a, b) == c, (m[0], text)
        n += 1
    return n


def _run(case):
    path = str(FIXTURES / case["config"])
    cfg = EngineConfig.from_pretrained(path, **case["engine_args"])
    return Pipeline(stages=builtin_stages(), gpu_validation="off").run(cfg)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_explanations_match_the_runs_numbers(case, warm_snapshots):
    result = _run(case)
    doc = result.to_dict()
    pages = doc["pages"]
    mc = doc["config"]["model_config"]
    for change in doc["changes"]:
        text = change["explanation"]
        if change["stage"] in EXPLAINING_STAGES:
            assert text, change
        if not text:
            continue
        _check_arithmetic(text)
        field, new = change["field"], change["new"]
        if field in ("cache_config.block_size", "cache_config.mamba_page_size_padded") or (
                field == "cache_config.mamba_block_size" and change["stage"] == "hybrid-alignment"
                and "'all' mode" in text):
            mamba, attn1 = pages["mamba_page_size"], pages["attn_page_size_1_token"]
            assert f"{mamba:,} bytes" in text and f"{attn1:,}" in text, text
        if field == "cache_config.block_size" and change["stage"] == "hybrid-alignment" or (
                field == "cache_config.mamba_block_size" and "'all' mode" in text):
            m = _SMALLEST.search(text)
            assert m, text
            multiple, need, block = _ints(m)
            assert need == -(pages["mamba_page_size"] // -pages["attn_page_size_1_token"])
            align = pages["kernel_block_alignment_size"]
            if "'all' mode" in text:
                base = case["engine_args"].get("mamba_block_size") or mc["mamba_chunk_size"]
                assert multiple == math.lcm(base, align), text
            else:
                assert multiple == align, text
            assert block % multiple == 0 and block >= need > block - multiple, text
            assert block == new, (block, new)
        if field == "cache_config.mamba_page_size_padded":
            bs = doc["config"]["cache_config"]["block_size"]
            assert f"{bs:,} x {pages['attn_page_size_1_token']:,} = {new:,}" in text
            pad = new - pages["mamba_page_size"]
            assert f"{pad:,} bytes ({100 * pad / pages['mamba_page_size']:.2f}%" in text
        if change["stage"] == "engine-defaults":
            assert text.endswith(f"so it is {'on' if new else 'off'}.")
            assert f"{mc['runner_type']} model" in text
        if field == "cache_config.mamba_ssm_cache_dtype":
            assert repr(new) in text
        if field == "cache_config.mamba_block_size" and "max_model_len" in text:
            assert f"max_model_len = {mc['max_model_len']:,}" in text and new == mc["max_model_len"]


def test_nemotron_h_56b_prefix_caching_states_the_all_mode_rule(warm_snapshots):
    """The case the wrong explanation was found on: 4,224 is a multiple of 128, not of 16."""
    case = next(c for c in CASES if c["config"].endswith("nemotron-h-56b-base-8k")
                and c["engine_args"] == {"enable_prefix_caching": True})
    result = _run(case)
    (bs,) = [c for c in result.changes if c.field == "cache_config.block_size"]
    assert bs.new == 4224
    assert "lcm(the Mamba chunk size 128, the kernel alignment 16) = 128" in bs.explanation
    assert "ceil(16,900,096 / 4,096) = 4,126" in bs.explanation
    assert "smallest multiple of 128 that is at least 4,126 is 4,224" in bs.explanation


def test_the_fixtures_exercise_every_kind_of_explanation(warm_snapshots):
    kinds = set()
    for case in CASES:
        for c in _run(case).changes:
            if c.explanation:
                mode = "all" if "'all' mode" in c.explanation else "align" if "'align'" in c.explanation else ""
                kinds.add((c.field, mode))
    assert {("cache_config.block_size", "all"), ("cache_config.block_size", ""),
            ("cache_config.mamba_page_size_padded", ""), ("cache_config.mamba_block_size", "all"),
            ("cache_config.mamba_block_size", "align")} <= kinds
