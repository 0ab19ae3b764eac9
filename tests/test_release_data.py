"""The ground truth for the releases between vLLM 0.19.0 and 0.34.0 is well-formed.

- ``pipeline/releases/TIMELINE.md`` dates every rule (``rules.json`` beside it is what
  ``tools/make_release_rules.py`` makes of it: ``tests/test_release_room.py``): every published
  release from 0.19.1 to 0.34.0, in order, each rule id once, and every rule id of ``vllm-0.34.0/RULES.md`` either dated or
  listed with the reason it needs no date.
- Every release run with its own vLLM (``tests/data/vllm-X.Y.Z/``) holds that release's
  answers, byte for byte as the oracle wrote them (pinned), on every case that was asked.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import pytest

from release_oracle_support import timeline as _timeline
from support import DATA, REPO, VLLM034

RELEASES = DATA / "releases"
TIMELINE_MD = REPO / "pipeline" / "releases" / "TIMELINE.md"

#: every vLLM release after 0.19.0, up to 0.34.0, as published
PUBLISHED = ["0.19.1", "0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0",
             "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0",
             "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]

#: the releases whose unmodified vLLM was run: sha256 of each file, as the oracle wrote it
RUN = {
    "0.20.0": {
        "examples-020.json.gz":
            "9574aa3537178ed5ef77c9bbf16828ea9a5250edcfdf4f843d2113cb0ae05922",
        "public-020.json.gz":
            "3d189b461ce64238390149a295eecb18aeb9f1704a23aa77fd09551e96163f2f",
        "vllm_serve_flags.json":
            "c073099dab9c6bc93dc7f23f5cff7cccdc16c52c880867bc00b54bf6866412e0",
    },
    "0.24.0": {
        "examples-024.json.gz":
            "573fee09171379e494b529aa462e34d7ebbc91c3e57cd7b660b529db2f735a54",
        "public-024.json.gz":
            "dff5b4f6191d7b2b888eef07643b8e65c4e29c1bb1c077769a424f6472e6a3dc",
        "vllm_serve_flags.json":
            "b4e1efa3e95ae64c8ae33f2e3f791c4fe3758c676e370f7b1e7cb1519590d0ef",
    },
    "0.28.0": {
        "examples-028.json.gz":
            "d4f14de3a40a38f439502d4cd4d96609805c079bd2f6e5af52b3c4a2bc55270f",
        "public-028.json.gz":
            "b6a18cf1cd99c89aa02c017cf94db5df0aa6adb39171401829953c9c39941399",
        "vllm_serve_flags.json":
            "9947b789cb1416732cf0098814abbeab1830a454d011b65172232ac96c9192fb",
    },
    "0.32.0": {
        "examples-032.json.gz":
            "79fcca1316d65534a9af61aabe61076c4846e5850050f435a735d746d5ad42df",
        "public-032.json.gz":
            "28024b561f8e126f038e934c8dd54b0677e93bd86c2ab4984fa3dce802cdde9b",
        "vllm_serve_flags.json":
            "bf2649f536db7f8cf26e5bd440c7588985d1bfe2768d140fe6c7a7ff34796fb7",
    },
}

#: releases whose run was cut short: their answers cover part of the public cases, in order
PARTIAL: set[str] = set()

RULE_ID = re.compile(r"^[CBSKFG]-?\d+(\.\d+)?[a-z]?$")


def _rules_md_ids() -> set[str]:
    """The rule ids RULES.md defines: its section headings and table rows."""
    text = (VLLM034 / "RULES.md").read_text()
    ids = set(re.findall(r"^#{3} ([CBSKF]\d+(?:\.\d+)?)\b", text, re.M))
    ids |= set(re.findall(r"^([CBSKF]\d+(?:\.\d+)?)\. ", text, re.M))
    ids |= set(re.findall(r"^- (G-?\d)\. ", text, re.M))
    ids |= set(re.findall(r"^C3\.\d", text, re.M))
    ids |= set(re.findall(r"^\| (F\d+b?) \|", text, re.M))
    return ids


def _undated_table() -> set[str]:
    text = TIMELINE_MD.read_text()
    section = text.split("## RULES.md ids with no date of their own", 1)[1]
    ids: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith(("| RULES.md id", "|---")):
            ids |= set(re.findall(r"[CBSKFG]-?\d+(?:\.\d+)?b?", line.split("|")[1]))
    return ids


def test_the_timeline_lists_every_published_release_in_order():
    assert list(_timeline()) == PUBLISHED


def test_every_rule_is_dated_once_and_has_a_well_formed_id():
    ids = [rule for rules in _timeline().values() for rule in rules]
    assert ids, "no rule dated"
    assert all(RULE_ID.match(rule) for rule in ids), [r for r in ids if not RULE_ID.match(r)]
    assert len(ids) == len(set(ids)), sorted({r for r in ids if ids.count(r) > 1})


def test_every_rules_md_id_is_dated_or_says_why_not():
    dated = {rule for rules in _timeline().values() for rule in rules}
    dated_bases = {re.sub(r"[a-z]$", "", rule) for rule in dated}
    defined = _rules_md_ids()
    assert {"C3.3", "C8", "S7", "K6", "F7", "G2"} <= defined  # the parser reads RULES.md
    missing = sorted(defined - dated - dated_bases - _undated_table())
    assert missing == []


def test_the_epochs_the_issue_names_are_dated_where_the_code_has_them():
    """The four epochs (and the two the issue quotes) fall where vLLM's own sources put them."""
    timeline = _timeline()
    where = {rule: release for release, rules in timeline.items() for rule in rules}
    assert where["C8"] == "0.20.0"      # hybrid alignment after loading
    assert where["C3.2b"] == "0.28.0"   # prefix caching on by default for hybrids
    assert where["C7e"] == "0.32.0"     # Mamba cache mode `all` gone
    assert where["K6a"] == "0.20.1"     # "GPU KV cache size" = concurrency x max_model_len
    assert where["K6b"] == "0.27.0"     # concurrency summed over groups
    assert where["C3.3"] == "0.34.0"    # block size 64


