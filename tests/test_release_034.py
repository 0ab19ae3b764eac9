"""vLLM 0.34.0's rule pack against the real vLLM 0.34.0, case by case.

Ground truth: ``tests/data/vllm-0.34.0`` (its README and RULES.md; rule ids cited below).
``public-034.json`` holds the 340 public cases on an H200 (34 fixture configs x 10 argument
sets); ``results/*.json.gz`` the same questions on a B200, an A100, an L40S and an H100, the
fixtures' other argument sets on the H200 (``extra-h200``), the one MLA model that builds
(``mla-*``), six probes, and the B200 without TensorRT-LLM.  Every case is compared with
enginecfg's ``Pipeline(vllm_version="0.34.0", gpu=...)``:

- config time (``final``): the cache config, the model facts, the attention backend and the
  FlashAttention version, chunked prefill, the scheduler's limits, vLLM's config-module log
  lines in order, and the errors (type and first sentence);
- the start-up step (``post_load``): the backend of each kind of layer with its FlashAttention
  version and layer count, the distinct attention backends in layer order, the block size,
  Mamba block size and Mamba page padding after ``update_block_size_for_backend`` with its log
  lines, and the model classes that cannot be built (vLLM's exception);
- the KV planning (``kv``): the groups, bytes per block and per request at max_model_len, and
  at 2, 17, 64 and 500 GiB the blocks, the engine block size, the KV tokens, the concurrency
  (at max_model_len and at 1,024 / 8,192 / 32,768 tokens up to max_model_len: above it a
  request cannot exist, and the figures say None there, as 0.19.0's do), the largest
  max_model_len that fits and the not-enough-memory text, word for word.

The answers were made with transformers 5.22.2 (vLLM 0.34.0 pins transformers below 5.23);
enginecfg runs 5.23.0.  No fixture config reads differently between the two where these
answers look (RULES.md open question 3): the model facts of every resolved case are compared
below, and LFM2's missing ``block_dim`` (F3) fails under both.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from support import CONFIGS, VLLM034
from enginecfg import EngineCfgError, InvalidInputError, Pipeline
from enginecfg.pipeline.models.gpus import find_gpu
from enginecfg.pipeline.models.pages import page_facts
from enginecfg.pipeline.models.startup import Startup
from enginecfg.pipeline.models.v034 import config_time, kv_planning
from enginecfg.pipeline.plugins import builtin_stages

GiB = 2**30
FILES = ["public-034.json", "results/public-b200.json.gz", "results/public-a100.json.gz",
         "results/subset-l40s.json.gz", "results/subset-h100.json.gz", "results/extra-h200.json.gz",
         "results/mla-h200.json.gz", "results/mla-b200.json.gz", "results/mla-a100.json.gz",
         "results/probes-h200.json.gz", "results/offline-b200.json.gz"]

#: probes that need engine arguments enginecfg does not take yet
NOT_TAKEN = {
    "qwen3.5-27b/fp8-skip3": "--kv-cache-dtype-skip-layers (S7, not an enginecfg engine argument)",
    "gemma4-text-default/fp8-skipsw": "--kv-cache-dtype-skip-layers (S7, not an enginecfg engine argument)",
}


def _load(name: str) -> dict:
    path = VLLM034 / name
    with (gzip.open(path, "rt") if name.endswith(".gz") else open(path)) as f:
        return json.load(f)


DATA = {name: _load(name) for name in FILES}
CASES = [pytest.param(name, r, id=f"{name.split('/')[-1].split('.')[0]}:{r['name']}",
                      marks=[pytest.mark.xfail(reason=NOT_TAKEN[r["name"]], strict=True)]
                      if r["name"] in NOT_TAKEN else [])
         for name in FILES for r in DATA[name]["results"]]


def _folder(r) -> str:
    folder = CONFIGS / Path(r["config_dir"]).name
    return str(folder if folder.exists() else VLLM034 / "configs" / Path(r["config_dir"]).name)


def _gpu(name: str):
    return find_gpu(DATA[name]["platform"]["device_name"])


def _pipeline(gpu):
    return Pipeline(stages=builtin_stages("0.34.0"), vllm_version="0.34.0", gpu=gpu, gpu_validation="off")


def _label(lb: dict) -> str:
    if lb["kind"] == "mamba":
        return lb["layer_class"]
    if lb["kind"] == "mla":
        return f"MLAAttention head_size={lb['head_size']}"
    window = f" sliding_window={lb['sliding_window']}" if lb["sliding_window"] else ""
    return f"{lb['layer_class']} attn_type={lb['attn_type']} head_size={lb['head_size']}{window}"


def _backend_label(lb: dict) -> str:
    if lb["backend"] == "FLASH_ATTN" and lb["fa_version"]:
        return f"FLASH_ATTN(FA{lb['fa_version']})"
    if lb["backend"] == "TRITON_FLASH_ATTN" and lb["fa_version"]:
        return f"TRITON_FLASH_ATTN(causal FA{lb['fa_version']})"
    return lb["backend"]


def _first_sentence(text: str) -> str:
    return " ".join(text.split()).split(". ")[0]


def _check_error(r, exc: EngineCfgError) -> None:
    err = r["error"]
    if "calculate_kv_scales" in err["message"]:  # C6: refused as an unknown engine argument (exit 2)
        assert isinstance(exc, InvalidInputError) and exc.field == "calculate_kv_scales"
        return
    root = err.get("root_type") or err["type"]
    assert exc.vllm_type == root
    message = err.get("root_message") or err["message"]
    if message.startswith("1 validation error for ModelConfig\n  Assertion failed"):  # C2: a bare assert
        assert str(exc).startswith("1 validation error for ModelConfig: Assertion failed")
    else:
        assert _first_sentence(message) in " ".join(str(exc).split())


_CACHE = ("block_size", "user_specified_block_size", "cache_dtype", "enable_prefix_caching", "mamba_cache_mode",
          "mamba_block_size", "mamba_page_size_padded", "mamba_ssm_cache_dtype", "mamba_cache_dtype")
_MODEL = ("architecture", "dtype", "max_model_len", "is_hybrid", "is_attention_free", "use_mla", "head_size",
          "num_kv_heads", "total_num_kv_heads", "mamba_chunk_size", "runner_type", "convert_type", "quantization",
          "sliding_window", "model_type")
#: the loggers of the lines the stages write as vLLM does (the config module's, C10)
_SEED = "vllm.model_executor.models.config"


@pytest.mark.parametrize("name, r", CASES)
def test_the_034_pack_decides_as_vllm_034(name, r, warm_snapshots):
    gpu = _gpu(name)
    if r["error"] is not None:
        with pytest.raises(EngineCfgError) as info:
            _pipeline(gpu).resolve(_folder(r), **r["args"])
        _check_error(r, info.value)
        return
    result = _pipeline(gpu).resolve(_folder(r), **r["args"])
    doc = result.to_dict()
    assert doc["vllm_version"] == "0.34.0" and doc["gpu"]["name"] == gpu.name
    final = r["final"]
    # -- config time
    for field in _CACHE:
        assert doc["config"]["cache_config"][field] == final["cache_config"][field], field
    for field in _MODEL:
        assert doc["config"]["model_config"][field] == final["model_config"][field], field
    for field in ("backend", "flash_attn_version"):
        assert doc["config"]["attention_config"][field] == final["attention_config"][field], field
    sc = final["scheduler_config"]
    cfg = result.config
    assert doc["config"]["scheduler_config"]["enable_chunked_prefill"] == sc["enable_chunked_prefill"]
    assert config_time.max_num_batched_tokens(cfg, gpu) == sc["max_num_batched_tokens"]
    assert config_time.max_num_seqs(cfg, gpu) == sc["max_num_seqs"]
    assert config_time.async_scheduling(cfg) == sc["async_scheduling"]
    assert doc["config"]["parallel_config"]["tensor_parallel_size"] == final["parallel_config"]["tensor_parallel_size"]
    if final["pooler_config"] is not None:
        for field in ("seq_pooling_type", "tok_pooling_type"):
            assert doc["config"]["pooler_config"][field] == final["pooler_config"][field]
    stages = {"pooling", "gemma4-backend", "ssm-dtype", "mamba-cache-mode"}
    assert [(m["level"], m["message"]) for m in doc["messages"] if m["stage"] in stages] == \
        [(m["level"], m["message"]) for m in r["logs"] if m["logger"] == _SEED]
    cache_lines = [m["message"] for m in r["logs"] if m["logger"] == "vllm.config.cache"]
    assert [m["message"] for m in doc["messages"] if m["message"].startswith("Using ") and "kv cache" in m["message"]] \
        == cache_lines
    if r.get("page_sizes", {}).get("mamba_page_size") is not None:
        facts = page_facts(cfg)
        assert facts["mamba_page_size"] == r["page_sizes"]["mamba_page_size"]
        assert facts["attn_page_size_1_token"] == r["page_sizes"]["attn_page_size_1_token_generic"]
    # -- the start-up step
    st = doc["startup"]
    assert (st["release"], st["gpu"]) == ("0.34.0", gpu.name)
    pl = r["post_load"]
    if not pl["real_class_built"]:
        f, want = st["failure"], pl["build_error"]
        assert f["step"] == "build" and (f["vllm_type"], f["message"]) == (want["type"], want["message"])
        assert f["where"].split(" ")[0] == want["raised_at"].split(":")[0]
        return
    assert st["starts"], st["failure"]
    got = {_label(lb): {_backend_label(lb): lb["layers"]} for lb in st["backends"]}
    assert got == pl["attention_backends_by_layer_kind"]
    assert list(result.startup.attention_backends) == pl["non_ssm_backends"]
    for field in ("block_size", "mamba_block_size", "mamba_page_size_padded"):
        assert st[field] == pl["after"][field], field
    assert [m["message"] for m in st["messages"] if m["message"].startswith(("Setting", "Padding"))] == \
        [m["message"] for m in pl["logs"]]
    # -- KV planning
    kv = r["kv"]
    plan = kv_planning.groups(cfg, result.startup, gpu)
    assert sorted((len(g.layers), g.block_size, g.bytes_per_block if g.uniform else g.spec.page_size_bytes)
                  for g in plan.groups) == \
        sorted((g["n_layers"], g["spec"]["block_size"], g["spec"]["page_size_bytes"]) for g in kv["groups"])
    assert max(g.bytes_per_block for g in plan.groups) == kv["bytes_per_block"]
    padding = [m for m in kv["logs"] if m["message"].startswith("Add ")]
    assert [m for m in plan.messages if m[1].startswith("Add ")] == [(m["level"], m["message"]) for m in padding]
    assert st["engine_block_size"] == min(g.block_size for g in plan.groups)
    assert kv["validate_block_size"] == "ok"
    mml = cfg.model_config.max_model_len
    for want in kv["budgets"]:
        imp = kv_planning.impact(cfg, startup=kv_planning.startup_key(result.startup),
                                 gpu=kv_planning.gpu_key(gpu), kv_cache_memory=want["available_memory"],
                                 extensible=True)
        assert imp.max_model_len_fits == want["estimate_max_model_len"], want["budget_gib"]
        assert imp.request_bytes == kv["bytes_one_request_at_max_model_len"]
        if want["error"] is not None:
            assert imp.fits == want["error"], want["budget_gib"]
            continue
        assert imp.fits is None
        assert (imp.num_blocks, imp.kv_tokens, imp.max_concurrency) == \
            (want["num_blocks"], want["kv_tokens"], want["max_concurrency"]), want["budget_gib"]
        assert want["engine_block_size"] == st["engine_block_size"]
        for n, value in want["max_concurrency_at"].items():
            assert imp.concurrency_at(int(n)) == (value if int(n) <= mml else None), n


def test_the_pipeline_figures_use_the_034_planning(warm_snapshots):
    # K8 worked case 1 (qwen3.5-27b, 64 GiB): 1260 blocks of 16 x 3,407,872 bytes, R = 325,
    # concurrency 3.8769, int(3.8769 x 262144) = 1,016,312 tokens
    path = str(CONFIGS / "qwen3.5-27b")
    result = Pipeline(vllm_version="0.34.0", gpu_validation="off", impact={"kv_cache_memory": 64 * GiB}).resolve(path)
    imp = result.impact
    assert (imp.num_blocks, imp.kv_tokens) == (1260, 1016312)
    assert imp.max_concurrency == 1260 / 325
    assert {g.block_size for g in imp.groups} == {832}
    # the config-time block size stays as 0.34.0 resolves it at config time; the start-up
    # decision is the fact's, with vLLM's line and the rule behind it
    assert result.config.cache_config.block_size == 64
    st = result.startup
    assert isinstance(st, Startup) and (st.block_size, st.mamba_block_size, st.mamba_page_size_padded) == \
        (832, 832, 3407872)
    align = next(d for d in st.decisions if d.rule == "S4")
    assert align.reason.startswith("Setting attention block size to 832 tokens")
    assert "lcm(64, 64) = 64" in align.explanation and align.explanation.endswith("it becomes 832.")
    # --kv-cache-memory-bytes turns the extensible KV cache off: the other hint
    small = Pipeline(vllm_version="0.34.0", gpu_validation="off", impact={"kv_cache_memory": 2 * GiB}).resolve(path)
    assert "Try increasing `gpu_memory_utilization`" in small.impact.fits


def test_the_release_comes_from_the_environment(monkeypatch, warm_snapshots):
    monkeypatch.setenv("ENGINECFG_VLLM_VERSION", "0.34.0")
    doc = Pipeline(gpu_validation="off").resolve(str(CONFIGS / "jamba-1.5-mini")).to_dict()
    assert doc["vllm_version"] == "0.34.0" and doc["startup"]["block_size"] == 128  # K8 worked case 3
    monkeypatch.setenv("ENGINECFG_VLLM_VERSION", "0.19.0")
    assert Pipeline(gpu_validation="off").resolve(str(CONFIGS / "jamba-1.5-mini")).to_dict()["vllm_version"] == "0.19.0"
    monkeypatch.delenv("ENGINECFG_VLLM_VERSION")
    assert Pipeline().vllm_version == "0.19.0"  # the default release
    with pytest.raises(InvalidInputError, match="vllm_version"):
        Pipeline(vllm_version="0.99.0")


def test_the_034_stage_order():
    assert Pipeline(stages=builtin_stages("0.34.0"), vllm_version="0.34.0", gpu_validation="off").stage_names == [
        "pooling", "engine-defaults", "scheduler", "gemma4-backend", "ssm-dtype", "mamba-cache-mode", "vllm-checks",
        "attention-backend", "startup-block-size", "hybrid-alignment", "engine-start", "impact", "gpu-validation"]


def test_calculate_kv_scales_is_not_a_034_argument():
    with pytest.raises(InvalidInputError, match="calculate_kv_scales") as info:
        Pipeline(vllm_version="0.34.0").resolve(str(CONFIGS / "qwen3.5-27b"), calculate_kv_scales=True)
    assert info.value.exit_code == 2


def test_gpu_validation_of_034_is_off_when_asked(warm_snapshots):
    # the checks on 0.34.0's start-up layout: tests/test_explain_034.py
    result = Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(str(CONFIGS / "qwen3.5-27b"))
    assert result.validation["status"] == "skipped" and "off" in result.validation["reason"]


def test_the_034_scheduler_refuses_a_budget_the_caller_gives_below_max_model_len():
    from enginecfg import ConfigRejectedError

    path = str(CONFIGS / "deepseek-v2-lite-like")
    with pytest.raises(ConfigRejectedError, match=r"max_num_batched_tokens \(1024\) is smaller than "
                                                  r"max_model_len \(2048\)") as info:
        Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(
            path, max_num_batched_tokens=1024, enable_chunked_prefill=False)
    assert info.value.stage == "scheduler"
    # the default budget holds max_model_len without chunked prefill: nothing to refuse
    Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(path, enable_chunked_prefill=False)
