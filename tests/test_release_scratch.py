"""A release composed in-process on top of the latest one, with no file edited, runs every
command as its rules say: the four things a hand-registered release used to break (the KV curve,
the serve command's flags, the option table a pasted line is read with, the rules ``upgrade``
names) follow from the release value, not from its name."""

from __future__ import annotations

import pytest

from support import EXAMPLES, REPO

import enginecfg.releases as app_releases
from enginecfg.commands.explain import explain
from enginecfg.commands.serve import serve_command
from enginecfg.commands.upgrade import RULE_NOT_IDENTIFIED, upgrade
from enginecfg.pipeline import releases, rulepacks

QWEN = str(REPO / "examples" / "models" / "qwen3.5-27b")
SCRATCH = "0.35.0"


@pytest.fixture
def scratch(monkeypatch):
    """0.35.0 = 0.34.0 plus one dated rule of its own, registered for this test only."""
    release = releases.compose(SCRATCH, [releases.DatedRule("C13a", SCRATCH, "a scratch rule")], before="0.34.0")
    monkeypatch.setattr(releases, "_KNOWN", dict(releases._KNOWN))
    monkeypatch.setattr(rulepacks, "_PACKS", dict(rulepacks._PACKS))
    app_releases.register(release)
    return release


def test_the_scratch_release_is_composed_on_the_last(scratch):
    assert releases.last() == scratch and scratch.before.name == "0.34.0" and scratch.has("C3.3")
    assert scratch.decides_at_engine_start and scratch.default_block_size == 64 and scratch.exact
    assert scratch.table_release.name == "0.34.0" and scratch.sets_aside == releases.get("0.34.0").sets_aside
    assert rulepacks.get(SCRATCH).stages == rulepacks.get("0.34.0").stages


def test_explain_and_its_curve(scratch, warm_snapshots):
    new, old = explain(QWEN, vllm_version=SCRATCH), explain(QWEN, vllm_version="0.34.0")
    assert new.curve() == old.curve() and new.curve()  # the planned curve, as 0.34.0's
    assert new.result.facts["startup"].block_size == old.result.facts["startup"].block_size == 832


def test_the_serve_command_pins_the_start_block_and_leaves_out_what_the_release_sets_aside(scratch, warm_snapshots):
    new, old = explain(QWEN, vllm_version=SCRATCH), explain(QWEN, vllm_version="0.34.0")
    tokens = serve_command(new.result)
    assert tokens == serve_command(old.result)
    assert "832" in tokens[tokens.index("--block-size") + 1] and "--mamba-cache-mode" not in tokens


def test_a_pasted_line_is_read_with_the_nearest_earlier_table(scratch):
    from enginecfg.cli.engine_flags import serve_table, vllm_serve_refusal

    assert serve_table(SCRATCH) is serve_table("0.34.0")
    line = ["--mamba-cache-mode", "all"]  # 'all' went in 0.32.0: 0.34.0's parser refuses it
    assert vllm_serve_refusal(line, SCRATCH) == vllm_serve_refusal(line, "0.34.0") is not None
    assert vllm_serve_refusal(line, "0.19.0") is None


def test_upgrade_names_the_rules(scratch, warm_snapshots):
    u = upgrade(QWEN, from_version="0.19.0", to_version=SCRATCH)
    v = upgrade(QWEN, from_version="0.19.0", to_version="0.34.0")
    assert [f.field for f in u.changed] == [f.field for f in v.changed]
    assert [f.why for f in u.changed] == [f.why for f in v.changed]
    assert sum(f.why == RULE_NOT_IDENTIFIED for f in u.changed) == sum(f.why == RULE_NOT_IDENTIFIED for f in v.changed)


def test_a_rule_pack_under_a_site_name_runs_with_no_release(monkeypatch):
    """A pack registered under a name that is no release (a site's own build of 0.34.0's rules)
    runs: its pipeline and its stages are handed no release, as a run's context is."""
    import attrs

    from enginecfg import Pipeline
    from enginecfg.pipeline import rulepacks

    monkeypatch.setattr(rulepacks, "_PACKS", dict(rulepacks._PACKS))
    rulepacks.register(attrs.evolve(rulepacks.get("0.34.0"), release="0.34.0+site"))
    pipe = Pipeline(gpu_validation="off", vllm_version="0.34.0+site")
    assert pipe.release is None
    result = pipe.resolve(EXAMPLES / "qwen3.5-27b")
    assert result.status == "resolved" and result.to_dict()["vllm_version"] == "0.34.0+site"
    assert result.config.cache_config.block_size == 64  # 0.34.0's rules, all in force


def test_a_release_is_composed_only_after_the_one_it_builds_on():
    from enginecfg import InvalidInputError
    from enginecfg.pipeline import releases

    with pytest.raises(InvalidInputError, match="got '0.18.0'; allowed: a release after 0.34.0"):
        releases.compose("0.18.0", before="0.34.0")
    with pytest.raises(InvalidInputError, match="a release after 0.34.0"):
        releases.compose("0.34.0")
    assert releases.compose("0.35.0").before.name == "0.34.0"
