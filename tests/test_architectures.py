"""The architecture table: lookup and normalisation, class flags, and the is_hybrid rule."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest

from support import FIXTURES

from enginecfg.pipeline.models.architectures import (
    ARCHITECTURES,
    GENERIC_ATTENTION,
    HOOK_LEVELS,
    is_hybrid,
    lookup,
    normalize,
)
from enginecfg.pipeline.errors import InvalidInputError


# Every architecture of the spec's table (§4.2), each of which must be a row.
SPEC_TABLE = {
    "BambaForCausalLM", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM",
    "JambaForCausalLM", "JambaForSequenceClassification", "KimiLinearForCausalLM",
    "Lfm2ForCausalLM", "ColBERTLfm2Model", "Lfm2MoeForCausalLM",
    "Lfm2VlForConditionalGeneration", "MambaForCausalLM", "FalconMambaForCausalLM",
    "Mamba2ForCausalLM", "MiniMaxForCausalLM", "MiniMaxText01ForCausalLM",
    "MiniMaxM1ForCausalLM", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Nano_VL_V2", "OlmoHybridForCausalLM", "Plamo2ForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "ColQwen3_5",
    "Qwen3NextForCausalLM", "Zamba2ForCausalLM", "BailingMoeV2_5ForCausalLM", "Terratorch",
    "PrithviGeoSpatialMAE",
}

# The spec's "MPC summary": the only classes that support Mamba prefix caching.
MPC = {
    "BambaForCausalLM", "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM",
    "JambaForCausalLM", "JambaForSequenceClassification", "MambaForCausalLM",
    "FalconMambaForCausalLM", "Mamba2ForCausalLM", "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM", "Zamba2ForCausalLM",
}

ATTENTION_FREE = {"MambaForCausalLM", "FalconMambaForCausalLM", "Mamba2ForCausalLM",
                  "Terratorch", "PrithviGeoSpatialMAE"}


def test_every_spec_architecture_is_a_row():
    assert SPEC_TABLE <= set(ARCHITECTURES)
    for name, info in ARCHITECTURES.items():
        assert info.name == name


def test_mpc_flag_is_exactly_the_spec_list():
    assert {n for n, i in ARCHITECTURES.items() if i.supports_mamba_prefix_caching} == MPC


def test_families_and_flags_agree():
    assert {n for n, i in ARCHITECTURES.items() if i.is_attention_free} == ATTENTION_FREE
    hybrid = SPEC_TABLE - ATTENTION_FREE
    assert {n for n, i in ARCHITECTURES.items() if i.is_hybrid_class} == hybrid
    for info in ARCHITECTURES.values():
        expected = ("hybrid" if info.is_hybrid_class
                    else "attention_free" if info.is_attention_free else "attention")
        assert info.family == expected, info.name
        assert not (info.is_hybrid_class and info.is_attention_free)


def test_every_state_row_names_its_recipe_and_source():
    for info in ARCHITECTURES.values():
        if info.has_mamba_state:
            assert info.state_recipe and info.state_source, info.name
        else:
            assert info.state_recipe is None and info.num_spec_source == "none", info.name
    # every hybrid class sizes a state; Terratorch has none
    assert all(ARCHITECTURES[n].has_mamba_state for n in SPEC_TABLE - {"Terratorch",
                                                                        "PrithviGeoSpatialMAE"})
    assert not ARCHITECTURES["Terratorch"].has_mamba_state


def test_state_kinds_and_sources_from_the_spec():
    a = ARCHITECTURES
    assert a["JambaForCausalLM"].state_kind == "mamba1"
    assert a["MambaForCausalLM"].state_kind == "mamba1"
    assert a["Plamo2ForCausalLM"].state_kind == "mamba2"
    assert a["KimiLinearForCausalLM"].state_kind == "kda"
    assert a["OlmoHybridForCausalLM"].state_kind == "gated_delta_net"
    assert a["Lfm2MoeForCausalLM"].state_kind == "short_conv"
    assert a["BailingMoeV2_5ForCausalLM"].state_kind == "linear_attention"
    assert a["Qwen3NextForCausalLM"].state_source == "hf_text_config"
    assert a["ColQwen3_5"].state_source == "hf_text_config"
    assert a["OlmoHybridForCausalLM"].state_source == "hf_config"
    assert a["Lfm2VlForConditionalGeneration"].state_source == "text_config"
    assert a["NemotronH_Nano_VL_V2"].state_source == "nano_vl"
    # speculative tokens: none for Bamba-style configs, read for NemotronH, Mamba2 and GDN
    assert a["BambaForCausalLM"].num_spec_source == "none"
    assert a["Zamba2ForCausalLM"].num_spec_source == "none"
    assert a["NemotronHForCausalLM"].num_spec_source == "vllm"
    assert a["Mamba2ForCausalLM"].num_spec_source == "vllm"
    assert a["Qwen3_5MoeForConditionalGeneration"].num_spec_source == "speculative"


def test_pooling_rows():
    pooling = {n for n, i in ARCHITECTURES.items() if i.is_pooling}
    assert {"LlamaNemotronVLModel", "LlamaNemotronVLForSequenceClassification", "ColQwen3_5",
            "ColBERTLfm2Model", "JambaForSequenceClassification", "LlamaBidirectionalModel",
            "LlamaBidirectionalForSequenceClassification"} <= pooling
    assert "JambaForCausalLM" not in pooling
    # registered by name: not the suffix table's generic pooling class, and a plain decoder's layers
    bidir = ARCHITECTURES["LlamaBidirectionalModel"]
    assert (bidir.module_class, bidir.family, bidir.kv_layout) == ("llama.LlamaBidirectionalModel", "attention", None)
    assert ARCHITECTURES["LlamaBidirectionalForSequenceClassification"].module_class == \
        "llama.LlamaBidirectionalForSequenceClassification"
    assert "Qwen3_5ForConditionalGeneration" not in pooling


def test_config_hooks_follow_models_config_map():
    hooks = {n: i.config_hook for n, i in ARCHITECTURES.items() if i.config_hook}
    assert hooks == {
        "Gemma4ForCausalLM": "gemma4", "Gemma4ForConditionalGeneration": "gemma4",
        "LlamaNemotronVLModel": "llama_nemotron_vl",
        "LlamaNemotronVLForSequenceClassification": "llama_nemotron_vl",
        "LlamaBidirectionalModel": "llama_bidirectional",
        "LlamaBidirectionalForSequenceClassification": "llama_bidirectional",
        "MambaForCausalLM": "mamba", "FalconMambaForCausalLM": "mamba",
        "Mamba2ForCausalLM": "mamba",
        "NemotronHForCausalLM": "nemotron_h", "NemotronHPuzzleForCausalLM": "nemotron_h",
        "Qwen3_5ForConditionalGeneration": "qwen3_5",
        "Qwen3_5MoeForConditionalGeneration": "qwen3_5", "ColQwen3_5": "qwen3_5",
        "JambaForSequenceClassification": "jamba_seq_cls",
        "NemotronH_Nano_VL_V2": "nemotron_nano_vl",
    }
    assert set(hooks.values()) == set(HOOK_LEVELS)
    assert HOOK_LEVELS["llama_nemotron_vl"] == "model"
    assert HOOK_LEVELS["llama_bidirectional"] == "model"
    assert HOOK_LEVELS["nemotron_h"] == "vllm"


# --- lookup -------------------------------------------------------------------------------

def test_lookup_registered_name():
    name, info = lookup(["NemotronHForCausalLM"])
    assert name == "NemotronHForCausalLM"
    assert info is ARCHITECTURES["NemotronHForCausalLM"]


def test_lookup_keeps_the_unnormalised_name():
    name, info = lookup(["Qwen3NextForSequenceClassification"])
    assert name == "Qwen3NextForSequenceClassification"
    assert info is ARCHITECTURES["Qwen3NextForCausalLM"]
    # no hook row for the converted name itself
    assert "Qwen3NextForSequenceClassification" not in ARCHITECTURES


def test_normalize_by_suffix_table_order():
    # "Model" is the matched suffix; ForCausalLM is the first replacement that is registered
    assert normalize("JambaModel") == "JambaForCausalLM"
    # EmbeddingModel matches before the bare Model
    assert normalize("Qwen3_5EmbeddingModel") == "Qwen3_5ForConditionalGeneration"
    assert normalize("BambaForRewardModeling") == "BambaForCausalLM"
    assert normalize("NoSuchThing") is None
    assert normalize("NoSuchForCausalLM") is None


def test_lookup_takes_the_first_resolvable_entry():
    name, info = lookup(["NoSuchForCausalLM", "JambaForCausalLM", "BambaForCausalLM"])
    assert name == "JambaForCausalLM"
    assert info is ARCHITECTURES["JambaForCausalLM"]


def test_unknown_architecture_is_generic_attention():
    name, info = lookup(["SomethingNewForCausalLM"])
    assert name == "SomethingNewForCausalLM"
    assert info is GENERIC_ATTENTION
    assert info.family == "attention"
    assert not info.is_hybrid_class and not info.is_attention_free
    assert not info.has_mamba_state and info.config_hook is None


@pytest.mark.parametrize("bad", [[], "JambaForCausalLM", None, [1]])
def test_lookup_rejects_bad_architectures(bad):
    with pytest.raises(InvalidInputError) as err:
        lookup(bad)
    assert err.value.field == "hf_config.architectures"


# --- is_hybrid ------------------------------------------------------------------------------

def test_granite_all_attention_is_not_hybrid():
    info = ARCHITECTURES["GraniteMoeHybridForCausalLM"]
    assert not is_hybrid(info, NS(layer_types=["attention"] * 40))
    assert is_hybrid(info, NS(layer_types=["attention", "mamba", "attention"]))


def test_lfm2_all_full_attention_is_still_hybrid():
    info = ARCHITECTURES["Lfm2ForCausalLM"]
    assert is_hybrid(info, NS(layer_types=["full_attention"] * 16))


def test_absent_or_none_layer_types_is_hybrid():
    info = ARCHITECTURES["Qwen3_5ForConditionalGeneration"]
    assert is_hybrid(info, NS())
    assert is_hybrid(info, NS(layer_types=None))


def test_non_hybrid_class_is_never_hybrid():
    assert not is_hybrid(ARCHITECTURES["MambaForCausalLM"], NS())
    assert not is_hybrid(ARCHITECTURES["LlamaForCausalLM"], NS(layer_types=["mamba"]))


def _view(obj):
    if isinstance(obj, dict):
        return NS(**{k: _view(v) for k, v in obj.items()})
    return obj


def _flag_cases():
    cases = json.loads((FIXTURES / "cases.json").read_text())["cases"]
    seen = set()
    for case in cases:
        model = (case["expected"].get("config") or {}).get("model_config")
        if model and case["config"] not in seen:
            seen.add(case["config"])
            yield pytest.param(case, id=case["config"].split("/")[-1])


@pytest.mark.parametrize("case", list(_flag_cases()))
def test_flags_match_fixtures(case):
    raw = json.loads((FIXTURES / case["config"] / "config.json").read_text())
    name, info = lookup(raw["architectures"])
    model = case["expected"]["config"]["model_config"]
    assert name == model["architecture"]
    assert is_hybrid(info, _view(raw)) == model["is_hybrid"]
    assert info.is_attention_free == model["is_attention_free"]
    assert info.supports_mamba_prefix_caching == model["supports_mamba_prefix_caching"]


def test_suffix_defaults_make_a_bare_model_class_an_embedding_model():
    from enginecfg.pipeline.models.architectures import default_is_embedding

    assert default_is_embedding("Qwen3_5Model")
    assert default_is_embedding("FooEmbeddingModel") and default_is_embedding("FooRewardModel")
    assert not default_is_embedding("FooForCausalLM")
    assert not default_is_embedding("InternVLChatModel")  # "ChatModel" comes before "Model"
    assert not default_is_embedding("FooForSequenceClassification")  # pooling, but classify
    assert not default_is_embedding("Foo")
