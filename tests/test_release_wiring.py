"""The dated rules the shared machinery switches per release answer as the releases run did.

0.32.0 differs from 0.34.0 by rules the machinery switches (the Mamba prefill checkpoints B6b/S3e,
the not-enough-memory text K7b, the explicit-hybrid-manager refusal's wording K10b, ...) and by
three that change nothing enginecfg computes (C1f, C4d, S2e: ``releases.NOTHING_TO_SWITCH`` says
why, and the test below holds each reason true): it is exact, and on every case its oracle
answered enginecfg answers as 0.32.0 did.
"""

from __future__ import annotations

import json
import shutil

import pytest

from enginecfg import ConfigRejectedError, InvalidInputError, Pipeline
from enginecfg.pipeline import releases
from enginecfg.pipeline.models import gpus
from enginecfg.pipeline.models.v034 import kv_planning

from support import CONFIGS, REPO

from release_oracle_support import _resolve, cases, compare, known
from test_release_oracles import KNOWN


def test_every_case_of_0_32_0_answers_as_its_oracle(warm_snapshots):
    found = [d for case_id, r in cases("0.32.0") for d in compare("0.32.0", case_id, r) if known(d, KNOWN) is None]
    assert found == []


def test_every_case_of_0_28_0_answers_as_its_oracle(warm_snapshots):
    # B2f: before 0.31.0 FLASH_ATTN takes an FP8 cache on Hopper with FA3 only, so Gemma 4's FA4
    # head-512 layers go to FLASHINFER (gemma4-text-default/fp8 on the H200), in blocks of 16
    found = [d for case_id, r in cases("0.28.0") for d in compare("0.28.0", case_id, r) if known(d, KNOWN) is None]
    assert found == []


@pytest.mark.parametrize("release, backends", [("0.30.0", {256: "FLASHINFER", 512: "FLASHINFER"}),
                                               ("0.31.0", {256: "FLASH_ATTN", 512: "FLASH_ATTN"})])
def test_fa4_head_512_takes_an_fp8_cache_on_hopper_from_b2f(release, backends):
    # 0.30.0 runs every Gemma 4 layer on FA4 (before C4c), which takes no FP8 cache on Hopper
    # before B2f; 0.31.0 gives the head-512 layers FA4 with the FP8 cache (B2f), the others FA3
    doc = Pipeline(vllm_version=release, gpu="H200", gpu_validation="off").resolve(
        str(CONFIGS / "gemma4-text-default"), kv_cache_dtype="fp8").to_dict()
    assert {b["head_size"]: b["backend"] for b in doc["startup"]["backends"]} == backends


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


def test_0_32_0_is_exact_and_its_oracle_cases_are_hard_assertions():
    assert releases.get("0.32.0").unwired == ()
    assert releases.get("0.32.0").exact


