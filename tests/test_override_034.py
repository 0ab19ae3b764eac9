"""``--num-gpu-blocks-override`` under vLLM 0.34.0, against vLLM 0.34.0's own planning.

Ground truth: ``tests/override_oracle/answers-034.json``, made by ``ask_override.py`` there
(the unmodified 0.34 oracle: the real model class built on the meta device, then
``get_kv_cache_configs`` / ``get_kv_cache_capacity`` at explicit budgets of 2, 17 and 64 GiB)
on a hybrid (Qwen3.5-27B, prefix caching on and off), an attention model with sliding
windows (Gemma 4 text) and an MLA model (DeepSeek-V2-Lite).  In 0.34.0 the override sets the
memory the planning works with (the override's blocks at the pool's bytes per block) before
the start-up check: the check, its text and length estimate, the block count and the
concurrency all follow from the override, whatever the budget; and the override keeps the
extensible KV cache off (``VllmConfig._resolve_extensible_kv_cache``), so the text gives the
other hint.  The answers were made with
transformers 5.22.2 (vLLM 0.34.0 pins it below 5.23); the configs read the same under 5.23.0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support import CONFIGS, REPO, VLLM034
from enginecfg import Pipeline
from enginecfg.pipeline.models.gpus import find_gpu
from enginecfg.pipeline.models.v034 import kv_planning

ANSWERS = json.loads((REPO / "tests" / "override_oracle" / "answers-034.json").read_text())
H200 = find_gpu("H200")


def _folder(case) -> str:
    name = Path(case["config_dir"]).name
    folder = CONFIGS / name
    return str(folder if folder.exists() else VLLM034 / "configs" / name)


def _split(args: dict) -> tuple[dict, int]:
    args = dict(args)
    return args, args.pop("num_gpu_blocks_override")


@pytest.mark.parametrize("case", ANSWERS["cases"], ids=[c["name"] for c in ANSWERS["cases"]])
def test_the_override_plans_as_vllm_034_plans_it(case, warm_snapshots):
    assert case["built"] and case["error"] is None
    engine, override = _split(case["args"])
    result = Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(_folder(case), **engine)
    assert result.startup.block_size == case["block_size"]
    cfg, mml = result.config, result.config.model_config.max_model_len
    logged = iter(case["override_logs"])
    for want in case["budgets"]:
        imp = kv_planning.impact(cfg, startup=kv_planning.startup_key(result.startup), gpu=kv_planning.gpu_key(H200),
                                 kv_cache_memory=want["available_memory"], extensible=False,
                                 num_gpu_blocks_override=override)
        # vLLM logs the block count the memory gave, then plans with the override's
        line = next(logged)
        assert line["message"] == f"Overriding num_gpu_blocks={imp.blocks_from_memory} with " \
                                  f"num_gpu_blocks_override={override}"
        assert imp.memory.num_gpu_blocks_override == override
        if want["error"] is not None:
            assert imp.fits == want["error"] and not imp.starts, want["budget_gib"]
            continue
        assert imp.fits is None and imp.starts
        assert (imp.num_blocks, imp.kv_tokens, imp.max_concurrency) == \
            (want["num_blocks"], want["kv_tokens"], want["max_concurrency"]), want["budget_gib"]
        assert imp.num_blocks == override
        for n, value in want["max_concurrency_at"].items():
            assert imp.concurrency_at(int(n)) == (value if int(n) <= mml else None), n


def test_the_impact_stage_passes_the_override(warm_snapshots):
    case = next(c for c in ANSWERS["cases"] if c["name"] == "qwen3.5-27b/override-1000")
    engine, override = _split(case["args"])
    want = next(b for b in case["budgets"] if b["budget_gib"] == 17)
    result = Pipeline(vllm_version="0.34.0", gpu_validation="off",
                      impact={"kv_cache_memory": want["available_memory"], "num_gpu_blocks_override": override}
                      ).resolve(_folder(case), **engine)
    imp = result.impact
    assert (imp.num_blocks, imp.kv_tokens, imp.max_concurrency) == \
        (want["num_blocks"], want["kv_tokens"], want["max_concurrency"])
    assert imp.to_dict()["blocks_from_memory"] == want["available_memory"] // case["bytes_per_block"]
    # the override keeps the extensible KV cache off: the utilization defaults to 0.92
    result = Pipeline(vllm_version="0.34.0", gpu_validation="off",
                      impact={"num_gpu_blocks_override": override}).resolve(_folder(case), **engine)
    assert result.impact.memory.gpu_memory_utilization == 0.92 and result.impact.num_blocks == override


def test_a_kv_cache_memory_of_0_reads_as_unset_under_034():
    """vLLM 0.34.0's worker reads ``--kv-cache-memory-bytes 0`` as unset and measures the memory
    (``if kv_cache_memory_bytes := ...``), though the flag, given, keeps the extensible KV cache
    off (its utilization default 0.92)."""
    from enginecfg import Pipeline

    r = Pipeline(vllm_version="0.34.0", gpu_validation="off", impact={"kv_cache_memory": 0}).resolve(
        str(CONFIGS / "qwen3.5-27b"))
    assert r.impact.memory.source == "estimate" and r.impact.memory.weights is not None
    assert r.impact.memory.gpu_memory_utilization == 0.92 and r.impact.kv_tokens > 0
