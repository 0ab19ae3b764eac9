"""The GPU-validation stage, run in Triton's interpreter (CI has no GPU)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import pytest

from support import CONFIGS
from enginecfg import ConfigRejectedError, EngineConfig, Pipeline, Stage
from enginecfg.kernels.kinds import KernelCheck
from enginecfg.pipeline import events
from enginecfg.testing import capture_events
from enginecfg.pipeline.plugins import builtin_stages


def _run(model, stages=None, **args):
    pipeline = Pipeline(stages=stages, gpu_validation="interpret") if stages else Pipeline(gpu_validation="interpret")
    return pipeline.run(EngineConfig.from_pretrained(CONFIGS / model, **args))


def _checks(result):
    return {c["check"]: c for c in result.to_dict()["validation"]["checks"]}


def test_gemma4_both_head_sizes_with_block_size_528():
    with capture_events(events.validation_checked) as captured:
        result = _run("gemma-4-26b-a4b", block_size=528)
    got = captured["validation_checked"]
    v = result.to_dict()["validation"]
    assert v["status"] == "passed" and v["mode"] == "interpret" and v["device"] == "cpu"
    checks = _checks(result)
    assert {"paged-decode-attention-h256", "paged-decode-attention-h512", "paged-prefill-chunk-h512"} <= set(checks)
    assert checks["paged-decode-attention-h512"]["shapes"]["block_size"] == 528
    assert all(c["passed"] and c["max_error"] <= c["tolerance"] for c in checks.values())
    assert {e.check for e in got} == set(checks) and all(e.passed for e in got)
    assert result.config.frozen


def test_hybrid_models_check_state_kernels_and_the_page_layout():
    qwen = _checks(_run("qwen3.5-27b"))          # gated delta net, block 784
    assert {"gated-delta-step", "conv1d-state-update", "hybrid-page-layout",
            "gated-delta-state-precision", "paged-decode-attention-h256"} <= set(qwen)
    nemo = _checks(_run("nemotron-3-nano-30b-a3b-bf16"))   # Mamba2
    assert {"mamba2-state-update", "mamba2-state-precision", "hybrid-page-layout"} <= set(nemo)
    assert all(c["passed"] for c in list(qwen.values()) + list(nemo.values()))
    assert nemo["mamba2-state-update"]["dtype"] == "float32"  # NemotronH's checkpoint ssm dtype


class ShrinkPadding(Stage):
    """A bad page size: the padded Mamba page no longer holds an attention block.

    It stands for a wrong built-in decision, which GPU validation is the last check of: a
    plugin's stage making the same change is refused as soon as it made it (the hybrid
    alignment's check, tests/test_plugin_limits.py)."""
    name = "shrink-padding"
    after = ("vllm-checks",)
    before = ("gpu-validation",)

    def __init__(self):
        self.origin = "built-in"

    def run(self, cfg, ctx):
        ctx.set("cache_config", "mamba_page_size_padded", cfg.cache_config.mamba_page_size_padded - 4096,
                reason="test: a page one token too small")


def test_a_wrong_page_size_is_rejected_and_not_frozen():
    with pytest.raises(ConfigRejectedError, match="GPU validation failed: check hybrid-page-layout") as info:
        _run("qwen3.5-27b", stages=builtin_stages() + [ShrinkPadding()])
    assert info.value.field == "validation.hybrid-page-layout"


def test_a_wrong_kernel_is_rejected(monkeypatch):
    import enginecfg.kernels.paged_attention as pa

    real = pa.paged_decode_attention

    def off_by_a_bit(*args, **kwargs):
        out = real(*args, **kwargs)
        out.add_(0.1)  # a kernel that is slightly wrong everywhere (it writes into `out`)
        return out
    monkeypatch.setattr(pa, "paged_decode_attention", off_by_a_bit)
    with pytest.raises(ConfigRejectedError, match="check paged-decode-attention-h128"):
        _run("nemotron-3-nano-30b-a3b-bf16")


def test_off_and_auto_without_gpu_are_recorded_as_skipped():
    off = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(CONFIGS / "qwen3.5-27b"))
    assert off.to_dict()["validation"] == {"mode": "off", "device": None, "status": "skipped",
                                           "reason": "GPU validation is off (--gpu-validation off)", "checks": []}
    auto = Pipeline().run(EngineConfig.from_pretrained(CONFIGS / "qwen3.5-27b")).to_dict()["validation"]
    assert auto["status"] in ("skipped", "passed")
    if auto["status"] == "skipped":
        assert "CUDA" in auto["reason"]


def test_require_gpu_without_one_fails():
    from enginecfg.stages.gpu_validation import _cuda_present
    if _cuda_present():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigRejectedError, match="require-gpu"):
        Pipeline(gpu_validation="require-gpu").run(EngineConfig.from_pretrained(CONFIGS / "qwen3.5-27b"))


def test_mla_model_gets_a_latent_decode_check():
    checks = _checks(_run("deepseek-v2-lite-like"))
    mla = [c for c in checks.values() if c["kernel"] == "mla_decode_attention"]
    assert len(mla) == 1 and mla[0]["passed"]
    assert mla[0]["shapes"]["kv_lora_rank"] == 512 and mla[0]["shapes"]["qk_rope_head_dim"] == 64
    assert not any(c["kernel"] == "paged_decode_attention" for c in checks.values())


@pytest.mark.parametrize("model,cache", [("gemma-4-26b-a4b", "fp8"), ("deepseek-v2-lite-like", "fp8_e4m3")])
def test_fp8_kv_cache_is_checked_in_fp8(model, cache):
    result = _run(model, kv_cache_dtype=cache)
    checks = _checks(result)
    decode = [c for c in checks.values() if c["kernel"] in ("paged_decode_attention", "mla_decode_attention")]
    assert decode and all(c["dtype"] == "fp8_e4m3" and c["passed"] for c in decode)
    assert all(c["detail"] is None or "model dtype" not in c["detail"] for c in decode)


def test_fp8_plan_uses_the_fp8_check_and_model_dtype_queries():
    from enginecfg.stages.gpu_validation import build_plan

    cfg = _run("qwen3.5-27b", kv_cache_dtype="fp8_e5m2").config
    plan = {c.name: c for c in build_plan(cfg, interpret=False)}
    dec = plan["paged-decode-attention-h256-fp8"]
    assert dec.check is KernelCheck.PAGED_ATTENTION_FP8 and dec.args["kv_dtype"] == "fp8_e5m2"
    assert dec.kernel == "paged_decode_attention"
    assert dec.args["q_dtype"] == cfg.model_config.dtype
    assert plan["gated-delta-step-packed"].check is KernelCheck.GATED_DELTA_PACKED
