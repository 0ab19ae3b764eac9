"""``ssm-dtype``: the SSM-state dtype of NemotronH and Qwen3.5 checkpoints."""

from __future__ import annotations

import pytest

from support import check_stage_against_fixture, resolved_cases

FIELDS = {"cache_config": ["mamba_ssm_cache_dtype"]}
CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decides_what_vllm_decided(case, warm_snapshots):
    check_stage_against_fixture("ssm-dtype", FIELDS, case)
