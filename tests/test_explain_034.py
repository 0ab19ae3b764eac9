"""explain, plan, the findings, the serve command and GPU validation for vLLM 0.34.0 runs.

The 0.34.0 figures themselves are checked against the oracle in test_release_034.py; here:
explain and plan run the chosen release's pack (the same figures a 0.34.0 pipeline records),
say which release they speak for, give only the findings that hold for it, print only flags
0.34.0 takes, and the kernel checks read the start-up page layout."""

from __future__ import annotations

import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import attrs
import pytest
from support import CONFIGS

from enginecfg import ConfigRejectedError, InvalidInputError, Pipeline, Stage
from enginecfg.commands import explain, plan
from enginecfg.commands.findings import RULE_OF, holds
from enginecfg.commands.serve import not_taken, serve_command
from enginecfg.pipeline.releases import get as _release_named
from enginecfg.pipeline.models.startup import LayerBackend, LayerKind, Startup
from enginecfg.pipeline.plugins import builtin_stages
from enginecfg.stages.v034.gpu_validation import kernel_block_size, page_layout

V034 = "0.34.0"


def _ids(e) -> list[str]:
    return [f.id for f in e.findings]


# -- explain -------------------------------------------------------------------------------------
def test_explain_runs_the_034_pack_and_says_so():
    e = explain(str(CONFIGS / "qwen3.5-27b"), vllm_version=V034)
    pipe = Pipeline(vllm_version=V034, gpu_validation="off").resolve(str(CONFIGS / "qwen3.5-27b"))
    assert e.vllm_version == V034 and e.result.vllm_version == V034
    assert e.impact.to_dict() == pipe.facts["impact"].to_dict()
    assert e.impact.attention_block_size == pipe.facts["startup"].block_size == 832  # 0.19.0: 784
    assert e.memory.gpu_memory_utilization == 1.0  # 0.34.0's default with the extensible KV cache
    assert e.to_dict()["vllm_version"] == V034 and e.to_dict()["gpu"]["name"] == "H200"
    old = explain(str(CONFIGS / "qwen3.5-27b"))
    assert old.vllm_version == "0.19.0" and old.impact.attention_block_size == 784
    assert old.impact.kv_tokens != e.impact.kv_tokens


def test_explain_keeps_a_given_utilization_and_reads_the_environment(monkeypatch):
    given = explain(str(CONFIGS / "qwen3.5-27b"), vllm_version=V034, gpu_memory_utilization=0.9)
    assert given.memory.gpu_memory_utilization == 0.9 == given.impact.memory.gpu_memory_utilization
    monkeypatch.setenv("ENGINECFG_VLLM_VERSION", V034)
    assert explain(str(CONFIGS / "qwen3.5-27b")).vllm_version == V034
    with pytest.raises(InvalidInputError, match="0.19.0, 0.19.1, .*, 0.34.0"):
        explain(str(CONFIGS / "qwen3.5-27b"), vllm_version="0.99")


def test_the_curve_uses_the_034_planning():
    e = explain(str(CONFIGS / "jamba-1.5-mini"), vllm_version=V034)
    points = {n: x for n, x, _ in e.curve(list(e.impact.concurrency))}
    for n, x in e.impact.concurrency.items():
        if x is not None:
            assert points[n] == pytest.approx(x)


# -- findings ------------------------------------------------------------------------------------
def test_the_gemma4_triton_finding_is_019_only():
    assert "forced-triton-attn" in _ids(explain(str(CONFIGS / "gemma-4-26b-a4b")))
    hopper = explain(str(CONFIGS / "gemma-4-26b-a4b"), vllm_version=V034)  # FlashAttention 4 there
    assert not {"forced-triton-attn", "triton-attn-without-fa4"} & set(_ids(hopper))
    ampere = explain(str(CONFIGS / "gemma-4-26b-a4b"), vllm_version=V034, gpu="A100-80GB")
    assert "forced-triton-attn" not in _ids(ampere)
    f = next(f for f in ampere.findings if f.id == "triton-attn-without-fa4")
    assert "A100-80GB" in f.message and "0.19.0" not in f.message
    assert V034 in f.releases and "0.19.0" not in f.releases  # the releases with C4a's Gemma 4 rule
    from enginecfg.pipeline import releases

    assert holds("forced-triton-attn", releases.get("0.19.0")) and not holds("forced-triton-attn", releases.get(V034))
    assert RULE_OF["forced-triton-attn"] == ("C4a", False)


def test_hybrid_findings_name_the_startup_decision():
    e = explain(str(CONFIGS / "nemotron-3-nano-30b-a3b-bf16"), vllm_version=V034)
    f = next(f for f in e.findings if f.id == "large-hybrid-block")
    st = e.result.facts["startup"]
    assert f.figures["block_size"] == st.block_size == 2112  # 0.19.0: 2096
    assert f.caused_by.stage == "hybrid-alignment" and f.caused_by.new == st.block_size
    assert "when the engine starts" in f.message and "kernel block" in f.message
    pad = next(f for f in explain(str(CONFIGS / "jamba-1.5-mini"), vllm_version=V034).findings
               if f.id == "mamba-padding")
    assert pad.caused_by.field == "cache_config.mamba_page_size_padded" and pad.caused_by.new == 524288


