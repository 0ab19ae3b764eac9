"""``engine-defaults``: chunked prefill and prefix caching the caller left unset, after the pooling decision."""

from __future__ import annotations

import pytest

from support import check_stage_against_fixture, resolved_cases

FIELDS = {"scheduler_config": ["enable_chunked_prefill"], "cache_config": ["enable_prefix_caching"]}
CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decides_what_vllm_decided(case, warm_snapshots):
    check_stage_against_fixture("engine-defaults", FIELDS, case)
