"""``impact``: the KV-cache cost of the resolved settings, recorded as a fact; it changes nothing.

The figures themselves are held to vLLM's own arithmetic in tests/test_kv_cache.py; here the
stage's contract: no change, a fact on every resolved fixture, and options that move it."""

from __future__ import annotations

import pytest

from support import FIXTURES, resolved_cases
from enginecfg import InvalidInputError, Pipeline
from enginecfg.pipeline.models.capacity import Impact
from enginecfg.stages.impact import ImpactStage
from enginecfg.testing import run_stage

CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_changes_nothing_and_records_the_impact(case, warm_snapshots):
    path = str(FIXTURES / case["config"])
    result = run_stage(ImpactStage, path, **case["engine_args"])
    assert [c for c in result.changes if c.stage == "impact"] == []
    assert isinstance(result.impact, Impact)
    assert result.to_dict()["impact"] == result.impact.to_dict()


def test_more_kv_memory_holds_more_tokens(warm_snapshots):
    path = str(FIXTURES / "configs" / "qwen3.5-27b")
    small = run_stage(ImpactStage, path).impact
    from enginecfg import EngineConfig

    big = Pipeline(gpu_validation="off", impact={"kv_cache_memory": 2 * small.memory.kv_cache_memory}) \
        .run(EngineConfig.from_pretrained(path)).impact
    assert big.num_blocks > small.num_blocks and big.kv_tokens > small.kv_tokens


def test_a_bad_option_names_itself():
    with pytest.raises(InvalidInputError, match="gpu_memory_utilization"):
        Pipeline(gpu_validation="off", impact={"gpu_memory_utilization": 1.5})


def test_the_figures_are_a_value_that_travels(warm_snapshots):
    import pickle

    imp = run_stage(ImpactStage, str(FIXTURES / "configs" / "qwen3.5-27b")).impact
    again = pickle.loads(pickle.dumps(imp))
    assert again == imp and again.to_dict() == imp.to_dict()
    assert again.concurrency[8192] == imp.concurrency[8192]