def _answers(release: str) -> dict:
    major, minor = release.split(".")[:2]
    with gzip.open(DATA / f"vllm-{release}" / f"public-{major}{int(minor):02d}.json.gz", "rt") as f:
        return json.load(f)


@pytest.mark.parametrize("release", sorted(RUN))
def test_a_run_release_holds_its_own_answers_byte_for_byte(release):
    folder = DATA / f"vllm-{release}"
    for name, digest in RUN[release].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    answers = _answers(release)
    assert answers["vllm_version"] == release
    asked = [c["name"] for c in json.loads((VLLM034 / "public.json").read_text())]
    names = [r["name"] for r in answers["results"]]
    if release in PARTIAL:
        assert names and names == [n for n in asked if n in set(names)]
    else:
        assert names == asked
    assert release in _timeline()


@pytest.mark.parametrize("release", sorted(RUN))
def test_a_run_release_answers_with_its_own_rules(release):
    """What the timeline says of the release shows in its answers: the default block size,
    the default prefix caching of a generative hybrid, the Mamba `all` mode, the logged
    "GPU KV cache size" formula and the default GPU memory utilization."""
    where = {rule: rel for rel, rules in _timeline().items() for rule in rules}
    has = {rule: _version(where[rule]) <= _version(release) for rule in where}
    for res in _answers(release)["results"]:
        final = res.get("final")
        if not final:
            continue
        cache, model = final["cache_config"], final["model_config"]
        if "block_size" not in res["args"]:
            assert cache["block_size"] == (64 if has["C3.3"] else 16), res["name"]
        assert cache["gpu_memory_utilization"] == (None if has["C3.4b"] else
                                                   0.92 if has["C3.4a"] else 0.9)
        if model.get("is_hybrid") and "enable_prefix_caching" not in res["args"]:
            assert cache["enable_prefix_caching"] is has["C3.2b"], res["name"]
        if has["C7e"]:
            assert cache["mamba_cache_mode"] != "all", res["name"]
        for row in ((res.get("kv") or {}).get("budgets") or []):
            if "kv_tokens_logged" in row:
                formula = "kv_tokens_034_formula" if has["K6a"] else "kv_tokens_019_formula"
                assert row["kv_tokens_logged"] == row[formula], (res["name"], row["budget_gib"])


def _version(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))