def test_mamba_cache_mode_is_said_to_have_no_effect_in_034():
    e = explain(str(CONFIGS / "jamba-1.5-mini"), vllm_version=V034, mamba_cache_mode="none")
    f = next(f for f in e.findings if f.id == "mamba-cache-mode-ignored")
    assert f.caused_by.engine_argument == "--mamba-cache-mode" and "'align'" in f.message
    assert "mamba-cache-mode-ignored" not in _ids(explain(str(CONFIGS / "jamba-1.5-mini"), mamba_cache_mode="none"))


# -- plan ----------------------------------------------------------------------------------------
def test_plan_takes_the_release_as_an_axis():
    p = plan(str(CONFIGS / "jamba-1.5-mini"), {"vllm_version": ["0.19.0", V034], "block_size": [16]})
    assert [r.vllm_version for r in p.rows] == ["0.19.0", V034] and p.vllm_versions == ("0.19.0", V034)
    assert [r.resolved["block_size"] for r in p.rows] == [80, 80]  # 0.34.0: at engine start (S4)
    assert p.rows[1].impact.to_dict() == explain(str(CONFIGS / "jamba-1.5-mini"), vllm_version=V034,
                                                 block_size=16).impact.to_dict()
    assert p.to_dict()["rows"][1]["vllm_version"] == V034
    one = plan(str(CONFIGS / "jamba-1.5-mini"), {"block_size": [64]}, vllm_version=V034)
    assert one.vllm_versions == (V034,) and one.rows[0].resolved["block_size"] == 128
    with pytest.raises(InvalidInputError, match="vllm_version"):
        plan(str(CONFIGS / "jamba-1.5-mini"), {"vllm_version": [V034]}, vllm_version=V034)


def test_the_cli_speaks_for_the_release(run_cli):
    out = run_cli("explain", str(CONFIGS / "qwen3.5-27b"), "--vllm-version", V034, "--no-audit")
    assert "as vLLM 0.34.0 decides it" in out and "block size 832 tokens" in out
    doc = json.loads(run_cli("plan", str(CONFIGS / "jamba-1.5-mini"), "--vllm-version", "0.19.0,0.34.0",
                             "--json"))
    assert [r["vllm_version"] for r in doc["rows"]] == ["0.19.0", V034]


@pytest.fixture
def run_cli(capsys):
    from enginecfg.cli.app import main

    def run(*argv: str) -> str:
        capsys.readouterr()
        assert main(list(argv)) == 0
        return capsys.readouterr().out
    return run


# -- the serve command ---------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["qwen3.5-27b", "jamba-1.5-mini", "gemma-4-26b-a4b", "nemotron-3-nano-30b-a3b-bf16"])
def test_the_034_serve_command_resolves_to_the_same_engine_start(model):
    pipeline = Pipeline(vllm_version=V034, gpu_validation="off")
    result = pipeline.resolve(str(CONFIGS / model), mamba_cache_mode="none")
    tokens = serve_command(result, extra=["--max-num-partial-prefills", "2", "--uvicorn-log-level", "info"])
    assert not set(tokens) & (_release_named(V034).sets_aside | {"--mamba-cache-mode"})
    assert tokens[-2:] == ["--uvicorn-log-level", "info"]
    st = result.facts["startup"]
    if result.config.model_config.is_hybrid:  # the block the engine start chose, pinned
        assert tokens[tokens.index("--block-size") + 1] == str(st.block_size)
    else:
        assert "--block-size" not in tokens  # 64 is vLLM's own default: nothing to pin
    args = _engine_args(tokens[3:-2])
    again = pipeline.resolve(str(CONFIGS / model), **args)
    assert again.facts["startup"].to_dict() | {"decisions": [], "messages": []} == \
        st.to_dict() | {"decisions": [], "messages": []}
    assert again.facts["impact"].to_dict() == result.facts["impact"].to_dict()


def _engine_args(flags: list[str]) -> dict:
    from enginecfg.pipeline.engine_args import ENGINE_ARGS

    by_flag = {a.flags[0]: a for a in ENGINE_ARGS.values()}
    out, i = {}, 0
    while i < len(flags):
        f = flags[i]
        if f in by_flag and by_flag[f].kind == "bool":
            out[by_flag[f].name], i = True, i + 1
        elif f.startswith("--no-") and "--" + f[5:] in by_flag:
            out[by_flag["--" + f[5:]].name], i = False, i + 1
        else:
            arg = by_flag[f]
            out[arg.name] = int(flags[i + 1]) if arg.kind == "int" else flags[i + 1]
            i += 2
    return out


