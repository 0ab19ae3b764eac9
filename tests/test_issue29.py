"""Issue 29: enginecfg against the real vLLM 0.19.0's answers (``tests/issue29_oracle``), item by
item; how an answer is compared is :mod:`issue29_support`'s."""

from __future__ import annotations

import pytest

from issue29_support import cases, check, run_case

# -- item 2: the numbers in the max-len error -----------------------------------------------------

ITEM2 = cases("2/")


def test_item2_has_the_cases_rules_md_names():
    names = {c["name"] for c in ITEM2}
    assert len(ITEM2) >= 50
    assert {"2/nemotron-h-56b-base-8k/huge", "2/rope-yarn-int/huge", "2/tok-abs-only/generate-huge",
            "2/jamba-1.5-mini/huge-allow", "2/mistral-swa/disable-sw-huge", "2/gemma3-text/huge"} <= names


@pytest.mark.parametrize("case", ITEM2, ids=[c["name"] for c in ITEM2])
def test_item2_max_len_error_prints_the_derived_length_as_vllm(case, warm_snapshots):
    got = run_case(case, "resolve")
    check(case, got)
    if case["status"] == "error" and "User-specified max_model_len" in case["error"]["message"]:
        # the whole message, the number as Python prints vLLM's float or int
        assert " ".join(str(got).split()) == " ".join(case["error"]["root_message"].split())
    if case.get("env", {}).get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        warned = [m["message"] for m in got.to_dict()["messages"] if m["level"] == "WARNING"]
        vllm = [m["message"] for m in case["logs"] if m["message"].startswith("User-specified")]
        assert [w for w in warned if w.startswith("User-specified")] == vllm


#: the pooling cases of item 2 that vLLM was asked with ``--runner pooling`` (an argument
#: enginecfg does not take): the derivation is given what that runner makes vLLM read
RUNNER_POOLING = [c for c in __import__("issue29_support").CONFIG_TIME
                  if c["name"] in ("2/tok-abs-only/pooling-huge", "2/files-llama/pooling-huge",
                                   "2/files-llama-abs/pooling-huge")]


@pytest.mark.parametrize("case", RUNNER_POOLING, ids=[c["name"] for c in RUNNER_POOLING])
def test_item2_pooling_lengths_from_the_tokenizer_and_sentence_transformers(case, warm_snapshots):
    from enginecfg import ConfigRejectedError, EngineConfig
    from enginecfg.pipeline.hf import open_source
    from enginecfg.pipeline.models import derive, model_files

    from issue29_support import case_path

    source = open_source(case_path(case))
    text = EngineConfig.from_pretrained(source).model_config.hf_text_config
    (seen,) = case["max_len"]
    tok = model_files.tokenizer_config(source) if seen["tokenizer_config_model_max_length"] is not None else None
    encoder = model_files.sentence_transformers_encoder(source)
    with pytest.raises(ConfigRejectedError) as info:
        derive.max_model_len(text, case["args"]["max_model_len"], [],
                             tokenizer_max=tok.get("model_max_length") if tok else None,
                             encoder_max=encoder.get("max_seq_length") if encoder else None)
    assert " ".join(str(info.value).split()) == " ".join(case["error"]["root_message"].split())


# -- item 1: one answer from every entry point, in vLLM's order of checks ---------------------------

ENTRIES = ("resolve", "run", "run_many", "from_pretrained_many")
ITEM1 = cases("1/")


def test_item1_has_the_pairs_rules_md_names():
    names = {c["name"] for c in ITEM1}
    assert len(ITEM1) >= 120
    assert {"1/vl-mean+ssm-bf16", "1/vl-mean+mamba-bf16", "1/vl-nopool+tp-0", "1/vl-mean+dtype-int8",
            "1/vl-mean+maxlen-huge", "1/sched-mnbt+ssm-bf16", "1/sched-mnbt+tp-0", "1/sched-mnbt+backend-bad",
            "1/sched-mnbt+maxlen-0", "1/alone/maxlen-0", "1/align-nochunk+backend-bad", "1/align-nochunk+tp-0",
            "1/mbs-noprefix+tp-0"} <= names


