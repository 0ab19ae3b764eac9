"""``enginecfg explain`` / ``plan``: the impact fact, its findings and their causes (read here
as the commands' ``--json`` documents; tests/test_commands.py holds the typed values)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from support import CONFIGS

from enginecfg import EngineConfig, Pipeline
from enginecfg.commands import explain as explain_value, plan as plan_value
from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.models.capacity import ImpactUnavailable

EXPECTED = json.loads((Path(__file__).parent / "kv_oracle" / "expected.json").read_text())
QWEN = CONFIGS / "qwen3.5-27b"
NEMOTRON_56B = CONFIGS / "nemotron-h-56b-base-8k"
NANO = CONFIGS / "nemotron-3-nano-30b-a3b-bf16"
GEMMA = CONFIGS / "gemma-4-26b-a4b"
#: an H200 (as its driver reports it) at vLLM's default utilization
DEFAULT_OPTS = {"gpu": "H200", "gpu_memory_gib": None, "gpu_memory_utilization": 0.9, "kv_cache_memory": None}


def explain(path, args, memory):
    """The ``explain --json`` document of one setting."""
    return explain_value(path, memory=memory, **args).to_dict()


def plan(path, base, grid, memory, context):
    """The ``plan --json`` document of a grid."""
    return plan_value(path, grid, memory=memory, context=context, **base).to_dict()


def _by_id(doc):
    return {f["id"]: f for f in doc["findings"]}


def _expected(name):
    return next(c for c in EXPECTED["cases"] if c["name"] == name)


def test_impact_is_in_the_run_document_and_matches_vllm_at_a_budget():
    case = _expected("qwen3.5-27b/fp8")
    row = case["budgets"][2]
    result = Pipeline(gpu_validation="off", impact={"kv_cache_memory": row["available_memory"]}).run(
        EngineConfig.from_pretrained(QWEN, kv_cache_dtype="fp8"))
    doc = result.to_dict()
    imp = doc["impact"]
    assert imp["memory"]["source"] == "--kv-cache-memory" and imp["memory"]["weights"] is None
    assert (imp["num_blocks"], imp["kv_tokens"], imp["max_concurrency"]) == (
        row["num_blocks"], row["kv_tokens"], row["max_concurrency"])
    assert imp["concurrency"] == row["max_concurrency_at"]
    assert imp["max_model_len_fits"] == row["group_estimate_max_model_len"]
    assert [g["page_size_bytes"] for g in imp["groups"]] == [g["page_size_bytes"] for g in case["groups"]]
    # the stage changes nothing
    assert all(c.stage != "impact" for c in result.changes)


def test_qwen35_default_has_no_large_block_finding():
    doc = explain(QWEN, {}, DEFAULT_OPTS)
    assert doc["impact"]["groups"][-1]["block_size"] == 784
    assert "large-hybrid-block" not in _by_id(doc)


@pytest.mark.parametrize("prefix", [False, True])
def test_qwen35_fp8_large_block_with_and_without_prefix_caching(prefix):
    doc = explain(QWEN, {"kv_cache_dtype": "fp8", "enable_prefix_caching": prefix}, DEFAULT_OPTS)
    f = _by_id(doc)["large-hybrid-block"]
    assert f["figures"]["block_size"] == 1568
    # one page per group and layer slot; two Mamba pages per group in the 'align' mode
    mamba_groups = sum(g["kind"] == "mamba" for g in doc["impact"]["groups"])
    pages_per_slot = 1 + mamba_groups * (2 if prefix else 1)
    assert f["figures"]["min_pages_per_request"] == 16 * pages_per_slot
    assert f["figures"]["min_request_bytes"] == 16 * pages_per_slot * f["figures"]["page_size_bytes"]
    assert f["caused_by"]["stage"] == "hybrid-alignment"
    assert f["caused_by"]["field"] == "cache_config.block_size" and f["caused_by"]["new"] == 1568
    if prefix:
        assert f["figures"]["prefix_cache_granularity"] == 1568
        assert "whole blocks of 1,568 tokens" in f["message"]
    else:
        assert f["figures"]["prefix_cache_granularity"] is None
        assert "prefix caching" not in f["message"]


def test_nemotron_h_float16_ssm_state_from_the_flag():
    doc = explain(NEMOTRON_56B, {"mamba_ssm_cache_dtype": "float16"}, DEFAULT_OPTS)
    f = _by_id(doc)["16-bit-ssm-state"]
    assert f["figures"] == {"ssm_state_dtype": "float16"}
    assert f["caused_by"] == {"engine_argument": "--mamba-ssm-cache-dtype", "value": "float16"}
    assert _by_id(doc)["large-hybrid-block"]["figures"]["block_size"] > 1024
    assert "16-bit-ssm-state" not in _by_id(explain(NEMOTRON_56B, {}, DEFAULT_OPTS))


def test_nemotron_h_float16_ssm_state_from_the_checkpoint(tmp_path):
    raw = json.loads((NANO / "config.json").read_text())
    raw["mamba_ssm_cache_dtype"] = "float16"
    (tmp_path / "config.json").write_text(json.dumps(raw))
    doc = explain(tmp_path, {}, DEFAULT_OPTS)
    f = _by_id(doc)["16-bit-ssm-state"]
    assert f["caused_by"]["stage"] == "ssm-dtype"
    assert f["caused_by"]["new"] == "float16"


def test_gemma4_forced_triton_attention():
    doc = explain(GEMMA, {}, DEFAULT_OPTS)
    f = _by_id(doc)["forced-triton-attn"]
    url = "https://github.com/vllm-project/vllm/issues/38887"
    assert f["figures"] == {"backend": "TRITON_ATTN", "attention_layers": 30, "source": url}
    assert f"vLLM issue #38887 ({url})" in f["message"] and "Published reports" not in f["message"]
    assert f["caused_by"]["stage"] == "gemma4-backend"
    assert f["caused_by"]["old"] is None and f["caused_by"]["new"] == "TRITON_ATTN"
    assert "forced-triton-attn" not in _by_id(explain(GEMMA, {"attention_backend": "FLASH_ATTN"}, DEFAULT_OPTS))
    assert doc["impact"]["starts"] is True


BACKENDS = json.loads((Path(__file__).parent / "capacity_oracle" / "backends.json").read_text())


@pytest.mark.parametrize("case", BACKENDS["cases"], ids=lambda c: f"{c['config']}-{c['engine_args']}")
def test_a_chosen_backend_that_cannot_serve_a_head_size_stops_the_start(case):
    """vLLM 0.19.0's own answer (tests/capacity_oracle/make_backends.py): the backend a caller
    chose must serve every head size of the model, or the engine stops when it builds the
    layers; FlashAttention and FlashInfer stop at 256, Gemma 4's global layers are 512 wide."""
    doc = explain(CONFIGS / case["config"], case["engine_args"], DEFAULT_OPTS)
    errors = [h["error"] for h in case["head_sizes"].values() if h["error"]]
    if not errors:
        assert doc["impact"]["starts"] and "backend-head-size" not in _by_id(doc)
        return
    assert not doc["impact"]["starts"] and doc["impact"]["start_error"] == errors[0]
    f = _by_id(doc)["backend-head-size"]
    bad = [int(h) for h, r in case["head_sizes"].items() if r["error"]]
    assert f["figures"]["head_sizes"] == bad and f["figures"]["start_error"] == errors[0]
    assert f["caused_by"] == {"engine_argument": "--attention-backend",
                              "value": case["engine_args"]["attention_backend"]}
    assert errors[0] in f["message"]