def test_a_pasted_flag_034_lacks_is_dropped_and_named():
    result = Pipeline(vllm_version=V034, gpu_validation="off").resolve(str(CONFIGS / "qwen3.5-27b"))
    extra = ["--override-attention-dtype", "float32", "--served-model-name", "q"]
    assert serve_command(result, extra=extra)[-2:] == ["--served-model-name", "q"]
    assert not_taken(result, extra) == ["--override-attention-dtype"]
    old = Pipeline(gpu_validation="off").resolve(str(CONFIGS / "qwen3.5-27b"))
    assert serve_command(old, extra=extra)[-4:] == extra


# -- GPU validation ------------------------------------------------------------------------------
def _lb(backend, sizes, multiple):
    return LayerBackend(LayerKind("attention", 1, "l.0", head_size=128), "Attention", backend,
                        kernel_block_sizes=tuple(sizes), kernel_block_multiple_of=tuple(multiple))


def test_the_kernel_block_follows_vllm_034s_choice():
    assert kernel_block_size(832, [_lb("FLASH_ATTN", [16], [True])]) == 832
    assert kernel_block_size(128, [_lb("FLASHMLA", [64], [False])]) == 64  # two kernel blocks a page
    assert kernel_block_size(256, [_lb("FLASHINFER", [16, 32, 64], [False] * 3)]) == 64
    with pytest.raises(ValueError, match="No common block size for 80"):
        kernel_block_size(80, [_lb("FLASHMLA", [64], [False])])


def test_034_gpu_validation_checks_the_startup_layout(warm_snapshots):
    result = Pipeline(vllm_version=V034, gpu_validation="interpret").resolve(str(CONFIGS / "jamba-1.5-mini"))
    v = result.validation
    assert v["status"] == "passed" and v["device"] == "cpu"
    checks = {c["check"]: c for c in v["checks"]}
    st = result.facts["startup"]
    assert result.config.cache_config.block_size == 64 and st.block_size == 128  # config time vs start
    assert checks["paged-decode-attention-h128"]["shapes"]["block_size"] == 128
    assert checks["paged-decode-attention-h128"]["shapes"]["seq_lens"][0] > 128  # crosses one block
    assert checks["hybrid-page-layout"]["shapes"]["page_size"] == st.mamba_page_size_padded == 524288
    assert page_layout(st).block_size == 128
    Pipeline(vllm_version=V034, gpu_validation="require-gpu")  # no longer refused


class ShrinkStartPage(Stage):
    """A start-up page one token too small for the Mamba state it must hold."""
    name = "shrink-start-page"
    after = ("engine-start",)
    before = ("gpu-validation",)
    facts = ("startup",)

    def run(self, cfg, ctx):
        st = ctx.fact("startup")
        ctx.record("startup", attrs.evolve(st, mamba_page_size_padded=st.mamba_page_size_padded - 300_000))


def test_034_gpu_validation_fails_on_a_wrong_startup_page():
    stages = builtin_stages(V034) + [ShrinkStartPage()]
    with pytest.raises(ConfigRejectedError, match="check hybrid-page-layout"):
        Pipeline(stages=stages, vllm_version=V034, gpu_validation="interpret", impact=None).resolve(
            str(CONFIGS / "jamba-1.5-mini"))


def test_034_gpu_validation_skips_when_the_engine_would_not_start():
    class Fail(Stage):
        name = "fail-start"
        after = ("engine-start",)
        before = ("gpu-validation",)
        facts = ("startup",)

        def run(self, cfg, ctx):
            from enginecfg.pipeline.models.startup import StartFailure

            ctx.record("startup", attrs.evolve(ctx.fact("startup"), failure=StartFailure(
                "start", "ValueError", "x", "here", "a test failure")))
    result = Pipeline(stages=builtin_stages(V034) + [Fail()], vllm_version=V034,
                      gpu_validation="interpret").resolve(str(CONFIGS / "jamba-1.5-mini"))
    assert result.validation["status"] == "skipped" and "would not start" in result.validation["reason"]
    assert isinstance(result.facts["startup"], Startup)


def test_034_gpu_validation_skips_with_the_reason_the_start_up_step_was_not_worked_out():
    from enginecfg.pipeline.models.startup import StartupUnavailable

    class Unknown(Stage):
        name = "unknown-start"
        after = ("engine-start",)
        before = ("gpu-validation",)
        facts = ("startup",)

        def run(self, cfg, ctx):
            ctx.record("startup", StartupUnavailable("a layer pattern not known here"))
    result = Pipeline(stages=builtin_stages(V034) + [Unknown()], vllm_version=V034,
                      gpu_validation="interpret").resolve(str(CONFIGS / "jamba-1.5-mini"))
    assert result.validation["status"] == "skipped"
    assert "not worked out (a layer pattern not known here)" in result.validation["reason"]
