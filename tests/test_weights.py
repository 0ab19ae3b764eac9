"""The weights estimate: parameter counts from the config's shapes against the published sizes."""

from __future__ import annotations

import pytest
from support import CONFIGS

from enginecfg import EngineConfig, Pipeline
from enginecfg.pipeline.models.weights import estimate_weights

# folder -> the total parameter count its publisher states (billions)
PUBLISHED = {
    "qwen3.5-27b": 27, "qwen3.5-35b-a3b": 35, "qwen3.5-122b-a10b": 122, "qwen3.5-397b-a17b": 397,
    "nemotron-3-nano-30b-a3b-bf16": 31.6, "nemotron-3-super-120b-a12b-fp8": 120,
    "nemotron-h-56b-base-8k": 56, "qwen3-next-80b-a3b-thinking": 80, "jamba-1.5-mini": 52,
    "gemma-4-26b-a4b": 26, "mamba-codestral-7b-v0.1": 7.3, "mamba-130m-hf": 0.13,
}


def _cfg(folder, **args):
    return Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(CONFIGS / folder, **args)).config


@pytest.mark.parametrize("folder", sorted(PUBLISHED))
def test_parameter_count_within_eight_percent_of_the_published_size(folder):
    est = estimate_weights(_cfg(folder))
    assert est.params == pytest.approx(PUBLISHED[folder] * 1e9, rel=0.08)


def test_bytes_follow_dtype_quantisation_and_tp():
    bf16 = estimate_weights(_cfg("gemma-4-26b-a4b"))
    fp4 = estimate_weights(_cfg("gemma-4-26b-a4b-nvfp4"))
    assert fp4.params == bf16.params
    assert fp4.bytes_total < bf16.bytes_total / 2.5
    assert any("4.5 bits" in line for line in fp4.basis)
    tp4 = estimate_weights(_cfg("qwen3.5-27b", tensor_parallel_size=4))
    one = estimate_weights(_cfg("qwen3.5-27b"))
    # a rank holds a quarter of the sharded weights (the vocabulary padded to 64 and split, KV
    # heads replicated where fewer than ranks) and every norm
    assert tp4.bytes_total == one.bytes_total
    assert one.bytes_total / 4 <= tp4.bytes_per_gpu <= one.bytes_total / 4 * 1.01
    f32 = estimate_weights(_cfg("mamba-130m-hf", dtype="float32"))
    assert f32.bytes_total == 2 * estimate_weights(_cfg("mamba-130m-hf")).bytes_total
