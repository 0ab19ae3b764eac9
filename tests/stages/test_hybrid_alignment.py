"""``hybrid-alignment``: the attention block size covering a Mamba page, and the padding."""

from __future__ import annotations

import pytest

from support import check_stage_against_fixture, resolved_cases

FIELDS = {"cache_config": ["block_size", "mamba_block_size", "mamba_page_size_padded"]}
CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decides_what_vllm_decided(case, warm_snapshots):
    check_stage_against_fixture("hybrid-alignment", FIELDS, case)
