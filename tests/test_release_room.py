"""The release room: every release from the first spoken for to the last, each the release
before it plus its dated rules (the timeline), and what the commands ask of a release."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from release_oracle_support import timeline
from support import REPO

from enginecfg.pipeline import releases
from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.releases import changes

TIMELINE = timeline()


def test_the_shipped_rules_are_the_timelines():
    assert subprocess.run([sys.executable, str(REPO / "tools" / "make_release_rules.py"), "--check"]).returncode == 0
    assert releases.names() == ("0.19.0", *TIMELINE)
    for name, ids in TIMELINE.items():
        r = releases.get(name)
        assert [d.id for d in r.adds] == ids and all(d.release == name and d.what for d in r.adds)


def test_a_release_is_the_one_before_plus_its_rules():
    chain = releases.all_releases()
    assert chain[0].before is None and chain[0].rules == frozenset()
    for before, r in zip(chain, chain[1:]):
        assert r.before == before and r.rules == before.rules | {d.id for d in r.adds}
    assert releases.get("0.28.0").has("C3.2b") and not releases.get("0.27.1").has("C3.2b")
    assert releases.brought_by("C7e").name == "0.32.0" and releases.rule("K6a").release == "0.20.1"


@pytest.mark.parametrize("name, at_start, block", [("0.19.0", False, 16), ("0.19.1", False, 16), ("0.20.0", True, 16),
                                                   ("0.33.0", True, 16), ("0.34.0", True, 64)])
def test_what_the_commands_ask(name, at_start, block):
    r = releases.get(name)
    assert r.decides_at_engine_start is at_start and r.default_block_size == block
    assert r.ignored_arguments == (("mamba_cache_mode",) if r.has("C7f") else ())


def test_option_tables_the_nearest_earlier_one_stated():
    assert releases.get("0.34.0").table_note is None and releases.get("0.28.0").table_note is None
    r = releases.get("0.27.1")
    assert r.table_release.name == "0.24.0" and "0.24.0's option table" in r.table_note
    assert r.flag_table().VLLM_VERSION == "0.24.0"
    assert releases.get("0.23.0").flag_table().VLLM_VERSION == "0.20.0"
    assert releases.get("0.33.0").flag_table().VLLM_VERSION == "0.32.0"
    assert releases.get("0.19.1").flag_table().VLLM_VERSION == "0.19.0"


def test_what_serve_sets_aside_is_the_difference_of_the_tables():
    first = set(releases.first().flag_table().VLLM_SERVE_OPTIONS)
    for r in releases.all_releases():
        assert r.sets_aside == first - set(r.flag_table().VLLM_SERVE_OPTIONS)
    assert releases.first().sets_aside == frozenset()
    assert "--calculate-kv-scales" in releases.get("0.28.0").sets_aside  # C6 went in 0.28
    assert "--calculate-kv-scales" not in releases.get("0.20.0").sets_aside


@pytest.mark.parametrize("logged, near", [("0.14.1", "0.19.0"), ("0.35.0", "0.34.0"), ("0.24.3", "0.24.0"),
                                          ("0.20.2", "0.20.2"), ("0.22.5", "0.22.1")])
def test_the_nearest_release(logged, near):
    assert releases.nearest(logged).name == near


def test_an_unknown_release_is_refused_naming_those_there_are(monkeypatch):
    with pytest.raises(InvalidInputError) as info:
        releases.get("0.18.0")
    assert info.value.field == "vllm_version" and "0.19.0, 0.19.1" in str(info.value)
    monkeypatch.setenv(releases.RELEASE_ENV, "0.27.1")
    assert releases.requested().name == "0.27.1" and releases.requested("0.34.0").name == "0.34.0"
    monkeypatch.setenv(releases.RELEASE_ENV, "nope")
    with pytest.raises(InvalidInputError) as info:
        releases.requested()
    assert releases.RELEASE_ENV in str(info.value)


def test_every_situation_is_dated():
    for key, s in changes.SITUATIONS.items():
        assert all(releases.brought_by(r) is not None for r in s.rules), key


def test_a_move_names_only_the_rules_between_the_two_releases():
    old, new = releases.get("0.27.1"), releases.get("0.34.0")
    assert changes.explain("enable_prefix_caching.hybrid", old, new).release == "0.28"
    assert changes.explain("block_size.no_config_alignment", old, new) is None  # C8 is in both
    later = changes.explain("block_size.start_alignment", old, new)
    assert "C3.3" in later.rule and "S2a" not in later.rule and later.release == "0.32-0.34"
    # S2c, S2d, S3c, S2e changed nothing enginecfg computes: they explain no difference it finds
    assert not set(later.rule.split(", ")) & set(releases.NOTHING_TO_SWITCH)


def test_leaving_the_all_mode_is_explained_by_its_rules():
    old, new = releases.get("0.24.0"), releases.get("0.34.0")
    assert changes.explain("block_size.all_mode", old, new).rule == "S3"
    assert changes.explain("start.all_mode", old, new).release == "0.32"
    assert changes.explain("start.all_mode", releases.get("0.32.0"), new) is None
    assert changes.explain("block_size.default", new, old).release == "0.34"  # either order


def test_the_releases_command_lists_each_release_with_the_rules_it_adds():
    from enginecfg.commands import list_releases

    listing = list_releases()
    doc = listing.to_dict()
    assert doc["default"] == "0.19.0" and [r["release"] for r in doc["releases"]] == list(releases.names())
    by_name = {r["release"]: r for r in doc["releases"]}
    assert [d["id"] for d in by_name["0.28.0"]["rules"]] == TIMELINE["0.28.0"]
    assert by_name["0.27.1"]["before"] == "0.27.0" and by_name["0.27.1"]["option_table"] == "0.24.0"
    assert by_name["0.34.0"]["exact"] and not by_name["0.28.0"]["exact"] and by_name["0.28.0"]["unwired"]


def test_enginecfg_releases_on_the_command_line():
    env = {"PYTHONPATH": str(REPO)}
    import os

    p = subprocess.run([sys.executable, "-m", "enginecfg", "releases"], capture_output=True, text=True,
                       env={**os.environ, **env, "COLUMNS": "100"}, cwd=REPO)
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout.startswith("0.19.0 (the first; the default; decides the block size at config time)")
    assert "\n  C3.2b: " in p.stdout and "PR #50991" in p.stdout
    j = subprocess.run([sys.executable, "-m", "enginecfg", "releases", "--json"], capture_output=True, text=True,
                       env={**os.environ, **env}, cwd=REPO)
    assert j.returncode == 0 and len(json.loads(j.stdout)["releases"]) == len(TIMELINE) + 1


@pytest.mark.parametrize("name", list(TIMELINE))
def test_every_release_is_accepted_by_the_pipeline_the_environment_and_upgrade(name, monkeypatch):
    from enginecfg import Pipeline
    from enginecfg.commands.upgrade import upgrade

    qwen = str(REPO / "examples" / "models" / "qwen3.5-27b")
    result = Pipeline(vllm_version=name, gpu_validation="off").resolve(qwen)
    assert result.vllm_version == name
    release = releases.get(name)
    # a hybrid keeps the release's default block at config time once the alignment moved to the
    # engine start (C8); before, config time aligned it already
    assert (result.config.cache_config.block_size == release.default_block_size) == release.decides_at_engine_start
    monkeypatch.setenv(releases.RELEASE_ENV, name)
    assert Pipeline().vllm_version == name and Pipeline().release == releases.get(name)
    monkeypatch.delenv(releases.RELEASE_ENV)
    u = upgrade(qwen, from_version="0.19.0", to_version=name)
    assert u.to_side.release == name and u.to_side.ok


def test_a_run_of_a_composed_release_says_which_rules_it_lacks():
    """The run document and the human report of a release that is not exact name the rules
    it still lacks; an exact release's say it is exact."""
    from enginecfg import Pipeline

    model = REPO / "examples" / "models" / "qwen3.5-27b"
    doc = Pipeline(gpu_validation="off", vllm_version="0.34.0").resolve(model).to_dict()
    assert doc["vllm_release"] == {"exact": True, "reference": "0.34.0", "unwired": []}
    composed = next((r for r in releases.all_releases() if not r.exact), None)
    if composed is None:
        pytest.skip("every release is exact")
    doc = Pipeline(gpu_validation="off", vllm_version=composed.name).resolve(model).to_dict()
    assert doc["vllm_release"]["exact"] is False and doc["vllm_release"]["unwired"] == list(composed.unwired)
    proc = subprocess.run([sys.executable, "-m", "enginecfg", "run", str(model), "--vllm-version", composed.name,
                           "--no-audit", "--gpu-validation", "off"], capture_output=True, text=True, timeout=300)
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 0 and f"vLLM {composed.name} is composed from dated rules" in text
    assert composed.unwired[0] in text
