"""Explanations travel from the stage to the audit store and back out through ``why``/``show``."""

from __future__ import annotations

from support import CONFIGS
from enginecfg import Pipeline
from enginecfg.store import AuditStore


def test_explanations_are_stored_and_given_back(db_url, warm_snapshots):
    with AuditStore(db_url).attach() as store:
        result = Pipeline(gpu_validation="off").resolve(str(CONFIGS / "nemotron-h-56b-base-8k"),
                                                        enable_prefix_caching=True)
    run = store.get_run(result.run_id)
    stored = {c["seq"]: c["explanation"] for c in run["changes"]}
    assert stored == {c.seq: c.explanation for c in result.changes}
    why = store.why(result.run_id, "cache_config.block_size")
    (bs,) = [c for c in why["changes"] if c["field"] == "cache_config.block_size"]
    assert "lcm(the Mamba chunk size 128, the kernel alignment 16) = 128" in bs["explanation"]
    assert store.verify().ok
    store.close()
