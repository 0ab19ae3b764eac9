"""``gemma4-backend``: TRITON_ATTN for Gemma 4 with heterogeneous head sizes over 256."""

from __future__ import annotations

import pytest

from support import check_stage_against_fixture, resolved_cases

FIELDS = {"attention_config": ["backend"]}
CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decides_what_vllm_decided(case, warm_snapshots):
    check_stage_against_fixture("gemma4-backend", FIELDS, case)
