"""``vllm-checks``: the checks vLLM runs right after the verification steps (heads divisible
by TP, the quantization dtype, ``--mamba-block-size`` only with prefix caching)."""

from __future__ import annotations

import pytest

from support import FIXTURES, load_cases
from enginecfg import ConfigRejectedError, EngineConfig
from enginecfg.stages.vllm_checks import VllmChecksStage
from enginecfg.testing import run_stage

AFTER_VERIFY = [c for c in load_cases()
                if (c["expected"].get("error") or {}).get("stage") == "VllmConfig.__post_init__ (after try_verify)"]


def test_there_are_cases_of_this_step():
    assert len(AFTER_VERIFY) >= 10


@pytest.mark.parametrize("case", AFTER_VERIFY, ids=[c["name"] for c in AFTER_VERIFY])
def test_refuses_what_vllm_refused_right_after_verification(case, warm_snapshots):
    path = str(FIXTURES / case["config"])
    cfg = EngineConfig.from_pretrained(path, **case["engine_args"])
    with pytest.raises(ConfigRejectedError) as info:
        run_stage(VllmChecksStage, cfg)
    assert info.value.stage == "vllm-checks"
    want = " ".join(case["expected"]["error"]["message"].split()).split(". ")[0]
    assert want in " ".join(str(info.value).split())
