"""A vLLM release is a rule pack: chosen by argument, environment or flag, recorded in every
output, and plugins say which releases they apply to."""

from __future__ import annotations

import json

import pytest

from support import CONFIGS, run_cli
from enginecfg import InvalidInputError, Pipeline, Stage
from enginecfg.pipeline import rulepacks
from enginecfg.pipeline.plugins import builtin_stages, describe_stages

QWEN = str(CONFIGS / "qwen3.5-27b")


class _OnlyFor019(Stage):
    name = "site-019-only"
    after = ("pooling",)
    releases = ("0.19.0",)

    def run(self, cfg, ctx) -> None:
        ctx.info("ran")


class _Everywhere(Stage):
    name = "site-everywhere"
    after = ("pooling",)

    def run(self, cfg, ctx) -> None:
        ctx.info("ran")


def test_both_packs_are_registered_and_0_19_is_the_default():
    assert {"0.19.0", "0.34.0"} <= set(rulepacks.releases())
    assert rulepacks.default_release() == "0.19.0"
    assert [s.name for s in builtin_stages("0.19.0")][-3:] == ["engine-start", "impact", "gpu-validation"]
    assert "hybrid-kv-scales" not in [s.name for s in builtin_stages("0.34.0")]


def test_a_stage_says_which_releases_it_applies_to():
    for release in ("0.19.0", "0.34.0"):
        stages = builtin_stages(release) + [_OnlyFor019(), _Everywhere()]
        names = Pipeline(stages=stages, vllm_version=release, gpu_validation="off").stage_names
        assert "site-everywhere" in names
        assert ("site-019-only" in names) is (release == "0.19.0")
    assert _OnlyFor019().applies_to("0.19.0") and not _OnlyFor019().applies_to("0.34.0")
    assert _Everywhere().applies_to("0.34.0")  # default: every release


def test_the_stages_command_lists_the_release_s_stages():
    pipe = Pipeline(vllm_version="0.34.0", gpu_validation="off", plugins="none")
    rows = describe_stages(pipe)
    assert [r["name"] for r in rows][-6:] == ["attention-backend", "startup-block-size", "hybrid-alignment",
                                              "engine-start", "impact", "gpu-validation"]
    proc = run_cli("stages", "--vllm-version", "0.34.0", "--json", env={"ENGINECFG_PLUGINS": "none"})
    assert proc.returncode == 0 and "startup-block-size" in [r["name"] for r in json.loads(proc.stdout)]


def test_the_stages_command_loads_the_model_under_the_release_s_rules():
    """An engine argument the release does not have is refused as the run refuses it."""
    path = str(CONFIGS / "qwen3.5-27b")
    proc = run_cli("stages", path, "--vllm-version", "0.34.0", "--calculate-kv-scales",
                   env={"ENGINECFG_PLUGINS": "none"})
    assert proc.returncode == 2 and "calculate_kv_scales" in proc.stderr
    assert run_cli("stages", path, "--calculate-kv-scales", env={"ENGINECFG_PLUGINS": "none"}).returncode == 0


def test_the_gpu_is_an_input_recorded_in_the_document(warm_snapshots):
    doc = Pipeline(vllm_version="0.34.0", gpu="A100", gpu_validation="off").resolve(
        str(CONFIGS / "gemma4-text-default")).to_dict()
    assert doc["gpu"]["name"] == "A100-80GB" and doc["gpu"]["capability"] == "8.0"
    # C4 on compute capability 8.0: no FlashAttention 4, so TRITON_ATTN is forced
    assert doc["config"]["attention_config"]["backend"] == "TRITON_ATTN"
    assert {b["backend"] for b in doc["startup"]["backends"]} == {"TRITON_ATTN"}
    with pytest.raises(InvalidInputError, match="GPU"):
        Pipeline(gpu="X100")


def test_run_flags_choose_the_release_and_the_gpu(warm_snapshots):
    proc = run_cli("run", QWEN, "--vllm-version", "0.34.0", "--gpu", "B200", "--json", "--no-audit",
                   "--gpu-validation", "off", env={"ENGINECFG_PLUGINS": "none"})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["vllm_version"] == "0.34.0" and doc["gpu"]["name"] == "B200"
    assert doc["startup"]["block_size"] == 832 and doc["config"]["cache_config"]["block_size"] == 64
    human = run_cli("run", QWEN, "--no-audit", "--gpu-validation", "off",
                    env={"ENGINECFG_PLUGINS": "none", "ENGINECFG_VLLM_VERSION": "0.34.0"})
    assert human.returncode == 0
    assert human.stdout.splitlines()[1] == "as vLLM 0.34.0 decides it, on the H200 (compute capability 9.0)"
    assert "Engine start on the H200 (vLLM 0.34.0): attention on FLASH_ATTN; block size 832." in human.stdout
    bad = run_cli("run", QWEN, "--vllm-version", "0.2", "--no-audit")
    assert bad.returncode == 2 and "0.19.0, 0.19.1, 0.20.0" in bad.stderr and "0.34.0" in bad.stderr


def test_a_failed_run_says_which_release_it_speaks_for(warm_snapshots):
    from enginecfg import ConfigRejectedError

    with pytest.raises(ConfigRejectedError) as info:
        Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(QWEN, tensor_parallel_size=5)
    assert info.value.document["vllm_version"] == "0.34.0" and info.value.document["gpu"]["name"] == "H200"


def test_the_readme_release_example_runs_as_written(monkeypatch, warm_snapshots):
    import re

    from support import REPO

    section = (REPO / "README.md").read_text().split("## Releases and the GPU", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)[1]
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ENGINECFG_PLUGINS", "none")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    r = scope["r"]
    shown = dict(re.findall(r"^(r\.[\w.]+)\s+# ([\d,]+)", code, re.M))
    assert r.config.cache_config.block_size == int(shown["r.config.cache_config.block_size"])
    assert r.startup.block_size == int(shown["r.startup.block_size"].replace(",", ""))
    assert r.impact.kv_tokens == int(shown["r.impact.kv_tokens"].replace(",", ""))
