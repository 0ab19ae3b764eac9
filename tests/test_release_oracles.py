"""Each release whose unmodified vLLM was run decides as that vLLM did, case by case.

Ground truth: ``tests/data/vllm-X.Y.Z/`` for 0.20.0, 0.24.0, 0.28.0 and 0.32.0 (each README says
how it was made; ``tests/data/releases/README.md`` why these four).  Every case of each release's
answers (the 340 public cases and the README's example models) is asked of enginecfg through its
public API and compared field by field (``release_oracle_support.compare``: the refusal in
vLLM's words, the config-time fields and log lines, the start-up step's backends, block size,
Mamba block and padding, and the KV planning at 2, 17, 64 and 500 GiB).

A difference passes only when ``KNOWN`` names it with its reason (an artefact of how the oracle
ran, or a deliberate choice).  Until enginecfg speaks a release, ``spoken_release`` compares its
answers with the nearest release it speaks, and a case that differs is an expected failure that
lists what differs.  A release composed from the timeline whose dated rules the shared machinery
does not all switch yet (``Release.unwired``, which ``enginecfg releases`` prints) is held to
the differences ``tests/data/releases/expected_differences.json`` lists for it, case by case and
field by field (``make_expected_differences.py`` beside it writes them): a new difference fails
(a wired rule regressed), and so does one that went away.  Once a release is exact, every
difference fails.
"""

from __future__ import annotations

import copy
import re
from collections import Counter

import pytest

from enginecfg.pipeline import releases

import json

from support import DATA
from release_oracle_support import (RUN_RELEASES, Difference, Known, answers, cases, compare, known,
                                    spoken_release)

#: differences that are not enginecfg's to remove, each with its reason
KNOWN = (
    Known("0.2[4-9].0", "*:minimax-default/*", "start-up: build failure",
          "oracle artefact: from 0.24.0 MiniMax resolves to the Transformers backend (C1b), whose "
          "model build touches CUDA before it reaches the layers; the GPU-less oracle recorded its "
          "stand-in's missing driver (`RuntimeError: Found no NVIDIA driver ...`), not a decision "
          "of vLLM.  Before 0.30.0 the backend gives every layer an attention instance, linear-attention "
          "ones included, and the model builds (enginecfg says so, from the code: F1b is 0.30.0's "
          "refusal of those layers)"),
    Known("0.2[0-8].0", "*", "kv@*: max_model_len that fits",
          "oracle artefact: the oracle script computed this field as 0.34.0's check does, on the "
          "budget less the null block (K11, from 0.29.0); these releases check the whole budget, "
          "and the estimate their own not-enough-memory text gives (compared) is enginecfg's"),
    Known("0.34.0", "*", "kv@*: not-enough-memory text",
          "oracle artefact: the 0.34.0 oracle gave each budget in bytes with the extensible KV cache "
          "still on, so its text carries the extensible hint; through the public API a budget in "
          "bytes is --kv-cache-memory-bytes, which turns the extensible KV cache off as vLLM does "
          "(tests/test_release_034.py compares that hint with extensible=True)"),
)

RUN = [release for release in RUN_RELEASES if answers(release)]
CASES = [pytest.param(release, case_id, r, id=f"{release}:{case_id}")
         for release in RUN for case_id, r in cases(release)]


def _unexplained(release: str, case_id: str, r: dict) -> list[Difference]:
    return [d for d in compare(release, case_id, r) if known(d, KNOWN) is None]


#: per release with unwired rules: {case: [the fields it differs in]} (see the module doc)
EXPECTED = json.loads((DATA / "releases" / "expected_differences.json").read_text())


def differing_fields(release: str, case_id: str, r: dict) -> list[str]:
    """The fields (KV budgets folded) in which the case differs, KNOWN apart, sorted."""
    return sorted({re.sub(r"@\d+GiB", "@*", d.field) for d in _unexplained(release, case_id, r)})


def _summary(diffs: list[Difference]) -> str:
    fields = Counter(re.sub(r"@\d+GiB", "", d.field) for d in diffs)
    return ", ".join(f"{field} x{n}" if n > 1 else field for field, n in fields.items())


