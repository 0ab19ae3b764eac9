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


# -- item 8: the files vLLM reads beside config.json ------------------------------------------------

ITEM8 = cases("8/")


def _opened(doc: dict) -> set[str]:
    """The settings files a run read (safetensors headers aside: their own oracle is
    tests/sources_oracle)."""
    return {f["name"] for f in doc["source"]["files"] if ".safetensors" not in f["name"]}


def test_item8_has_the_cases_rules_md_names():
    names = {c["name"] for c in ITEM8}
    assert {"8/modelopt-nano-nvfp4/default", "8/modelopt-super-fp8/default", "8/modelopt-both/default",
            "8/modelopt-llama-empty/default", "8/modelopt-nano-nvfp4/dtype-fp32", "8/files-llama/default",
            "8/files-llama-abs/default", "8/files-llama-generate/default"} <= names


@pytest.mark.parametrize("case", ITEM8, ids=[c["name"] for c in ITEM8])
def test_item8_reads_what_vllm_reads_and_takes_the_quantization_from_it(case, warm_snapshots):
    got = run_case(case, "resolve")
    check(case, got)
    doc = got.document if case["status"] == "error" else got.to_dict()
    assert _opened(doc) == set(case["files_opened"])
    # every file vLLM may read that the folder lacks is recorded as looked for and absent
    assert not set(doc["source"]["absent"]) & set(case["files_opened"])
    if case["status"] == "resolved":
        mine = [m["message"] for m in doc["messages"] if m["message"].startswith("Detected ModelOpt")]
        assert mine == [m["message"] for m in case["logs"] if m["message"].startswith("Detected ModelOpt")]


def test_item8_the_quantization_file_drives_the_weight_estimate(warm_snapshots):
    """Nemotron 3 Nano NVFP4 with its hf_quant_config.json is priced at 4.5 bits per linear
    weight; the same config.json alone is an unquantized bfloat16 model (vLLM reads it so)."""
    from enginecfg import Pipeline
    from enginecfg.pipeline.models.weights import estimate_weights

    from issue29_support import CONFIG_TIME, case_path

    folder = {c["name"]: case_path(c) for c in CONFIG_TIME}
    with_file = Pipeline(gpu_validation="off").resolve(folder["8/modelopt-nano-nvfp4/default"])
    without = Pipeline(gpu_validation="off").resolve(folder["8/nemotron-3-nano-30b-a3b-nvfp4/default (no file beside)"])
    a, b = estimate_weights(with_file.config), estimate_weights(without.config)
    assert a.params == b.params and a.bytes_total < 0.4 * b.bytes_total
    assert any("modelopt_fp4" in line for line in a.basis)
    assert with_file.impact.memory.weights.bytes_per_gpu == a.bytes_per_gpu
    assert with_file.to_dict()["source"]["files"][-1]["name"] == "hf_quant_config.json"


HUB_CASES = [c for c in __import__("issue29_support").HUB if not set(c["args"]) & {"runner"}]


@pytest.mark.parametrize("case", HUB_CASES, ids=[c["name"] for c in HUB_CASES])
def test_item8_repo_ids_fetch_only_what_vllm_fetches(case, tmp_path, monkeypatch, warm_snapshots):
    import huggingface_hub.constants

    from enginecfg import Pipeline
    from hubsupport import LocalHub

    from issue29_support import CONFIG_TIME, HERE

    folder = HERE / "configs" / case["repo_id"].split("/")[1]
    files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with LocalHub({case["repo_id"]: {"commit": "1" * 40, "files": files}}, listing=True) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        result = Pipeline(gpu_validation="off").resolve(case["repo_id"], **case["args"])
    def asked(requests):  # (HEAD or GET, file) of every request for a whole file
        return {(method, path.split("/resolve/", 1)[1].split("/", 1)[1]) for method, path, rng, *_ in requests
                if "/resolve/" in path and rng is None}

    # the same files asked about (HEAD) and fetched (GET): the repo's file list decides which
    # of them vLLM asks about at all
    assert asked(hub.requests) == asked(case["hub_requests"])
    assert _opened(result.to_dict()) == {name.split(":", 1)[1] for name in case["files_opened"]}
    # the same answer as the folder the repo was made from, where vLLM was asked that too
    for same in [c for c in CONFIG_TIME if c["name"] == case["name"].replace("8/hub/org/", "8/")]:
        check(same, result)


