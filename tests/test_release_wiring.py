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


def test_the_rules_with_nothing_to_switch_are_unreachable_for_the_reasons_given(tmp_path, monkeypatch):
    assert set(releases.NOTHING_TO_SWITCH) == {"C1f", "C4d", "G3a", "G3b", "G4b", "G4c", "G5a", "K4a", "K4c", "K6b",
                                               "K10a", "S2c", "S2d", "S2e", "S3c", "S3f"} | {
        "C3.2a", "C5c", "C1d", "C9.9a", "C9.9b", "C7b", "S2b", "S7"} | {"B1e", "B5a"}
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
    # K10a: a KV connector (kv_transfer_config) is refused as unknown by every release
    for name in ("0.20.0", "0.22.0", "0.34.0"):
        with pytest.raises(InvalidInputError, match="unknown engine argument 'kv_transfer_config'"):
            Pipeline(vllm_version=name, gpu="H200", gpu_validation="off").resolve(
                str(CONFIGS / "qwen3.5-27b"), kv_transfer_config={"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    # S2e: the state alignment needs --use-replayssm, which no release's engine arguments take
    for name in ("0.32.0", "0.34.0"):
        with pytest.raises(InvalidInputError, match="unknown engine argument 'use_replayssm'"):
            Pipeline(vllm_version=name, gpu="H200", gpu_validation="off").resolve(
                str(CONFIGS / "qwen3.5-27b"), use_replayssm=True)
    # K6b: on every config the groups of a plan share one page (or a G2 group is the only one), so
    # dividing the summed bytes by the first group's page counts the same blocks as summing per group
    for name, plan in _plans("0.26.0"):
        assert len(plan.groups) == 1 or len({g.spec.page_size_bytes for g in plan.groups}) == 1, name
    # G5a: no full-attention spec of a plan carries a window or a chunk size, the hybrid manager on or off
    from enginecfg.pipeline.models import kv_cache
    gpu = gpus.find_gpu("H200")
    off = [(f"{name}/hma-off", kv_planning.groups(r.config, r.startup, gpu)) for name in ("gemma4-text-default",)
           for r in [_mode("0.26.0", name, disable_hybrid_kv_cache_manager=True)]]
    full = [(name, layer.spec) for name, plan in [*_plans("0.26.0"), *off] for g in plan.groups for layer in g.layers
            if type(layer.spec) is kv_cache.FullAttentionSpec]
    assert full and all(s.sliding_window is None and s.attention_chunk_size is None for _, s in full)
    assert any(name.endswith("hma-off") for name, _ in full)
    # G3a, G3b: a group of mixed shapes is the plan's only group, and no plan is packed: every group's
    # block is its layers' pages side by side (the layer-outer layout)
    for release in ("0.24.0", "0.29.0"):
        for name, plan in _plans(release):
            assert len(plan.groups) == 1 or not any(g.uniform for g in plan.groups), name
            assert all(g.bytes_per_block == sum(layer.page for layer in g.layers) for g in plan.groups), name
            assert plan.groups[0].uniform or len({g.spec.page_size_bytes for g in plan.groups}) == 1, name
    # G4b, G4c: before the pages are unified, the Mamba and MLA pages of every plan are the largest
    # page, and every non-MLA attention layer runs on a backend that reads its pages by the block stride
    strided = {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"}
    for release in ("0.24.0", "0.28.0"):
        for name, result in _started(release):
            start = kv_planning._StartupView(*kv_planning.startup_key(result.startup))
            layers = kv_planning.layer_specs(result.config, start, gpu)
            top = max(layer.page for layer in layers)
            assert all(layer.page == top for layer in layers
                       if isinstance(layer.spec, (kv_cache.MambaSpec, kv_cache.MLAAttentionSpec))), name
            assert {b["backend"] for b in result.to_dict()["startup"]["backends"] if b["kind"] == "attention"} \
                <= strided, name
        with pytest.raises(InvalidInputError, match="turboquant_k8v4"):
            _mode(release, "qwen3.5-27b", kv_cache_dtype="turboquant_k8v4")
        mla = _mode(release, "deepseek-v2-lite-like")  # (its build fails later, on its MoE: F2)
        layers = kv_planning.layer_specs(mla.config, kv_planning._StartupView(*kv_planning.startup_key(mla.startup)),
                                         gpu)
        assert layers and all(isinstance(layer.spec, kv_cache.MLAAttentionSpec) for layer in layers)
    # B1e: DiffusionGemma, whose hook makes attention non-causal, is a plain Transformers-backend model;
    # B1e, B5a: attention_config (use_non_causal, backend_per_kind) is refused as unknown by every release
    info = architectures.lookup(["DiffusionGemmaForBlockDiffusion"])[1]
    assert info.name == "TransformersForCausalLM" and info.config_hook is None
    for name in ("0.25.0", "0.26.0", "0.34.0"):
        with pytest.raises(InvalidInputError, match="unknown engine argument 'attention_config'"):
            Pipeline(vllm_version=name, gpu="B200", gpu_validation="off").resolve(
                str(CONFIGS / "qwen3.5-27b"), attention_config={"use_non_causal": True,
                                                                "backend_per_kind": {"full_attention": "FLASH_ATTN"}})
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
    # C3.2a: the default a generative hybrid gets is off on both sides of 0.26.0, on only from C3.2b
    for name, on in (("0.25.0", False), ("0.26.0", False), ("0.28.0", True)):
        assert _mode(name, "qwen3.5-27b").to_dict()["config"]["cache_config"]["enable_prefix_caching"] is on
    # C5c: with or without the M-RoPE fields, the text-only Qwen3.5 model resolves to the same context
    # length and SSM-state dtype in 0.26.0 (the C5d hook) and 0.27.0 (its own hook)
    folder = _qwen3_5_text(tmp_path)
    for rope in (True, False):
        if not rope:
            config = json.loads((folder / "config.json").read_text())
            for key in ("mrope_section", "mrope_interleaved"):
                config["rope_parameters"].pop(key)
            (folder / "config.json").write_text(json.dumps(config))
        seen = set()
        for name in ("0.26.0", "0.27.0"):
            doc = _mode(name, str(folder)).to_dict()
            seen.add((doc["config"]["model_config"]["max_model_len"], doc["config"]["cache_config"]["mamba_ssm_cache_dtype"]))
        assert len(seen) == 1 and "float32" in next(iter(seen))
    # C1d: the two engine arguments that disable multimodal inputs are refused by every release
    for name in ("0.26.0", "0.27.0", "0.34.0"):
        for arg, value in (("limit_mm_per_prompt", {"image": 0, "video": 0}), ("language_model_only", True)):
            with pytest.raises(InvalidInputError, match=f"unknown engine argument '{arg}'"):
                _mode(name, "gemma-4-26b-a4b", **{arg: value})
    # C9.9a, C9.9b: enginecfg reads no VLLM_USE_V2_MODEL_RUNNER, so 'align' resolves alike with it set
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    for name in ("0.20.0", "0.21.0", "0.25.0"):
        doc = _mode(name, "qwen3.5-27b", enable_prefix_caching=True, mamba_cache_mode="align").to_dict()
        assert doc["status"] == "resolved" and doc["config"]["cache_config"]["mamba_cache_mode"] == "align"
    # C7b: C7a and its removal need speculative decoding, refused on both sides of 0.22.0
    for name in ("0.21.0", "0.22.0"):
        with pytest.raises(InvalidInputError, match="unknown engine argument 'speculative_config'"):
            _mode(name, "mamba2-default", enable_prefix_caching=True, speculative_config={"num_speculative_tokens": 2})
    # S2b: the TurboQuant KV dtypes are refused on both sides of 0.21.0 (and by 0.34.0)
    for name in ("0.20.0", "0.21.0", "0.34.0"):
        with pytest.raises(InvalidInputError, match="got 'turboquant_k8v4'"):
            _mode(name, "qwen3.5-27b", kv_cache_dtype="turboquant_k8v4")
    # S7: --kv-cache-dtype-skip-layers is refused on both sides of 0.25.0 (and by 0.34.0)
    for name in ("0.24.0", "0.25.0", "0.34.0"):
        with pytest.raises(InvalidInputError, match="unknown engine argument 'kv_cache_dtype_skip_layers'"):
            _mode(name, "qwen3.5-27b", kv_cache_dtype="fp8", kv_cache_dtype_skip_layers=["0"])


@pytest.mark.parametrize("release, budget", [("0.21.0", 2048), ("0.22.0", 2496)])
def test_the_token_budget_holds_one_multimodal_item_of_a_prefix_lm_from_c3_5a(release, budget):
    # Gemma 4's multimodal prefix-LM on the A100's small tier (2048): from C3.5a (0.22.0) the budget
    # is raised to the largest item, a video of 32 frames of 78 tokens
    doc = Pipeline(vllm_version=release, gpu="A100-80GB", gpu_validation="off").resolve(
        str(CONFIGS / "gemma-4-26b-a4b")).to_dict()
    assert doc["impact"]["max_num_batched_tokens"] == budget


def _qwen3_5_text(tmp_path):
    """qwen3.5-27b's text config alone, as a text-only checkpoint (``Qwen3_5ForCausalLM``)."""
    config = json.loads((CONFIGS / "qwen3.5-27b" / "config.json").read_text())["text_config"]
    config["architectures"] = ["Qwen3_5ForCausalLM"]
    folder = tmp_path / "qwen3.5-27b-text"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_text_only_qwen3_5_classes_take_the_qwen3_5_ssm_dtype_from_c5d(tmp_path):
    # C5d (0.26.0): the hook lookup retries under the normalised name, Qwen3_5ForConditionalGeneration
    folder = _qwen3_5_text(tmp_path)
    for name, dtype in (("0.25.0", "auto"), ("0.26.0", "float32"), ("0.34.0", "float32")):
        assert _mode(name, str(folder)).to_dict()["config"]["cache_config"]["mamba_ssm_cache_dtype"] == dtype


def _started(release: str):
    """(config name, result) of every config that starts under *release* on an H200."""
    for folder in sorted(CONFIGS.iterdir()):
        try:
            result = Pipeline(vllm_version=release, gpu="H200", gpu_validation="off").resolve(str(folder))
        except ConfigRejectedError:
            continue
        if result.startup is not None and result.to_dict()["startup"]["failure"] is None:
            yield folder.name, result


def _plans(release: str):
    """(config name, KV-cache plan) of every config that starts under *release* on an H200."""
    gpu = gpus.find_gpu("H200")
    for name, result in _started(release):
        yield name, kv_planning.groups(result.config, result.startup, gpu)


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


def test_minimax_is_built_on_the_transformers_backend_from_f1a():
    # F1a (with C1b, 0.24.0): MiniMax left the registry, so its build runs the Transformers backend,
    # which builds it (every layer as attention) until F1b (0.30.0) refuses its linear-attention
    # layers; 0.23.0 still starts vLLM's own class, which stops where the start-up step sizes its
    # state (C8)
    assert "F1a" in releases.WIRED and "F1a" not in releases.get("0.23.0").unwired
    for name, rule in (("0.23.0", "C8"), ("0.24.0", None), ("0.30.0", "F1")):
        doc = _mode(name, "minimax-default").to_dict()
        assert doc["config"]["model_config"]["architecture"].startswith("Transformers") is (name != "0.23.0")
        failure = doc["startup"]["failure"]
        assert (failure and failure["rule"]) == rule


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
    # Transformers backend, which sizes no Mamba state
    crash = ("start", "TypeError", "unsupported operand type(s) for *: 'int' and 'NoneType'")
    assert _failure("0.20.0", "minimax-default") == crash
    assert _failure("0.23.0", "minimax-default") == crash
    assert _failure("0.24.0", "minimax-default") is None  # every layer is attention there, before F1b
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


def test_the_memory_kept_besides_the_weights_is_the_free_memorys_drop_from_k9b():
    # K9b (0.27.0): the profiling's non-KV memory is what the free memory dropped by (total_consumed)
    # plus the transient headroom; 0.26.0 counted the memory outside torch that appeared since the
    # worker's snapshot, with the torch peak increase (0.19.0's parts)
    def kept(release):
        memory = _mode(release, "qwen3.5-27b").impact.memory
        return next(p for p in memory.parts if p.name == "non_torch"), memory.kv_cache_memory
    (old, old_kv), (new, new_kv) = kept("0.26.0"), kept("0.27.0")
    assert old.bytes == 2**28 and "cuBLAS" in old.basis[0] and "the free memory's drop" not in old.basis[0]
    assert new.bytes == 2**29 and "the free memory's drop" in new.basis[0]
    assert old_kv - new_kv == 2**28


@pytest.fixture
def window_config(tmp_path):
    """gemma4-text-default with three KV heads on its window layers and one on its full ones
    (keys equal to values): a window token's page is 1.5 times a full one's, so whether the
    window page divides the full one depends on the window layer's block."""
    folder = tmp_path / "gemma4-windows"
    shutil.copytree(CONFIGS / "gemma4-text-default", folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(num_attention_heads=6, num_key_value_heads=3, num_global_key_value_heads=1, attention_k_eq_v=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("release, block, window_block, page", [
    ("0.24.0", 128, 128, 393216),   # before K1a: the start-up block, the full page padded to the window's
    ("0.25.0", 128, 16, 262144),    # K1a: FLASHINFER's smallest kernel block, its page padded to the full one
    ("0.29.0", 128, 16, 262144),
    ("0.30.0", 128, 64, 262144),    # K1b: the largest kernel block within the start-up block
    ("0.33.0", 80, 64, 196608),
    ("0.34.0", 80, 16, 163840),     # K1c: the largest one that divides the start-up block
])
def test_the_window_layers_block_follows_k1a_k1b_k1c(window_config, release, block, window_block, page):
    result = Pipeline(vllm_version=release, gpu="H200", gpu_validation="off").resolve(
        str(window_config), block_size=block, attention_backend="FLASHINFER")
    plan = kv_planning.groups(result.config, result.startup, gpus.find_gpu("H200"))
    blocks = {type(g.spec).__name__: (g.block_size, g.spec.page_size_bytes) for g in plan.groups}
    assert blocks == {"SlidingWindowSpec": (window_block, page), "FullAttentionSpec": (block, page)}


def test_the_block_override_is_what_the_start_up_check_plans_against_from_k5a():
    # K5a (0.20.1): with --num-gpu-blocks-override the check and the length estimate read the
    # override's blocks; 0.20.0 checked the profiled memory and replaced only the block count
    def impact(release):
        return Pipeline(vllm_version=release, gpu="H200", gpu_validation="off",
                        impact={"kv_cache_memory": 17 * 2**30, "num_gpu_blocks_override": 64}).resolve(
            str(CONFIGS / "qwen3.5-27b")).impact
    old, new = impact("0.20.0"), impact("0.20.1")
    assert (old.num_blocks, old.blocks_from_memory, new.num_blocks, new.blocks_from_memory) == (64, 355, 64, 355)
    assert old.starts and old.max_model_len_fits == 262144
    assert not new.starts and new.max_model_len_fits == 47824
    assert new.start_error.startswith("To serve at least one request with the models's max seq len (262144)")


def test_a_page_that_does_not_divide_the_largest_is_padded_from_g4a(window_config):
    # G4a (0.24.0): the full-attention page (128 tokens of one KV head) does not divide the window
    # layers' (128 tokens of three), so it is padded to it; 0.23.0 refuses to unify the pages
    def start(release):
        result = Pipeline(vllm_version=release, gpu="H200", gpu_validation="off").resolve(
            str(window_config), block_size=128, attention_backend="FLASHINFER")
        return result, result.to_dict()["startup"]["failure"]
    old, failure = start("0.23.0")
    assert (failure["step"], failure["vllm_type"], failure["message"]) == (
        "start", "NotImplementedError",
        "The page size of the layer is not divisible by the maximum page size. Cannot unify by adjusting block_size.")
    new, failure = start("0.24.0")
    assert failure is None
    plan = kv_planning.groups(new.config, new.startup, gpus.find_gpu("H200"))
    full = next(g.spec for g in plan.groups if type(g.spec).__name__ == "FullAttentionSpec")
    assert (full.block_size, full.real_page_size_bytes, full.page_size_bytes) == (128, 262144, 393216)


@pytest.mark.parametrize("words, key", [("non-torch forward increase memory", "non_torch_increase"),
                                        ("total consumed (from mem_get_info)", "total_consumed")])
def test_the_profiling_line_is_read_in_the_words_before_and_after_k9b(words, key):
    # K9b (0.27.0): the profiling line names the free memory's drop where it named the non-torch increase
    from enginecfg.pipeline.logs import read

    line = (f"INFO 12-05 10:00:00 [gpu_worker.py:300] Memory profiling takes 12.34 seconds. Total non KV cache "
            f"memory: 60.12GiB; torch peak memory increase: 5.36GiB; {words}: 3.40GiB; weights memory: 50.86GiB.\n")
    (start,) = read(line).starts
    assert dict(start.first("profiling").parts) == {"non_kv_cache_memory": "60.12", "torch_peak_increase": "5.36",
                                                    key: "3.40", "weights_memory": "50.86", "seconds": 12.34}


@pytest.mark.parametrize("release, gpu, priority", [
    # B1b (0.21.0): TokenSpeed MLA right after FlashInfer MLA on Blackwell
    ("0.20.0", "B200", ["FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA",
                        "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"]),
    ("0.21.0", "B200", ["FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA",
                        "TRITON_MLA", "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"]),
    # B1c (0.24.0): 12.x gets a list of its own; before it, Hopper's
    ("0.23.0", "RTX-5090", ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASHMLA_SPARSE"]),
    ("0.24.0", "RTX-5090", ["TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120"]),
    # B1d (0.25.0): FlashAttention's sparse MLA before FlashMLA's on Hopper; B1f (0.30.0): FlashInfer's last
    ("0.24.0", "H200", ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASHMLA_SPARSE"]),
    ("0.25.0", "H200", ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASH_ATTN_MLA_SPARSE",
                        "FLASHMLA_SPARSE"]),
    ("0.30.0", "H200", ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASH_ATTN_MLA_SPARSE",
                        "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM90"])])
def test_the_mla_priority_lists_follow_b1b_b1c_b1d(release, gpu, priority):
    startup = Pipeline(vllm_version=release, gpu=gpu, gpu_validation="off").resolve(
        str(CONFIGS / "deepseek-v2-lite-like")).to_dict()["startup"]
    assert [b["priority"] for b in startup["backends"]] == [priority]


def _attention(release: str, gpu: str, model: str, **args) -> list[dict]:
    startup = Pipeline(vllm_version=release, gpu=gpu, gpu_validation="off").resolve(
        str(CONFIGS / model), **args).to_dict()["startup"]
    return [b for b in startup["backends"] if b["kind"] != "mamba"]


@pytest.mark.parametrize("release, backend", [("0.21.0", "FLASH_ATTN"), ("0.22.0", "FLASHINFER")])
def test_flash_attention_takes_only_fp8_and_fp8_e4m3_from_b2b(release, backend):
    # B2b (0.22.0): before it FA3 on Hopper took every quantized KV dtype, fp8_e5m2 too
    (attention,) = _attention(release, "H200", "qwen3-next-default", kv_cache_dtype="fp8_e5m2")
    assert attention["backend"] == backend
    assert ("FLASH_ATTN" in attention["refused"]) == (backend != "FLASH_ATTN")


@pytest.mark.parametrize("release, blocks", [("0.24.0", ([16, 32, 64], [False, False, False])),
                                             ("0.25.0", ([16], [True]))])
def test_flash_attention_kernel_blocks_of_a_float32_state_hybrid_until_b2c(release, blocks):
    # B2c (0.25.0): FLASH_ATTN's [16, 32, 64] for hybrids with a float32 Mamba state is gone
    (attention,) = _attention(release, "H200", "qwen3.5-27b")
    assert (attention["kernel_block_sizes"], attention["kernel_block_multiple_of"]) == blocks


@pytest.mark.parametrize("release, backend", [("0.26.0", None), ("0.27.0", "FLASH_ATTN")])
def test_flash_attention_takes_fp8_with_fa4_on_blackwell_from_b2d(release, backend):
    # B2d (0.27.0): FLASH_ATTN asks flash_attn_supports_kv_cache_dtype, which FA4 on SM100 passes
    (attention,) = _attention(release, "B200", "qwen3-next-default", kv_cache_dtype="fp8",
                              attention_backend="FLASH_ATTN")
    assert attention["backend"] == backend


@pytest.mark.parametrize("release, versions", [("0.20.0", {256: 3, 512: 3}), ("0.21.0", {256: 3, 512: 4})])
def test_flash_attention_3_hands_heads_over_256_to_fa4_on_hopper_from_b3b(release, versions):
    # B3b (0.21.0): FA3 takes no head over 256 on SM90; Gemma 4's global head of 512 goes to FA4
    attention = _attention(release, "H200", "gemma4-text-default", attention_backend="FLASH_ATTN")
    assert {b["head_size"]: b["fa_version"] for b in attention} == versions


@pytest.mark.parametrize("release, model, versions", [
    ("0.26.0", "qwen3.5-27b", {256: 2}), ("0.27.0", "qwen3.5-27b", {256: 4}),
    ("0.27.0", "gemma4-text-default", {256: 2, 512: 2}), ("0.28.0", "qwen3.5-27b", {256: 2})])
def test_fa4_keeps_head_256_on_blackwell_only_in_0_27_and_never_for_a_sliding_window(release, model, versions):
    # before B3e (0.27.0) Blackwell's FA4 takes no head over 128 but 192; B3e keeps head 256 on FA4
    # except for sliding-window layers (Gemma 4's local layers); B3c (0.28.0) withdraws it
    attention = _attention(release, "B200", model, attention_backend="FLASH_ATTN")
    assert {b["head_size"]: b["fa_version"] for b in attention} == versions


@pytest.mark.parametrize("release, model, refused", [
    ("0.23.0", "gemma4-text-default", None),
    ("0.24.0", "gemma4-text-default", "FP8 KV cache is not supported by the Triton attention backend on"),
    ("0.25.0", "deepseek-v2-lite-like", "num_expert_group and topk_group must be provided"),
    ("0.26.0", "deepseek-v2-lite-like", "FP8 KV cache is not supported by the Triton MLA backend on")])
def test_an_fp8_cache_on_triton_below_sm89_fails_to_build_from_f7a_and_f7b(release, model, refused):
    # F7a (0.24.0): the Triton attention backend refuses an FP8 cache below 8.9 when it builds;
    # F7b (0.26.0): the Triton MLA backend too (before it DeepSeek-V2 fails later, on its MoE)
    startup = Pipeline(vllm_version=release, gpu="A100", gpu_validation="off").resolve(
        str(CONFIGS / model), kv_cache_dtype="fp8").to_dict()["startup"]
    message = (startup.get("failure") or {}).get("message")
    assert message == refused if refused is None else message.startswith(refused)


@pytest.mark.parametrize("release, refused", [
    ("0.33.0", ["block_size not supported"]),
    ("0.34.0", ["block_size not supported", "SM90 d512 FP8 KV requires a block size divisible by 64"])])
def test_flash_attention_refuses_an_fp8_head_512_block_off_64_on_hopper_from_b2g(release, refused):
    # B2g (0.34.0): supports_combination's own SM90 head-512 FP8 check; before it the kernel block
    # alone refuses, and so the --block-size warning names FLASH_ATTN for the head-512 layers too
    startup = Pipeline(vllm_version=release, gpu="H200", gpu_validation="off").resolve(
        str(CONFIGS / "gemma4-text-default"), kv_cache_dtype="fp8", block_size=16).to_dict()["startup"]
    assert {b["head_size"]: b["refused"]["FLASH_ATTN"] for b in startup["backends"]}[512] == refused
    precluded = [m for m in startup["messages"] if "precluded higher-priority backend(s) FLASH_ATTN" in m["message"]]
    assert len(precluded) == (2 if release == "0.33.0" else 1)


@pytest.mark.parametrize("release, refusal", [("0.30.0", "FP8 KV cache requires FA3 on SM90 or FA4 on SM100"),
                                              ("0.31.0", "FP8 KV cache requires FA3 on SM90, FA4 with "
                                                         "head_size=512 on SM90, or FA4 on SM100")])
def test_flash_attention_words_its_fp8_refusal_as_the_release_does(release, refusal):
    # B2d (0.27.0) brought the refusal, B2f (0.31.0) new words; Blackwell's FA2 at head 512 refuses FP8
    (attention,) = _attention(release, "B200", "qwen3-next-default", kv_cache_dtype="fp8",
                              attention_backend="FLASH_ATTN", hf_overrides={"head_dim": 512})
    assert refusal in (attention["error"] or "")


@pytest.mark.parametrize("release, backend", [("0.23.0", None), ("0.24.0", "FLASH_ATTN")])
def test_flash_attention_serves_multimodal_prefix_lm_layers_from_b2h(release, backend):
    # B2h (0.24.0): FLASH_ATTN supports_mm_prefix where FA4 is built; before it, a named FLASH_ATTN
    # refuses Gemma 4's prefix-LM layers
    attention = _attention(release, "H200", "gemma-4-26b-a4b", attention_backend="FLASH_ATTN")
    assert {b["backend"] for b in attention} == {backend}
    assert all(("partial multimodal token full attention not supported" in (b["error"] or "")) == (backend is None)
               for b in attention)


@pytest.mark.parametrize("args, before, after", [
    ({"block_size": 0}, "allowed: a positive integer (vLLM 0.22.1 accepts it while it builds its config, which ends "
                        "with cache_config.block_size = 0; enginecfg refuses it after every check of vLLM's)",
     "allowed: an integer greater than 0 (vLLM: Input should be greater than 0)"),
    ({"tensor_parallel_size": 0}, "allowed: a positive integer",
     "allowed: an integer greater than or equal to 1 (vLLM: Input should be greater than or equal to 1)")])
def test_the_block_and_parallel_sizes_are_bounded_fields_from_c13(args, before, after):
    # C13 (0.23.0): CacheConfig.block_size (gt=0) and the parallel sizes (ge=1) refuse out-of-bound
    # values while the config classes are built, in pydantic's words; 0.22.1 accepted them there
    def refusal(release):
        with pytest.raises(InvalidInputError) as err:
            _mode(release, "qwen3.5-27b", **args)
        return str(err.value)
    assert refusal("0.22.1").endswith(before)
    assert refusal("0.23.0").endswith(after)


def test_a_removed_hybrid_on_the_transformers_backend_builds_every_layer_as_attention_until_f1b():
    # before F1b (0.30.0) the Transformers backend gives every layer an attention instance, the
    # linear-attention ones included: MiniMax builds, its 32 layers one full-attention group
    old = Pipeline(vllm_version="0.29.0", gpu="H200", gpu_validation="off").resolve(str(CONFIGS / "minimax-default"))
    assert old.to_dict()["startup"]["failure"] is None
    plan = kv_planning.groups(old.config, old.startup, gpus.find_gpu("H200"))
    assert [(type(g.spec).__name__, len(g.layers)) for g in plan.groups] == [("FullAttentionSpec", 32)]
    assert _failure("0.30.0", "minimax-default") == (
        "build", "ValueError", "Layer 1 (linear_attention) does not dispatch through the Transformers attention "
                               "interface and vLLM has no other way to handle it.")
