"""``mamba-cache-mode``: the Mamba prefix-cache mode (mamba_block_size is final only after hybrid-alignment)."""

from __future__ import annotations

import pytest

from support import check_stage_against_fixture, resolved_cases

FIELDS = {"cache_config": ["mamba_cache_mode"]}
CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decides_what_vllm_decided(case, warm_snapshots):
    check_stage_against_fixture("mamba-cache-mode", FIELDS, case)
