"""Every fixture case, field for field, against what vLLM 0.19.0 produced."""

from __future__ import annotations

import pytest

from support import CONFIGS, FIXTURES, SEED_MESSAGE, load_cases
from enginecfg import EngineCfgError, EngineConfig, InvalidInputError, Pipeline
from enginecfg.pipeline.plugins import builtin_stages

CASES = load_cases()


#: the two ways in: what engines call (the README's first example), and the one-call form
ENTRIES = ("run", "resolve")


def _run(case, entry):
    path = str(FIXTURES / case["config"])
    pipeline = Pipeline(stages=builtin_stages(), gpu_validation="off")
    if entry == "resolve":
        return path, pipeline.resolve(path, **case["engine_args"])
    return path, pipeline.run(EngineConfig.from_pretrained(path, **case["engine_args"]))


def _first_sentence(text: str) -> str:
    return " ".join(text.split()).split(". ")[0]


def test_there_are_578_cases():
    assert len(CASES) == 578


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_matches_vllm(case, entry, warm_snapshots):
    """Every fixture case, through both entry points: the same answer, vLLM's."""
    expected = case["expected"]
    path = str(FIXTURES / case["config"])
    if expected["status"] == "error":
        with pytest.raises(EngineCfgError) as info:
            _run(case, entry)
        err = info.value
        got = " ".join(str(err).split())
        if expected["error"]["type"] == "invalid-input":
            assert isinstance(err, InvalidInputError)
            field = expected["error"]["field"].split(".")[-1]
            assert field in got or field.replace("_", "-") in got
        else:
            want = _first_sentence(expected["error"]["message"].replace("{model}", path))
            assert want in got
            assert getattr(err, "vllm_type", None) == expected["error"]["type"]
        return
    path, result = _run(case, entry)
    doc = result.to_dict()
    assert doc["status"] == "resolved"
    for section, fields in expected["config"].items():
        have = doc["config"][section]
        if fields is None:
            assert have is None, section
            continue
        for name, want in fields.items():
            assert have[name] == want, f"{section}.{name}"
    if expected.get("pages"):
        for name, want in expected["pages"].items():
            assert doc["pages"][name] == want, f"pages.{name}"
    else:
        assert doc["pages"] is None
    want_msgs = [(m["level"], m["message"].replace("{model}", path)) for m in expected["messages"]]
    got_msgs = [(m["level"], m["message"]) for m in doc["messages"] if SEED_MESSAGE.match(m["message"])]
    assert got_msgs == want_msgs  # same lines, same levels, same order


def test_every_fixture_config_is_exercised():
    used = {c["config"].split("/")[-1] for c in CASES}
    assert used == {d.name for d in CONFIGS.iterdir()}
