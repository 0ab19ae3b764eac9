"""``pooling``: LlamaNemotronVL embedding and reranking: bidirectional attention, the vision patch size, the pooling type."""

from __future__ import annotations

import pytest

from support import check_stage_against_fixture, resolved_cases

FIELDS = {"pooler_config": ["seq_pooling_type", "tok_pooling_type"], "hf_config": ["is_causal", "patch_size"]}
CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decides_what_vllm_decided(case, warm_snapshots):
    check_stage_against_fixture("pooling", FIELDS, case)


def test_a_pooler_config_where_vllm_left_none_fails_the_comparison(monkeypatch, warm_snapshots):
    """437 of the cases expect no pooler config: the comparison holds enginecfg to that too."""
    import enginecfg.testing as testing

    unset = [c for c in CASES if c["expected"]["config"].get("pooler_config", "absent") is None]
    assert len(unset) > 400
    real = testing.run_stage

    def with_a_pooler(*args, **kwargs):
        result = real(*args, **kwargs)
        doc = result.to_dict()
        doc["config"]["pooler_config"] = {"seq_pooling_type": "LAST", "tok_pooling_type": "ALL"}
        monkeypatch.setattr(type(result), "to_dict", lambda self: doc)
        return result
    monkeypatch.setattr(testing, "run_stage", with_a_pooler)
    with pytest.raises(AssertionError, match="pooler_config: vLLM left it unset"):
        check_stage_against_fixture("pooling", FIELDS, unset[0])


# -- LlamaBidirectionalModel / ForSequenceClassification: the real vLLM's answers ------------------
# tests/issue29_oracle/ask_bidir.py asked vLLM 0.19.0 (bidir_config_time.json) and 0.34.0
# (bidir_config_time_034.json) on the same 51 cases: the pooling names avg / cls / last, an
# unknown one, null, none, a list; the start-up argument sets; the scheduler's length check.

import json  # noqa: E402

from issue29_support import HERE as ORACLE, case_path, check, run_case  # noqa: E402

BIDIR = json.loads((ORACLE / "bidir_config_time.json").read_text())["results"]
BIDIR_034 = json.loads((ORACLE / "bidir_config_time_034.json").read_text())["results"]
#: what vLLM crashes on (it looks the value up without checking it): bad input here
CRASHES = {"AttributeError", "TypeError"}


def _vllm_type(error):
    return error.get("root_type") or error["type"]


@pytest.mark.parametrize("case", BIDIR, ids=[c["name"] for c in BIDIR])
def test_llama_bidirectional_is_vllms(case, warm_snapshots):
    from enginecfg import InvalidInputError

    got = run_case(case, "resolve")
    if case["status"] == "error" and _vllm_type(case["error"]) in CRASHES:
        assert isinstance(got, InvalidInputError) and got.field == "hf_config.pooling", got
        return
    check(case, got)
    if case["status"] == "resolved":
        doc = got.to_dict()
        assert doc["config"]["hf_config"]["is_causal"] is case["final"]["hf_config"]["is_causal"] is False
        assert doc["config"]["model_config"]["runner_type"] == case["final"]["model_config"]["runner_type"]
        # the hook's writes in vLLM's order; it logs nothing
        ours = [c for c in doc["changes"] if c["stage"] == "pooling"]
        want = ["hf_config.is_causal"] + (["pooler_config.seq_pooling_type"]
                                          if case["final"]["pooler_config"]["seq_pooling_type"] != "LAST" else [])
        assert [c["field"] for c in ours] == want
        assert [m for m in doc["messages"] if m["stage"] == "pooling"] == []
        # encoder-only layers (is_causal off) keep no KV cache
        assert doc["startup"]["backends"][0]["layer_class"] == "EncoderOnlyAttention"
        assert doc["impact"]["groups"] == []


def _param034(r):
    return pytest.param(r, id=r["name"])


@pytest.mark.parametrize("r", [_param034(r) for r in BIDIR_034])
def test_llama_bidirectional_is_vllm_034s(r, warm_snapshots):
    from enginecfg import ConfigRejectedError, EngineCfgError, InvalidInputError, Pipeline
    from enginecfg.pipeline.plugins import builtin_stages

    pipeline = Pipeline(stages=builtin_stages("0.34.0"), vllm_version="0.34.0", gpu_validation="off")
    if r["error"] is not None:
        with pytest.raises(EngineCfgError) as info:
            pipeline.resolve(case_path(r), **r["args"])
        err, exc = r["error"], info.value
        if _vllm_type(err) in CRASHES:
            assert isinstance(exc, InvalidInputError) and exc.field == "hf_config.pooling"
            return
        assert isinstance(exc, ConfigRejectedError) and exc.vllm_type == _vllm_type(err)
        assert " ".join(err["root_message"].split()) in " ".join(str(exc).split())
        return
    doc = pipeline.resolve(case_path(r), **r["args"]).to_dict()
    final, cfg = r["final"], doc["config"]
    assert cfg["hf_config"]["is_causal"] is final["hf_config"]["is_causal"] is False
    for field in ("seq_pooling_type", "tok_pooling_type"):
        assert cfg["pooler_config"][field] == final["pooler_config"][field]
    for field in ("block_size", "user_specified_block_size", "cache_dtype", "enable_prefix_caching"):
        assert cfg["cache_config"][field] == final["cache_config"][field], field
    for field in ("architecture", "runner_type", "convert_type", "max_model_len"):
        assert cfg["model_config"][field] == final["model_config"][field], field
    assert cfg["scheduler_config"]["enable_chunked_prefill"] == final["scheduler_config"]["enable_chunked_prefill"]
    assert [m for m in doc["messages"] if m["stage"] == "pooling"] == []
