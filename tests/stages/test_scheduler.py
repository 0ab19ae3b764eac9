"""``scheduler``: the checks of vLLM's scheduler config (its token budget against max_model_len
without chunked prefill, against max_num_seqs; the defaults a max_model_len of 0 makes 0),
held against the real vLLM 0.19.0's answers (``tests/issue29_oracle``, item 3)."""

from __future__ import annotations

import pytest

from issue29_support import case_path, cases, check, deliberate
from support import FIXTURES, resolved_cases
from enginecfg import ConfigRejectedError, EngineConfig, InvalidInputError
from enginecfg.stages.scheduler import SchedulerStage
from enginecfg.testing import run_stage

#: the item 3 cases the stage decides: vLLM answered at this step, or resolved
STEP = [c for c in cases("3/") + cases("1/")
        if c["status"] == "resolved" or "SchedulerConfig" in c["error"]["message"]]


def test_there_are_cases_of_this_step():
    assert len([c for c in STEP if c["status"] == "error"]) >= 20
    assert len([c for c in STEP if c["status"] == "resolved"]) >= 20


@pytest.mark.parametrize("case", STEP, ids=[c["name"] for c in STEP])
def test_answers_as_vllms_scheduler_config(case, warm_snapshots):
    try:
        got = run_stage(SchedulerStage, case_path(case), **case["args"])
    except (ConfigRejectedError, InvalidInputError) as exc:
        got = exc
    if case["status"] == "resolved":
        if deliberate(case):   # enginecfg's own refusal, when the run ends
            assert isinstance(got, InvalidInputError) and got.field == deliberate(case)
            assert got.stage == "engine-args"
        else:
            assert not isinstance(got, Exception), got
        return
    check(case, got)
    assert got.stage in ("scheduler", "engine-args")


RESOLVED = resolved_cases()


@pytest.mark.parametrize("case", RESOLVED, ids=[c["name"] for c in RESOLVED])
def test_every_fixture_case_vllm_resolved_passes(case, warm_snapshots):
    result = run_stage(SchedulerStage, EngineConfig.from_pretrained(str(FIXTURES / case["config"]),
                                                                    **case["engine_args"]))
    assert [m for m in result.messages if m.stage == "scheduler"] == []


def test_the_length_check_needs_chunked_prefill_off(warm_snapshots):
    path = str(FIXTURES / "configs" / "deepseek-v2-lite-like")
    run_stage(SchedulerStage, path, max_num_batched_tokens=1024)              # chunked prefill on
    with pytest.raises(ConfigRejectedError, match=r"max_num_batched_tokens \(1024\) is smaller than "
                                                  r"max_model_len \(2048\)\. This effectively") as info:
        run_stage(SchedulerStage, path, max_num_batched_tokens=1024, enable_chunked_prefill=False)
    assert info.value.field == "scheduler_config.max_num_batched_tokens"
    with pytest.raises(ConfigRejectedError, match=r"max_num_batched_tokens \(2048\) must be greater than or "
                                                  r"equal to max_num_seqs \(4096\)\."):
        run_stage(SchedulerStage, path, max_num_batched_tokens=2048, max_num_seqs=4096)