#: where vLLM crashes half-way through a hook before a refusal enginecfg reports instead (with
#: -tp 0 vLLM divides by zero sizing the MiniMax state, before it looks at the state's dtype;
#: tests/test_order.py has the same case)
CRASH_PREEMPTED = {"1/minimax-fp32+tp-0": "fp32 state for minimax is not yet supported"}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("case", ITEM1, ids=[c["name"] for c in ITEM1])
def test_item1_every_entry_point_gives_vllms_answer(case, entry, warm_snapshots):
    got = run_case(case, entry)
    if case["name"] in CRASH_PREEMPTED:
        assert CRASH_PREEMPTED[case["name"]] in str(got)
        return
    check(case, got)


def test_item1_the_issues_example_through_from_pretrained(warm_snapshots):
    """The README's first example, what engines call: vLLM's model-level hook refuses the
    pooling name before the cache config looks at the Mamba dtypes."""
    from enginecfg import ConfigRejectedError, EngineConfig, Pipeline

    from issue29_support import CONFIG_TIME, case_path

    (case,) = [c for c in CONFIG_TIME if c["name"] == "1/vl-mean+ssm-bf16"]
    for args in ({"mamba_ssm_cache_dtype": "bfloat16"}, {"mamba_cache_dtype": "bfloat16"}):
        cfg = EngineConfig.from_pretrained(case_path(case), **args)
        with pytest.raises(ConfigRejectedError, match="pool_type 'mean' not supported") as info:
            Pipeline(gpu_validation="off").run(cfg)
        assert info.value.run_id and info.value.document["status"] == "rejected"


# -- item 3: the scheduler's length check -----------------------------------------------------------

ITEM3 = cases("3/")


def test_item3_has_the_cases_rules_md_names():
    names = {c["name"] for c in ITEM3}
    assert {"3/nemotron-vl-embed-avg/mnbt-1024", "3/nemotron-vl-embed-avg/mnbt-8192",
            "3/nemotron-vl-embed-cls/mnbt-512+mns-1024", "3/deepseek-v2-lite-like/nochunk-mnbt-1024",
            "3/jamba-1.5-mini/align-nochunk+mnbt-1024"} <= names


@pytest.mark.parametrize("case", ITEM3, ids=[c["name"] for c in ITEM3])
def test_item3_the_schedulers_length_check(case, warm_snapshots):
    got = run_case(case, "resolve")
    check(case, got)
    if case["status"] == "resolved":
        # vLLM's warnings of this step, as vLLM logged them
        mine = [m["message"] for m in got.to_dict()["messages"]
                if m["stage"] in ("engine-defaults", "scheduler")]
        vllm = [m["message"] for m in case["logs"] if "officially support" in m["message"]
                or "exceeds max_num_seqs" in m["message"]]
        assert mine == vllm


# -- item 4: --disable-hybrid-kv-cache-manager --------------------------------------------------------

ITEM4 = cases("4/")


@pytest.mark.parametrize("case", ITEM4, ids=[c["name"] for c in ITEM4])
def test_item4_the_hybrid_manager_flag_is_taken_and_kept(case, warm_snapshots):
    got = run_case(case, "resolve")
    check(case, got)
    want = case["final"]["scheduler_config"]["disable_hybrid_kv_cache_manager"]
    assert got.config.scheduler_config.disable_hybrid_kv_cache_manager is want


# -- item 7: deliberate refusals come last ----------------------------------------------------------

ITEM7 = cases("7/")


def test_item7_has_the_combinations_rules_md_names():
    names = {c["name"] for c in ITEM7}
    assert len(ITEM7) >= 140
    assert {"7/jamba-1.5-mini/bs-16/mbs256-noprefix", "7/jamba-1.5-mini/bs0/align-nochunk",
            "7/deepseek-v2-lite-like/bs-16/tp3", "7/mamba-130m-hf/bs0/align"} <= names


@pytest.mark.parametrize("case", ITEM7, ids=[c["name"] for c in ITEM7])
def test_item7_nonpositive_block_sizes_are_refused_after_every_check_of_vllms(case, warm_snapshots):
    got = run_case(case, "resolve")
    check(case, got)
    if case["status"] == "resolved":
        # the refusal says what vLLM made of the value, as the run's record shows it
        block = case["final"]["cache_config"]["block_size"]
        assert f"cache_config.block_size = {block};" in str(got)
