"""``--runner generate`` and ``--runner draft`` as vLLM takes them (tests/data/runner_oracle: the
0.19.0 and 0.34.0 oracles' answers, made by its ``make_answers.sh``).

A generative class runs under either: ``draft`` is the runner type vLLM records; a pooling-only
class cannot (0.19.0 fails in the model's config hook, 0.34.0 in ModelConfig's validation, both
inside vLLM's own code), so enginecfg refuses the flag as bad input, naming it."""

from __future__ import annotations

import json

import pytest

from support import DATA

from enginecfg import InvalidInputError, Pipeline

HERE = DATA / "runner_oracle"
CASES = {c["name"]: c for c in json.loads((HERE / "cases.json").read_text())}
ANSWERS = json.loads((HERE / "answers.json").read_text())


@pytest.mark.parametrize("release, name", [(r, a["name"]) for r, rows in ANSWERS.items() for a in rows])
def test_runner_as_vllm_takes_it(release, name):
    want = next(a for a in ANSWERS[release] if a["name"] == name)
    case = CASES[name]
    folder = (HERE / case["config_dir"]).resolve()
    pipe = Pipeline(gpu_validation="off", vllm_version=release)
    if want["error"] is not None:
        with pytest.raises(InvalidInputError) as info:
            pipe.resolve(folder, **case["args"])
        assert info.value.field == "runner" and "(--runner)" in str(info.value)
        return
    doc = pipe.resolve(folder, **case["args"]).to_dict()
    assert doc["status"] == "resolved", doc["error"]
    mc, cc = doc["config"]["model_config"], doc["config"]["cache_config"]
    assert (mc["runner_type"], mc["convert_type"], cc["enable_prefix_caching"]) == \
        (want["runner_type"], want["convert_type"], want["enable_prefix_caching"])


def test_the_serve_command_keeps_a_draft_runner():
    from enginecfg.commands import serve

    folder = (HERE / CASES["qwen/draft"]["config_dir"]).resolve()
    result = Pipeline(gpu_validation="off").resolve(folder, runner="draft")
    assert "--runner draft" in " ".join(serve.serve_command(result))
