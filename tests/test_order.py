"""Where two things are wrong, enginecfg reports the one vLLM 0.19.0 reports.

``tests/order_oracle/expected.json`` holds what the real vLLM answered for every case of
``tests/order_oracle/make_cases.py`` (a bad engine argument with a config the model config
rejects, with a model-level hook error, with a vllm-level hook error, with a post-check;
two bad arguments at once).  Per case: vLLM's deliberate refusal (ValueError, AssertionError,
the config class's validator) must be enginecfg's error too, with vLLM's first sentence and
exception type; a field vLLM's own type check refused must be an ``InvalidInputError``
naming that argument; where vLLM crashes instead (ZeroDivisionError, TypeError, ...)
enginecfg gives its own error naming the argument or config field that causes the crash.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from enginecfg import ConfigRejectedError, EngineCfgError, InvalidInputError, Pipeline
from enginecfg.pipeline.errors import StageError
from enginecfg.pipeline.plugins import builtin_stages

HERE = Path(__file__).resolve().parent / "order_oracle"
EXPECTED = json.loads((HERE / "expected.json").read_text())
CASES = sorted(n for n in EXPECTED if not n.startswith("types/"))

#: vLLM's exceptions that are crashes, not refusals
CRASHES = {"ZeroDivisionError", "TypeError", "AttributeError", "KeyError", "IndexError"}
#: engine arguments behind a field of vLLM's config classes that its type check refused
ARG_OF_FIELD = {"cache_dtype": {"kv_cache_dtype"},
                "max_num_batched_tokens": {"max_num_batched_tokens", "max_model_len"},
                "max_num_seqs": {"max_num_batched_tokens", "max_model_len"}}
#: vLLM refuses these while building the whole config in words of its own; enginecfg names
#: the argument behind them
ARG_OF_MESSAGE = {"Unknown distributed executor backend": "pipeline_parallel_size"}
#: where vLLM accepts what enginecfg refuses (it fails later, when the engine starts)
STRICTER = {"single/block0": "block_size"}
#: where vLLM crashes half-way through a hook, before a refusal enginecfg reports instead:
#: with -tp 0 vLLM divides by zero sizing the attention page, before it looks at the
#: MiniMax state dtype (enginecfg checks the parallel sizes after the hooks)
CRASH_PREEMPTED = {"pair/minimax-fp32+tp0": "fp32 state for minimax is not yet supported"}


def _first_sentence(text: str) -> str:
    return " ".join(text.split()).split(". ")[0]


def _run(case):
    path = str((HERE / case["config"]).resolve())
    return Pipeline(stages=builtin_stages(), gpu_validation="off").resolve(
        path, **case["engine_args"])


def test_from_pretrained_keeps_a_bad_argument_for_the_run_after_reading_the_config():
    """``from_pretrained`` is the first half of vLLM's ``create_engine_config``: what vLLM
    refuses while building its model config (a config the transformers class refuses) is
    raised at once; an argument vLLM checks later is refused by the run, at vLLM's step, as
    ``resolve`` refuses it (issue 29, item 1)."""
    from enginecfg import EngineConfig

    path = str((HERE / EXPECTED["single/ssm-bf16"]["config"]).resolve())
    cfg = EngineConfig.from_pretrained(path, mamba_ssm_cache_dtype="bfloat16")
    with pytest.raises(InvalidInputError) as info:
        Pipeline(stages=builtin_stages(), gpu_validation="off").run(cfg)
    assert info.value.field == "mamba_ssm_cache_dtype"
    falcon = str((HERE / EXPECTED["single/falcon-bad-heads"]["config"]).resolve())
    with pytest.raises(ConfigRejectedError, match="mamba_n_heads must divide"):
        EngineConfig.from_pretrained(falcon, mamba_ssm_cache_dtype="bfloat16")


def test_the_oracle_results_cover_each_kind_of_order():
    stages = {v.get("stage") for v in EXPECTED.values()}
    assert {"before ModelConfig verify", "ModelConfig._try_verify_and_update_model_config",
            "VllmConfig.try_verify_and_update_config",
            "VllmConfig.__post_init__ (after try_verify)"} <= stages
    assert len(CASES) >= 150


@pytest.mark.parametrize("name", CASES)
def test_the_first_error_is_vllms(name, warm_snapshots):
    case = EXPECTED[name]
    if case["status"] == "resolved":
        with pytest.raises(InvalidInputError) as info:
            _run(case)
        assert info.value.field == STRICTER[name]
        return
    with pytest.raises(EngineCfgError) as info:
        _run(case)
    err = info.value
    assert not isinstance(err, StageError), f"a stage crashed: {err}"
    got = " ".join(str(err).split())
    if case["invalid_fields"]:                      # vLLM's own type check of a field
        field = case["invalid_fields"][0]
        assert isinstance(err, InvalidInputError), got
        assert err.field in ARG_OF_FIELD.get(field, {field}) & set(case["engine_args"]), got
    elif name in CRASH_PREEMPTED:
        assert isinstance(err, ConfigRejectedError) and CRASH_PREEMPTED[name] in got
    elif case["type"] in CRASHES:                   # vLLM crashes; enginecfg names the cause
        assert isinstance(err, InvalidInputError), got
        assert err.field in case["engine_args"] or err.field.startswith("hf_config."), got
    elif case["first_sentence"] in ARG_OF_MESSAGE:
        assert isinstance(err, InvalidInputError) and err.field == ARG_OF_MESSAGE[
            case["first_sentence"]], got
    else:                                           # vLLM's deliberate refusal
        assert _first_sentence(case["message"]) in got
        if isinstance(err, ConfigRejectedError):
            assert err.vllm_type == case["type"]
        else:                                       # an argument vLLM refuses by name
            assert isinstance(err, InvalidInputError) and err.field in case["engine_args"]