def test_item8_a_quantization_file_put_beside_later_is_read_again(tmp_path, warm_snapshots):
    """The source record lists the files looked for and absent; a load of the same folder
    again reads each of them again (the load memo), so hf_quant_config.json put there later
    is taken, as vLLM would take it."""
    import shutil

    from enginecfg import EngineConfig

    from issue29_support import HERE

    folder = tmp_path / "nano"
    folder.mkdir()
    shutil.copy(HERE / "configs" / "modelopt-nano-nvfp4" / "config.json", folder / "config.json")
    first = EngineConfig.from_pretrained(folder)
    assert first.model_config.quantization is None and "hf_quant_config.json" in first.source["absent"]
    assert {"processor_config.json", "preprocessor_config.json", "modules.json",
            "sentence_bert_config.json"} <= set(first.source["absent"])
    shutil.copy(HERE / "configs" / "modelopt-nano-nvfp4" / "hf_quant_config.json", folder / "hf_quant_config.json")
    again = EngineConfig.from_pretrained(folder)
    assert (again.model_config.quantization, again.cache_config.cache_dtype) == ("modelopt_fp4", "fp8_e4m3")
    assert "hf_quant_config.json" in {f["name"] for f in again.source["files"]}


# -- item 1 (and 3, 4, 7) on the command line: cli.json ----------------------------------------------

CLI_CASES = __import__("issue29_support").CLI


def _cli_args(argv: list[str]) -> dict:
    """The engine arguments of a vllm serve argv, as enginecfg's flags read them."""
    from enginecfg.pipeline.engine_args import ENGINE_ARGS, parse_flag_text

    by_flag = {f: a for a in ENGINE_ARGS.values() for f in a.flags}
    out, i = {}, 0
    while i < len(argv):
        flag = argv[i]
        i += 1
        if flag.startswith("--no-") and "--" + flag[5:] in by_flag:
            out[by_flag["--" + flag[5:]].name] = False
        elif by_flag[flag].kind == "bool":
            out[by_flag[flag].name] = True
        else:
            out[by_flag[flag].name], i = parse_flag_text(by_flag[flag], argv[i]), i + 1
    return out


@pytest.mark.parametrize("pasted", [True, False], ids=["vllm-serve-line", "enginecfg-flags"])
@pytest.mark.parametrize("case", CLI_CASES, ids=[c["name"] for c in CLI_CASES])
def test_item1_the_command_line_answers_as_vllm_serve(case, pasted, warm_snapshots):
    """A pasted ``vllm serve`` line is read by vLLM's parser first: a value outside a flag's
    choices is refused as vLLM refuses it, before any file is read.  enginecfg's own flags
    leave choices to the run, which answers in the config's order, as Python callers get."""
    import json

    from support import run_cli

    from issue29_support import case_path, deliberate

    path = case_path(case)
    head = ["run", "vllm", "serve", path] if pasted else ["run", path]
    proc = run_cli(*head, *case["argv"], "--no-audit", "--gpu-validation", "off", "--json")
    text = " ".join(proc.stderr.split())
    if case["status"] == "refused":                       # vLLM's parser refused the line
        if pasted:
            assert proc.returncode == 2 and proc.stdout == ""
            assert text == "enginecfg: " + case["message"]
            return
        want = run_case({"config_dir": case["config_dir"], "args": _cli_args(case["argv"])}, "resolve")
        assert proc.returncode == want.exit_code and " ".join(str(want).split()) in text
        return
    if case["status"] == "error":
        assert proc.returncode in (1, 2), proc.stderr
        assert " ".join(case["error"]["root_message"].split()) in text if case["error"].get("root_message") \
            else "mamba_block_size" in text
        return
    if deliberate({"args": _cli_args(case["argv"])}):    # enginecfg's own refusal, last
        assert proc.returncode == 2 and f"cache_config.block_size = {case['block_size']};" in text
        return
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["config"]["cache_config"]["block_size"] == case["block_size"]
    assert doc["config"]["scheduler_config"]["disable_hybrid_kv_cache_manager"] is \
        case["disable_hybrid_kv_cache_manager"]
