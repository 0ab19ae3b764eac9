"""The dated rules the shared machinery switches per release answer as the releases run did.

0.32.0 differs from 0.34.0 by rules the machinery switches (the Mamba prefill checkpoints B6b/S3e,
the not-enough-memory text K7b, ...) and by four it does not model on either side (C1f, C4d,
K10b, S2e: ``enginecfg releases`` lists them): on every case its oracle answered, enginecfg
answers as 0.32.0 did.
"""

from __future__ import annotations

from enginecfg.pipeline import releases
from enginecfg.pipeline.models.v034 import kv_planning

from release_oracle_support import cases, compare, known
from test_release_oracles import KNOWN


def test_every_case_of_0_32_0_answers_as_its_oracle(warm_snapshots):
    found = [d for case_id, r in cases("0.32.0") for d in compare("0.32.0", case_id, r) if known(d, KNOWN) is None]
    assert found == []


def test_the_not_enough_memory_text_follows_the_latest_k7_rule():
    args = (2 * 2**30, 2**30, 4096, 2048)
    old = kv_planning.not_enough_memory(*args, extensible=False, wording="")
    k7a = kv_planning.not_enough_memory(*args, extensible=False, wording="K7a")
    k7b = kv_planning.not_enough_memory(*args, extensible=False, wording="K7b")
    assert "the models's max seq len" in old and "Try increasing `gpu_memory_utilization` or decreasing" in old
    assert "the model's max seq len" in k7a
    assert "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing" in k7a
    assert "despite its name" in k7b and "Decreasing `max_model_len` also reduces what is needed." in k7b


def test_the_null_block_rule_is_dated_between_the_runs():
    assert not releases.get("0.28.0").has("K11") and releases.get("0.32.0").has("K11")
    assert releases.brought_by("K11").name == "0.29.0"