def test_mamba_padding_over_five_percent():
    doc = explain(CONFIGS / "jamba-1.5-mini", {}, DEFAULT_OPTS)
    f = _by_id(doc)["mamba-padding"]
    case = _expected("jamba-1.5-mini/default")
    real, padded = case["mamba"]["real_page_size_bytes"], case["mamba"]["page_size_padded"]
    assert f["figures"]["bytes"] == padded - real
    assert f["figures"]["percent"] == round(100 * (padded - real) / real, 2) > 5
    assert f["caused_by"]["stage"] == "hybrid-alignment"
    assert f["caused_by"]["field"] == "cache_config.mamba_page_size_padded"


def test_does_not_fit_names_the_largest_context():
    doc = explain(QWEN, {}, dict(DEFAULT_OPTS, kv_cache_memory=4 * 2**30))
    f = _by_id(doc)["does-not-fit"]
    row = _expected("qwen3.5-27b/default")["budgets"][1]
    assert f["figures"]["max_model_len_fits"] == row["group_estimate_max_model_len"]


def test_plan_grid_marks_the_best_settings():
    doc = plan(QWEN, {}, {"tensor_parallel_size": [1, 2, 4, 8], "kv_cache_dtype": ["auto", "fp8"]},
               DEFAULT_OPTS, 8192)
    rows = doc["rows"]
    assert len(rows) == 8 and all("error" not in r for r in rows)
    # each grid point equals a single explain of the same setting
    one = explain(QWEN, {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8"}, DEFAULT_OPTS)["impact"]
    r = next(r for r in rows if r["setting"] == {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8"})
    assert (r["kv_tokens"], r["max_concurrency"]) == (one["kv_tokens"], one["max_concurrency"])
    best = doc["best"]
    assert rows[best["concurrency"]]["concurrency"] == max(x["concurrency"] for x in rows)
    assert rows[best["granularity"]]["granularity"] == min(x["granularity"] for x in rows)


def test_plan_keeps_a_rejected_setting_as_a_row():
    doc = plan(CONFIGS / "olmo-hybrid-default", {}, {"tensor_parallel_size": [1, 4]}, DEFAULT_OPTS, 8192)
    assert "error" not in doc["rows"][0] and "error" in doc["rows"][1]


def test_bad_memory_options_name_the_field():
    with pytest.raises(InvalidInputError, match="gpu_memory_utilization"):
        explain(QWEN, {}, dict(DEFAULT_OPTS, gpu_memory_utilization=1.5))
    with pytest.raises(InvalidInputError, match="kv_cache_memory"):
        explain(QWEN, {}, dict(DEFAULT_OPTS, kv_cache_memory="16G"))
    with pytest.raises(InvalidInputError, match="num_gpu_blocks_override"):
        explain(QWEN, {}, dict(DEFAULT_OPTS, num_gpu_blocks_override=0))
    with pytest.raises(InvalidInputError, match="did you mean 'H200'"):
        explain(QWEN, {}, dict(DEFAULT_OPTS, gpu="H300"))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "enginecfg", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_explain_and_plan():
    proc = _cli("explain", str(GEMMA), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "forced-triton-attn" in _by_id(doc)
    proc = _cli("explain", str(QWEN), "--kv-cache-dtype", "fp8")
    assert proc.returncode == 0 and "large-hybrid-block" in proc.stdout and "GPU KV cache size" in proc.stdout
    proc = _cli("plan", str(QWEN), "--tp", "1,2", "--kv-cache-dtype", "auto,fp8", "--json")
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["rows"]) == 4
    proc = _cli("plan", str(QWEN), "--tp", "1,x")
    assert proc.returncode == 2 and "--tp" in proc.stderr
    proc = _cli("explain", str(QWEN), "--gpu-memory-utilization", "0")
    assert proc.returncode == 2 and "gpu_memory_utilization" in proc.stderr


@pytest.mark.parametrize("folder, field, value, allowed", [
    ("gemma4-text-default", "num_kv_shared_layers", -1, "an integer >= 0"),
    ("jamba-default", "mamba_dt_rank", -3, "a non-negative integer"),
])
def test_a_bad_field_the_figures_need_is_named_and_the_run_still_resolves(tmp_path, folder, field, value,
                                                                          allowed):
    raw = json.loads((CONFIGS / folder / "config.json").read_text())
    raw[field] = value
    (tmp_path / "config.json").write_text(json.dumps(raw))
    result = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(tmp_path))
    assert result.status == "resolved"
    impact = result.impact
    assert isinstance(impact, ImpactUnavailable) and impact.field == f"hf_config.{field}"
    assert repr(value) in impact.error and allowed in impact.error
    assert result.to_dict()["impact"] == {"error": impact.error, "field": impact.field}


def test_run_report_carries_the_kv_headline():
    proc = _cli("run", str(QWEN), "--no-audit", "--gpu-validation", "off")
    assert proc.returncode == 0, proc.stderr
    doc = explain(QWEN, {}, DEFAULT_OPTS)["impact"]
    assert f"GPU KV cache size: {doc['kv_tokens']:,} tokens" in " ".join(proc.stdout.split())


def test_weights_larger_than_the_gpu_leave_no_kv_memory():
    doc = explain(CONFIGS / "nemotron-3-ultra-550b-a55b-bf16", {}, DEFAULT_OPTS)
    f = _by_id(doc)["no-kv-memory"]
    assert f["figures"]["weights_per_gpu"] > f["figures"]["usable_bytes"] == math.ceil(150_109_880_320 * 0.9)
    assert doc["impact"]["kv_tokens"] == 0 and "does-not-fit" not in _by_id(doc)
    caused = explain(CONFIGS / "nemotron-3-ultra-550b-a55b-bf16", {"tensor_parallel_size": 2}, DEFAULT_OPTS)
    assert _by_id(caused)["no-kv-memory"]["caused_by"] == {"engine_argument": "--tensor-parallel-size",
                                                          "value": 2}
    big = explain(CONFIGS / "nemotron-3-ultra-550b-a55b-bf16", {}, dict(DEFAULT_OPTS, gpu_memory_gib=2000))
    assert "no-kv-memory" not in _by_id(big) and big["impact"]["kv_tokens"] > 0
