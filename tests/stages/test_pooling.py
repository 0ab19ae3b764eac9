"""``pooling``: LlamaNemotronVL embedding and reranking: bidirectional attention, the vision patch size, the pooling type."""

from __future__ import annotations

import pytest

from support import check_stage_against_fixture, resolved_cases

FIELDS = {"pooler_config": ["seq_pooling_type", "tok_pooling_type"], "hf_config": ["is_causal", "patch_size"]}
CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decides_what_vllm_decided(case, warm_snapshots):
    check_stage_against_fixture("pooling", FIELDS, case)