@pytest.mark.parametrize("release, case_id, r", CASES)
def test_a_run_release_decides_as_its_oracle(release, case_id, r, warm_snapshots):
    diffs = _unexplained(release, case_id, r)
    spoken = spoken_release(release)
    if diffs and spoken != release:
        pytest.xfail(f"enginecfg does not speak {release} yet; the {spoken} rules differ in: {_summary(diffs)}")
    if releases.get(release).unwired:
        # composed from the timeline, with dated rules the shared machinery does not switch
        # yet: held to the differences recorded for it, no more and no fewer
        assert differing_fields(release, case_id, r) == EXPECTED.get(release, {}).get(case_id, []), _summary(diffs)
        return
    assert diffs == []


def test_expected_differences_belong_to_releases_that_are_not_exact():
    for release, found in EXPECTED.items():
        assert releases.get(release).unwired and found, release


def test_every_release_run_is_compared():
    """Every release folder with answers (0.34.0's own apart) is compared, with both answer files."""
    folders = {p.parent.name.removeprefix("vllm-") for p in DATA.glob("vllm-*/public-*.json.gz")}
    assert folders - {"0.34.0"} == set(RUN) and {"0.20.0", "0.28.0", "0.32.0"} <= set(RUN)
    for release in RUN:
        assert {kind for kind in answers(release)} == {"public", "examples"}, release


def test_the_comparison_agrees_with_a_release_enginecfg_speaks(warm_snapshots):
    """On 0.34.0's own answers the comparison finds nothing KNOWN does not explain: what it
    reads of the oracle's answers is what the 0.34.0 pack is tested against."""
    found = [d for case_id, r in cases("0.34.0") for d in compare("0.34.0", case_id, r)]
    assert found and all(known(d, KNOWN) for d in found)  # the extensible hint, and only it


def _case(release: str, name: str) -> tuple[str, dict]:
    return next((cid, r) for cid, r in cases(release) if cid == f"public:{name}")


def test_the_comparison_fails_on_a_real_difference(warm_snapshots):
    """A changed answer in any part the comparison reads is a difference."""
    case_id, r = _case("0.34.0", "jamba-1.5-mini/default")
    assert _unexplained("0.34.0", case_id, r) == []
    wrong = copy.deepcopy(r)
    wrong["final"]["cache_config"]["enable_prefix_caching"] = False
    wrong["logs"].append({"level": "INFO", "logger": "vllm.model_executor.models.config", "message": "x"})
    wrong["post_load"]["after"]["block_size"] += 16
    wrong["post_load"]["attention_backends_by_layer_kind"] = {"MambaMixer": {"MAMBA1_ATTN": 28}}
    wrong["kv"]["budgets"][1]["num_blocks"] += 1
    wrong["kv"]["budgets"][2]["kv_tokens"] += 1
    fields = {d.field for d in _unexplained("0.34.0", case_id, wrong)}
    assert fields == {"cache_config.enable_prefix_caching", "config log lines", "start-up: block_size",
                      "start-up: backends by layer kind", "kv@17GiB: num_blocks",
                      "kv@64GiB: GPU KV cache size (logged)"}
    refused = copy.deepcopy(r)
    refused["error"] = {"type": "ValueError", "message": "Model architecture JambaForCausalLM is not supported."}
    assert [d.field for d in _unexplained("0.34.0", case_id, refused)] == ["refusal"]


def test_known_names_each_difference_it_explains():
    """KNOWN explains a difference by release, case and field together, never a whole release."""
    build = Difference("0.28.0", "public:minimax-default/default", "start-up: build failure", None, None)
    assert known(build, KNOWN) is not None
    assert known(build._replace(release="0.32.0"), KNOWN) is None
    assert known(build._replace(case="public:bamba-default/default"), KNOWN) is None
    assert known(build._replace(field="refusal"), KNOWN) is None
    assert all(k.reason and k.field != "*" for k in KNOWN)


def test_the_release_compared_is_the_release_once_spoken():
    from enginecfg.pipeline import rulepacks

    for release in rulepacks.releases():
        assert spoken_release(release) == release
    for release in RUN:
        assert spoken_release(release) in rulepacks.releases()