@pytest.fixture
def chunked_local_config(tmp_path, monkeypatch):
    """qwen3.5-27b with chunked local attention, the switch that allows it with the hybrid KV
    cache manager set to 0: vLLM turns the manager off, and refuses an explicit "keep it on"."""
    folder = tmp_path / "chunked-local"
    shutil.copytree(CONFIGS / "qwen3.5-27b", folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["attention_chunk_size"] = 8192
    (folder / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", "0")
    return folder


@pytest.mark.parametrize("release, flag", [("0.19.0", "--no-disable-hybrid-kv-cache-manager"),
                                           ("0.32.0", "--no-disable-hybrid-kv-cache-manager"),
                                           ("0.33.0", "--enable-hybrid-kv-cache-manager"),
                                           ("0.34.0", "--enable-hybrid-kv-cache-manager")])
def test_the_explicit_hybrid_manager_refusal_names_the_flag_as_the_release_spells_it(chunked_local_config,
                                                                                     release, flag):
    # K10b (0.33.0): vLLM 0.34.0's VllmConfig.__post_init__ names --enable-hybrid-kv-cache-manager
    pipe = Pipeline(vllm_version=release, gpu="H200", gpu_validation="off")
    with pytest.raises(ConfigRejectedError) as exc:
        pipe.resolve(str(chunked_local_config), disable_hybrid_kv_cache_manager=False)
    assert str(exc.value) == ("Hybrid KV cache manager was explicitly enabled but is not supported in this "
                              f"configuration. Consider omitting the {flag} flag to let vLLM decide automatically.")
    assert exc.value.vllm_type == "ValueError"


def test_the_explicit_hybrid_manager_refusal_raised_at_load_is_in_the_release_words(chunked_local_config):
    from enginecfg.pipeline import rulepacks

    with pytest.raises(ConfigRejectedError, match="--enable-hybrid-kv-cache-manager flag"):
        rulepacks.get("0.34.0").load(str(chunked_local_config), {"disable_hybrid_kv_cache_manager": False})


def test_the_rules_with_nothing_to_switch_are_unreachable_for_the_reasons_given():
    assert set(releases.NOTHING_TO_SWITCH) == {"C1f", "C4d", "K4a", "K4c", "S2c", "S2d", "S2e", "S3c", "S3f"}
    # S2c: the KV dtype whose backend reshapes the spec is refused by every release
    for name in ("0.28.0", "0.34.0"):
        with pytest.raises(InvalidInputError, match="ultraquant_4bit"):
            Pipeline(vllm_version=name, gpu="H200", gpu_validation="off").resolve(
                str(CONFIGS / "qwen3.5-27b"), kv_cache_dtype="ultraquant_4bit")
    # S3c/S3f: Glm5Next, the one architecture whose config has index_kpool, and S2d: Qwen4Exp, the
    # one class with several Mamba layouts, are no hybrids to enginecfg
    from enginecfg.pipeline.models import architectures
    for name in ("Glm5NextForCausalLM", "Qwen4ExpForCausalLM"):
        info = architectures.lookup([name])[1]
        assert not info.is_hybrid_class and info.state_kind is None
    assert set(releases.NOTHING_TO_SWITCH) <= releases.WIRED
    # K4a, K4c: speculative decoding (the blocks and tokens it adds) is refused as unknown by every release
    for name in ("0.22.0", "0.34.0"):
        with pytest.raises(InvalidInputError, match="unknown engine argument 'speculative_config'"):
            Pipeline(vllm_version=name, gpu="H200", gpu_validation="off").resolve(
                str(CONFIGS / "mamba2-default"), speculative_config={"num_speculative_tokens": 2})
    # S2e: the state alignment needs --use-replayssm, which no release's engine arguments take
    for name in ("0.32.0", "0.34.0"):
        with pytest.raises(InvalidInputError, match="unknown engine argument 'use_replayssm'"):
            Pipeline(vllm_version=name, gpu="H200", gpu_validation="off").resolve(
                str(CONFIGS / "qwen3.5-27b"), use_replayssm=True)
    # C4d: every GPU enginecfg runs on is a CUDA device (a compute capability), never XPU
    assert all(isinstance(g.capability, tuple) and g.capability >= (7, 0) for g in gpus.GPUS.values())
    # C1f: the fact enginecfg reports is the architecture's flag, as 0.32.0 (the last release with
    # the attribute) reported it on every case its oracle resolved
    differ = []
    for case_id, r in cases("0.32.0"):
        want = ((r.get("final") or {}).get("model_config") or {}).get("supports_mamba_prefix_caching")
        if want is not None:
            got = _resolve("0.32.0", case_id, r).to_dict()["config"]["model_config"]["supports_mamba_prefix_caching"]
            differ += [case_id] if got != want else []
    assert differ == []


def _mode(release: str, model: str, **args):
    return Pipeline(vllm_version=release, gpu="H200", gpu_validation="off").resolve(str(CONFIGS / model), **args)


def test_mamba_cache_mode_all_before_c7e_falls_back_where_unsupported_and_c7d_warns():
    # C7e (0.32.0) removed 'all' and W2's fallback; before it qwen3.5-27b (no Mamba prefix
    # caching) falls back to 'align' with W2, and from C7d (0.30.0) CacheConfig warns about 'all'
    w2 = ("Hybrid or mamba-based model detected without support for prefix caching with Mamba cache 'all' mode: "
          "falling back to 'align' mode.")
    deprecated = ("Mamba cache mode 'all' is deprecated and will be removed in an upcoming release. If this is a "
                  "problem, please open an issue at https://github.com/vllm-project/vllm/issues.")
    for release, warned in (("0.28.0", False), ("0.31.0", True)):
        doc = _mode(release, "qwen3.5-27b", enable_prefix_caching=True, mamba_cache_mode="all").to_dict()
        texts = [m["message"] for m in doc["messages"]]
        assert doc["config"]["cache_config"]["mamba_cache_mode"] == "align" and w2 in texts
        assert (deprecated in texts) is warned
    doc = _mode("0.31.0", "mamba2-default", enable_prefix_caching=True, mamba_cache_mode="all").to_dict()
    assert doc["config"]["cache_config"]["mamba_cache_mode"] == "all"


def test_mamba_cache_mode_all_is_refused_by_0_32_0_and_ignored_from_c7f():
    with pytest.raises(InvalidInputError, match=r"got 'all'; allowed: align, none"):
        _mode("0.32.0", "qwen3.5-27b", enable_prefix_caching=True, mamba_cache_mode="all")
    doc = _mode("0.33.0", "qwen3.5-27b", enable_prefix_caching=True, mamba_cache_mode="all").to_dict()
    assert doc["config"]["cache_config"]["mamba_cache_mode"] == "align"


@pytest.mark.parametrize("release, text", [("0.28.0", "Chunked prefill is required for mamba cache mode 'align'."),
                                           ("0.32.0", "Chunked prefill is required for mamba cache mode 'align'."),
                                           ("0.33.0", "Chunked prefill is required for Mamba prefix caching.")])
def test_the_chunked_prefill_assertion_is_in_the_words_of_c7f_from_0_33_0(release, text):
    with pytest.raises(ConfigRejectedError) as exc:
        _mode(release, "qwen3.5-27b", enable_prefix_caching=True, enable_chunked_prefill=False)
    assert str(exc.value) == text and exc.value.vllm_type == "AssertionError"


def test_a_llama_nemotron_vl_checkpoint_without_pooling_before_c2_is_refused_as_0_19_0_refuses_it():
    # C2 (0.28.0) turned 0.24.0's ValueError into the bare assertion
    for release, vllm_type, text in (("0.24.0", "ValueError", "pool_type None not supported"),
                                     ("0.28.0", "AssertionError", "1 validation error for ModelConfig: Assertion failed")):
        with pytest.raises(ConfigRejectedError) as exc:
            _mode(release, "nemotron-vl-embed-nopooling")
        assert exc.value.vllm_type == vllm_type and str(exc.value).startswith(text)


def test_gemma4_before_c4b_reads_its_two_head_sizes_and_prints_them_as_0_24_0_did():
    logs = {}
    for release in ("0.24.0", "0.28.0"):
        doc = _mode(release, "gemma-4-26b-a4b").to_dict()
        logs[release] = [m["message"] for m in doc["messages"] if m["message"].startswith("Gemma4")]
    assert logs["0.24.0"] == ["Gemma4 model has heterogeneous head dimensions (head_dim=256, global_head_dim=512). "
                              "Using FA4 for all layers to avoid mixed FA3/FA4 penalty."]
    assert logs["0.28.0"] == ["Gemma4 model has heterogeneous head dimensions {'sliding_attention': 256, "
                              "'full_attention': 512}. Using FA4 for all layers to avoid mixed FA3/FA4 penalty."]


def test_sliding_windows_before_k4b_hold_one_step_of_the_token_budget(warm_snapshots):
    # K4b (0.26.0): a sliding-window layer holds (pp + 1 if async else pp) steps' tokens; 0.24.0
    # held one step's, which its oracle's Gemma 4 figures (bytes per request, concurrency) show
    found = [d for case_id, r in cases("0.24.0") if "gemma" in case_id and "nvfp4" not in case_id
             for d in compare("0.24.0", case_id, r) if known(d, KNOWN) is None]
    assert found == []


def test_a_tied_lm_head_under_modelopt_fails_to_build_in_0_24_0_only():
    # F8a (0.24.0): the lm_head ties through its quantization method; F8b (0.25.0) makes that work
    built = {}
    for release in ("0.20.0", "0.24.0", "0.25.0"):
        failure = _mode(release, "gemma-4-26b-a4b-nvfp4").to_dict()["startup"]["failure"]
        built[release] = None if failure is None else (failure["step"], failure["vllm_type"], failure["message"])
    assert built == {"0.20.0": None, "0.24.0": ("build", "NotImplementedError", ""), "0.25.0": None}


def test_the_logged_kv_cache_size_before_k6a_is_blocks_over_groups_times_the_smallest_block():
    # K6a (0.20.1): floor(concurrency x max_model_len); 0.20.0 logged num_blocks // groups x min block
    def tokens(release):
        imp = Pipeline(vllm_version=release, gpu="H200", gpu_validation="off",
                       impact={"kv_cache_memory": 17 * 2**30}).resolve(str(CONFIGS / "falcon-h1-default")).impact
        return imp.kv_tokens, imp.num_blocks, imp.max_concurrency, imp.max_model_len
    (old, blocks, _, _), (new, _, concurrency, mml) = tokens("0.20.0"), tokens("0.20.1")
    assert old == 69552 and new == int(concurrency * mml) != old


@pytest.mark.parametrize("release, qwen, olmo", [("0.21.0", "GatedDeltaNetAttention", "OlmoHybridGatedDeltaNet"),
                                                 ("0.22.0", "QwenGatedDeltaNetAttention",
                                                  "OlmoHybridGatedDeltaNetAttention")])
def test_the_gated_delta_net_classes_take_their_b6a_names_from_0_22_0(release, qwen, olmo):
    def classes(model):
        return {b["layer_class"] for b in _mode(release, model).to_dict()["startup"]["backends"]} - {"Attention"}
    assert classes("qwen3.5-27b") == {qwen} and classes("olmo-hybrid-default") == {olmo}


def test_gemma4_before_c4a_forces_triton_attn_as_0_19_0_does():
    # C4a (0.24.0) brought FA4 for all layers; 0.20.0 forced TRITON_ATTN when the larger head is over 256
    doc = _mode("0.20.0", "gemma-4-26b-a4b").to_dict()
    assert doc["config"]["attention_config"]["backend"] == "TRITON_ATTN"
    assert doc["config"]["attention_config"]["flash_attn_version"] is None
    assert [m["message"] for m in doc["messages"] if m["message"].startswith("Gemma4")] == [
        "Gemma4 model has heterogeneous head dimensions (head_dim=256, global_head_dim=512). Forcing TRITON_ATTN "
        "backend to prevent mixed-backend numerical divergence."]


def _failure(release: str, model: str, **args):
    failure = _mode(release, model, **args).to_dict()["startup"]["failure"]
    return None if failure is None else (failure["step"], failure["vllm_type"], failure["message"])


def test_bamba_while_registered_fails_to_build_on_its_layer_table():
    # before C1b (0.24.0) Bamba is still vLLM's own class, whose layer table lacks transformers
    # 5.x's 'linear_attention' (the 0.20.0 run); from C1b it never reaches a build
    assert _failure("0.20.0", "bamba-default") == ("build", "KeyError", "'linear_attention'")


def test_grouped_top_k_without_its_groups_is_an_assertion_before_f9():
    assert _failure("0.20.0", "deepseek-v2-lite-like") == ("build", "AssertionError", "")
    assert _failure("0.24.0", "deepseek-v2-lite-like") == (
        "build", "ValueError", "num_expert_group and topk_group must be provided when use_grouped_topk is True")


def test_c5b_the_bfloat16_mamba_dtypes_come_with_the_release_that_brought_them():
    """0.22.0 (C5b) takes bfloat16 for both Mamba dtypes though its nearest held option table
    (0.20.0's) does not list it; 0.20.0 refuses it in its own words."""
    from enginecfg import InvalidInputError, Pipeline

    model = REPO / "examples" / "models" / "qwen3.5-27b"
    for name in ("mamba_cache_dtype", "mamba_ssm_cache_dtype"):
        result = Pipeline(gpu_validation="off", vllm_version="0.22.0").resolve(model, **{name: "bfloat16"})
        assert result.status == "resolved"
        with pytest.raises(InvalidInputError, match=name):
            Pipeline(gpu_validation="off", vllm_version="0.20.0").resolve(model, **{name: "bfloat16"})


@pytest.mark.parametrize("release", ["0.20.0", "0.24.0"])
def test_every_case_of_the_earlier_runs_answers_as_its_oracle(release, warm_snapshots):
    # the Mamba 'all' mode at start-up and in the planning (S3a before S3d, K4a before K4e), the
    # align-mode block check before C9.6, MiniMax's state sized at start-up with head_dim None
    found = [d for case_id, r in cases(release) for d in compare(release, case_id, r) if known(d, KNOWN) is None]
    assert found == []


def _startup(release: str, model: str, **args) -> dict:
    return _mode(release, model, **args).to_dict()["startup"]


def test_the_all_mode_sizes_the_block_in_mamba_chunks_until_s3d():
    # 0.24.0 picks 'all' with prefix caching; the block is a multiple of the Mamba chunk
    # (jamba-default: 2048) and the Mamba block spans it; 0.31.0 picks 'align' (C7c), and with
    # --mamba-cache-mode all keeps the chunk; 0.32.0 has no 'all' mode (C7e)
    old = _startup("0.24.0", "jamba-default", enable_prefix_caching=True)
    assert (old["block_size"], old["mamba_block_size"], old["mamba_page_size_padded"]) == (2048, 2048, 8388608)
    assert [d["field"] for d in old["decisions"]] == ["mamba_block_size", "block_size", "mamba_page_size_padded"]
    kept = _startup("0.31.0", "jamba-default", enable_prefix_caching=True, mamba_cache_mode="all")
    assert (kept["block_size"], kept["mamba_block_size"]) == (2048, 2048)
    new = _startup("0.28.0", "jamba-default", enable_prefix_caching=True)
    assert (new["block_size"], new["mamba_block_size"]) == (80, 80)


def test_a_mamba_layer_in_all_mode_keeps_a_block_per_block_of_tokens_until_k4e():
    def concurrency(release, **args):
        return Pipeline(vllm_version=release, gpu="H200", gpu_validation="off",
                        impact={"kv_cache_memory": 17 * 2**30}).resolve(
            str(CONFIGS / "mamba2-default"), **args).impact.max_concurrency
    # 132 blocks of 16 tokens; a request of 2048 tokens keeps 2048 / 16 = 128 of them
    assert concurrency("0.24.0", enable_prefix_caching=True) == 132 / 128
    assert concurrency("0.24.0") == 132.0


def test_the_align_mode_block_must_fit_one_scheduling_step_until_c9_6():
    text = "In Mamba cache align mode, block_size (8304) must be <= max_num_batched_tokens (8192)."
    args = {"enable_prefix_caching": True, "mamba_cache_mode": "align"}
    assert _failure("0.26.0", "nemotron-3-ultra-550b-a55b-bf16", **args) == ("start", "AssertionError", text)
    assert _failure("0.27.0", "nemotron-3-ultra-550b-a55b-bf16", **args) is None


def test_minimax_without_head_dim_stops_where_the_engine_start_sizes_its_state():
    # 0.19.0 sizes the state at config time (enginecfg refuses the field); from C8 the config
    # resolves and the start-up step multiplies by the None; from C1b MiniMax runs on the
    # Transformers backend, which sizes no Mamba state (how its build then ends is F1b's)
    crash = ("start", "TypeError", "unsupported operand type(s) for *: 'int' and 'NoneType'")
    assert _failure("0.20.0", "minimax-default") == crash
    assert _failure("0.23.0", "minimax-default") == crash
    assert _failure("0.24.0", "minimax-default")[:2] == ("build", "ValueError")
    with pytest.raises(InvalidInputError, match="head_dim"):
        Pipeline(vllm_version="0.19.0", gpu_validation="off").resolve(str(CONFIGS / "minimax-default"))


@pytest.mark.parametrize("release, message", [
    ("0.28.0", "Setting kv cache block size to 64 for FLASHMLA backend."),
    ("0.31.0", "Setting kv cache block size to 64 for FLASHMLA backend(s).")])
def test_the_preferred_block_is_the_first_backends_until_s1b(release, message):
    startup = _startup(release, "deepseek-v2-lite-like", attention_backend="FLASHMLA")
    assert startup["block_size"] == 64
    assert [d["reason"] for d in startup["decisions"] if d["field"] == "block_size"] == [message]


@pytest.mark.parametrize("release, version, blocks", [("0.27.0", 4, [16]), ("0.28.0", 2, [16]),
                                                      ("0.29.0", 4, [128])])
def test_flash_attention_at_head_256_on_blackwell_follows_b3c_then_b3d_and_b2e(release, version, blocks):
    # B3c (0.28.0) sent head 256 on Blackwell to FA2; B3d (0.29.0) brought the head-256 FA4 kernel
    # back, with its kernel block of 128 (B2e)
    startup = Pipeline(vllm_version=release, gpu="B200", gpu_validation="off").resolve(
        str(CONFIGS / "qwen3.5-27b"), attention_backend="FLASH_ATTN").to_dict()["startup"]
    attention = [b for b in startup["backends"] if b["kind"] == "attention"]
    assert [(b["fa_version"], b["kernel_block_sizes"]) for b in attention] == [(version, blocks)]


@pytest.mark.parametrize("release, quoted", [
    ("0.27.0", '"GPU KV cache size: 16 tokens" and "Maximum concurrency for'),
    ("0.28.0", '"GPU KV cache size: 16 tokens, Maximum concurrency for')])
def test_the_report_quotes_the_capacity_lines_as_the_release_logs_them(release, quoted):
    # K6c (0.28.0): the two capacity lines became one
    from enginecfg.cli.report import impact_lines

    result = Pipeline(vllm_version=release, gpu="H200", gpu_validation="off",
                      impact={"kv_cache_memory": 17 * 2**30}).resolve(str(CONFIGS / "qwen3.5-27b"))
    line = next(line for line in impact_lines(result) if "vLLM would log" in line)
    assert quoted.replace("16", f"{result.impact.kv_tokens:,}") in line


def test_kimi_linear_takes_its_class_default_length_from_c14():
    # C14 (0.27.0): vLLM's KimiLinearConfig defaults max_position_embeddings to 4096; before it the
    # length is not found (2048, with 0.19.0's warning). One process, both orders: the memoised
    # load of one release is not the other's
    model = str(REPO / "tests" / "data" / "vllm-0.34.0" / "heldout" / "configs" / "kimi-linear-48b-like")

    def length(release):
        return Pipeline(vllm_version=release, gpu_validation="off").resolve(model).config.model_config.max_model_len
    assert [length(r) for r in ("0.26.0", "0.27.0", "0.34.0", "0.26.0", "0.19.0")] == [2048, 4096, 4096, 2048, 2048]
