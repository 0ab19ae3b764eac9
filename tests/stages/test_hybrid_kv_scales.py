"""``hybrid-kv-scales``: no KV-scale calibration for hybrid models."""

from __future__ import annotations

import pytest

from support import check_stage_against_fixture, resolved_cases

FIELDS = {"cache_config": ["calculate_kv_scales"]}
CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decides_what_vllm_decided(case, warm_snapshots):
    check_stage_against_fixture("hybrid-kv-scales", FIELDS, case)
