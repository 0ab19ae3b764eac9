"""``upgrade``: one model under vLLM 0.19.0 and 0.34.0, side by side, held to both oracles.

Every public 0.34.0 case (``tests/data/vllm-0.34.0/public-034.json``, H200) that has a 0.19.0
answer under the same engine arguments (``tests/data/vllm-0.19.0/cases.json``: 320 pairs) is
run through :func:`enginecfg.commands.upgrade`; what each side reports must be what that
release's oracle says: the block size (0.19.0 at config time, where it aligns; 0.34.0 after
``update_block_size_for_backend``, where it aligns), the Mamba cache mode, prefix caching, the
attention backend (config time, and per kind of layer: 0.19.0's from
``tests/issue29_oracle/startup.json``, 0.34.0's from ``post_load``), and whether it resolves,
builds and starts.  The 0.34.0 answers were made with transformers 5.22.2 (vLLM 0.34.0 pins
transformers below 5.23), enginecfg runs 5.23.0; no field compared here reads differently
between the two (tests/data/vllm-0.34.0/RULES.md, open question 3).
"""

from __future__ import annotations

import json
import re

import pytest

from support import CONFIGS, FIXTURES, REPO, VLLM034, load_cases
from enginecfg.commands import upgrade
from enginecfg.commands import upgrade as upgrade_fn
from enginecfg.commands.upgrade import RULE_NOT_IDENTIFIED, Upgrade, rule_for
from enginecfg.pipeline.releases import changes
from enginecfg.pipeline.errors import InvalidInputError

PUBLIC = json.loads((VLLM034 / "public-034.json").read_text())["results"]
OLD = {c["name"]: c for c in load_cases()}
START_019 = {(r["config_dir"].split("/")[-1], json.dumps(r["args"], sort_keys=True)): r
             for r in json.loads((REPO / "tests" / "issue29_oracle" / "startup.json").read_text())["results"]}
PAIRS = [pytest.param(r, OLD[r["name"]], id=r["name"]) for r in PUBLIC
         if r["name"] in OLD and OLD[r["name"]]["engine_args"] == r["args"]]
QWEN = str(REPO / "examples" / "models" / "qwen3.5-27b")


def test_the_pairs_are_the_issues_320():
    assert len(PAIRS) == 320


def _label_034(lb) -> str:  # the layer kind as public-034's post_load names it
    if lb.layer.kind == "mamba":
        return lb.layer_class
    window = f" sliding_window={lb.layer.sliding_window}" if lb.layer.sliding_window else ""
    return f"{lb.layer_class} attn_type={lb.layer.attn_type} head_size={lb.layer.head_size}{window}"


def _backend_034(lb) -> str:
    if lb.backend == "FLASH_ATTN" and lb.fa_version:
        return f"FLASH_ATTN(FA{lb.fa_version})"
    if lb.backend == "TRITON_FLASH_ATTN" and lb.fa_version:
        return f"TRITON_FLASH_ATTN(causal FA{lb.fa_version})"
    return lb.backend


def _label_019(lb) -> str:  # the layer kind as startup.json names it
    k = lb.layer
    if k.kind == "mamba":
        return f"{lb.layer_class} mamba_type={k.mamba_type}"
    if k.kind == "mla":
        return f"MLAAttention head_size={k.head_size} kv_cache_dtype={k.kv_cache_dtype}"
    window = f" sliding_window={k.sliding_window}" if k.sliding_window else ""
    return (f"{lb.layer_class} attn_type=AttentionType.{k.attn_type.upper()} head_size={k.head_size}{window} "
            f"kv_cache_dtype={k.kv_cache_dtype}")


_CACHE = ("enable_prefix_caching", "mamba_cache_mode")


@pytest.mark.parametrize("new, old", PAIRS)
def test_upgrade_reports_what_both_releases_decide(new, old, warm_snapshots):
    u = upgrade(str(CONFIGS / old["config"].split("/")[-1]), **new["args"])
    assert isinstance(u, Upgrade) and (u.from_version, u.to_version, u.gpu) == ("0.19.0", "0.34.0", "H200")
    # -- the 0.19.0 side against cases.json (config time) and startup.json (the engine start)
    want = old["expected"]
    a = u.from_side
    if want["status"] == "error":
        assert a.error is not None and not a.ok
        assert " ".join(want["error"]["message"].split()).split(". ")[0] in " ".join(str(a.error).split())
    else:
        assert a.ok, a.error
        if u.to_side.ok:
            cc = want["config"]["cache_config"]
            assert u.field("cache_config.block_size").value_from == cc["block_size"]
            for name in _CACHE:
                assert u.field(f"cache_config.{name}").value_from == cc[name], name
            assert u.field("attention_config.backend").value_from == want["config"]["attention_config"]["backend"]
        started = START_019.get((old["config"].split("/")[-1], json.dumps(old["engine_args"], sort_keys=True)))
        if started is not None and started.get("backends_by_layer_kind") is not None:
            assert {_label_019(lb): {lb.backend: lb.layer.layers} for lb in a.startup.backends} == \
                started["backends_by_layer_kind"]
            assert a.startup.starts == (started["status"] == "started")
            if started["status"] == "started" and u.to_side.ok:
                assert u.field("startup.block_size").value_from == started["block_size_after_update"]
                assert u.field("startup.engine_block_size").value_from == started["engine_block_size"]
    # -- the 0.34.0 side against public-034.json
    b = u.to_side
    if new["error"] is not None:
        assert b.error is not None and not b.ok
        return
    assert b.ok, b.error
    final = new["final"]["cache_config"]
    pl = new["post_load"]
    if a.ok:
        for name in _CACHE:
            assert u.field(f"cache_config.{name}").value_to == final[name], name
        assert u.field("cache_config.block_size").value_to == final["block_size"]
        assert u.field("attention_config.backend").value_to == new["final"]["attention_config"]["backend"]
    if not pl["real_class_built"]:
        assert b.starts is False and pl["build_error"]["message"] in b.start_error
        if a.ok:
            assert u.field("startup.block_size").value_to is None
            assert u.field("startup.starts").changed == (a.starts is not False)
        return
    assert {_label_034(lb): {_backend_034(lb): lb.layer.layers} for lb in b.startup.backends} == \
        pl["attention_backends_by_layer_kind"]
    if a.ok:
        assert u.field("startup.block_size").value_to == pl["after"]["block_size"]
        assert u.field("startup.engine_block_size").value_to == min(g["spec"]["block_size"] for g in new["kv"]["groups"])
        assert u.field("startup.mamba_block_size").value_to == pl["after"]["mamba_block_size"]
        assert u.field("startup.mamba_page_size_padded").value_to == pl["after"]["mamba_page_size_padded"]
    # -- every difference says why: a rule of the table, or that none is identified
    for f in u.changed:
        assert f.why == RULE_NOT_IDENTIFIED or f.rule in _RULES_019_034
        if f.field in IDENTIFIED:  # the decisions the release notes date: never left unexplained
            assert f.rule is not None, (f.field, f.value_from, f.value_to)


#: every rule the situations give across 0.19.0 -> 0.34.0
_RULES_019_034 = [rule_for(k, "0.19.0", "0.34.0") for k in changes.SITUATIONS]

#: the fields whose every change across 0.19.0 -> 0.34.0 a rule of the release notes explains
IDENTIFIED = ("cache_config.enable_prefix_caching", "cache_config.mamba_cache_mode", "startup.engine_block_size",
              "impact.gpu_memory_utilization")


def test_the_issues_example_block_size_784_to_832_and_its_rules(warm_snapshots):
    u = upgrade(QWEN)
    block = u.field("startup.engine_block_size")
    assert (block.value_from, block.value_to, block.changed) == (784, 832, True)
    # the alignment moved to the engine start in 0.20 (S2a); later steps, to the default block of 0.34
    assert block.rule.release == "0.20-0.34" and block.rule.rule == "S2-S4"
    assert "832" in block.detail  # 0.34.0's own account, with its numbers
    prefix = u.field("cache_config.enable_prefix_caching")
    assert (prefix.value_from, prefix.value_to, prefix.rule.release) == (False, True, "0.28")
    mode = u.field("cache_config.mamba_cache_mode")
    assert (mode.value_from, mode.value_to, mode.rule.rule) == ("none", "align", "C3.2 + C7")
    util = u.field("impact.gpu_memory_utilization")
    assert (util.value_from, util.value_to, util.rule.rule) == (0.9, 1.0, "C3.4")
    # the same flags on both sides: a utilization given is no longer a difference
    same = upgrade(QWEN, gpu_memory_utilization=0.8)
    assert not same.field("impact.gpu_memory_utilization").changed
    cap = u.capacity
    assert cap.kv_tokens == (u.from_side.impact.kv_tokens, u.to_side.impact.kv_tokens)
    assert cap.kv_tokens_ratio == pytest.approx(cap.kv_tokens[1] / cap.kv_tokens[0])
    assert set(cap.concurrency) == {1024, 8192, 32768} and u.exit_code == 0


def test_the_gpu_is_the_same_on_both_sides(warm_snapshots):
    u = upgrade(QWEN, gpu="B200")
    assert u.gpu == "B200"
    assert u.from_side.startup.gpu.startswith("B200") and u.to_side.startup.gpu == u.from_side.startup.gpu
    assert u.from_side.impact.memory.gpu.startswith("B200") and u.to_side.impact.memory.gpu.startswith("B200")
    assert u.from_side.impact.memory.gpu_memory_bytes == u.to_side.impact.memory.gpu_memory_bytes


def test_a_difference_no_rule_explains_says_so(monkeypatch, warm_snapshots):
    import sys

    monkeypatch.setattr(sys.modules["enginecfg.pipeline.releases.changes"], "SITUATIONS", {})
    u = upgrade(QWEN)
    assert u.changed and all(f.rule is None and f.why == RULE_NOT_IDENTIFIED for f in u.changed)
    assert all(f["why"] == RULE_NOT_IDENTIFIED for f in u.to_dict()["fields"] if f["changed"])


def test_every_rule_of_the_table_is_in_the_release_notes():
    notes = (VLLM034 / "RULES.md").read_text()
    for situation in changes.SITUATIONS.values():
        for rid in re.findall(r"[A-Z]\d+(?:\.\d+)?", situation.name):
            assert re.search(rf"\b{re.escape(rid)}\b", notes), rid


def test_a_release_that_refuses_is_reported_and_the_other_still_shown(warm_snapshots):
    u = upgrade(QWEN, calculate_kv_scales=True)
    assert u.from_side.ok and not u.to_side.ok
    assert u.to_side.error.field == "calculate_kv_scales" and u.exit_code == 2
    assert u.field("error").rule.rule == "C6"
    assert u.capacity.kv_tokens[0] == u.from_side.impact.kv_tokens and u.capacity.kv_tokens[1] is None
    assert u.field("cache_config.block_size").value_from == 784  # the side that resolves is still shown
    doc = u.to_dict()
    assert doc["to"]["status"] == "error" and doc["from"]["status"] == "resolved"


@pytest.mark.parametrize("kwargs, field", [
    ({"from_version": "0.18.0"}, "from_version"),
    ({"to_version": "latest"}, "to_version"),
    ({"from_version": "0.34.0", "to_version": "0.34.0"}, "to_version"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
])
def test_bad_input_is_a_clear_error(kwargs, field):
    with pytest.raises(InvalidInputError) as info:
        upgrade_fn(QWEN, **kwargs)
    assert info.value.field == field and "allowed" in str(info.value)


def test_a_downgrade_reads_the_same_rules(warm_snapshots):
    u = upgrade(QWEN, from_version="0.34.0", to_version="0.19.0")
    block = u.field("startup.engine_block_size")
    assert (block.value_from, block.value_to, block.rule.rule) == (832, 784, "S2-S4")


def test_from_0_27_1_each_changed_decision_names_its_rule_and_release(warm_snapshots):
    # the upgrade people make: every changed config-time decision and the memory default is tied
    # to the dated rule between the two releases, with the release that brought it
    u = upgrade_fn(QWEN, from_version="0.27.1", to_version="0.34.0")
    why = {f.field: f.rule for f in u.changed}
    assert (why["cache_config.block_size"].release, why["cache_config.block_size"].rule) == ("0.34", "C3.3")
    assert (why["cache_config.enable_prefix_caching"].release, why["cache_config.enable_prefix_caching"].rule) == \
        ("0.28", "C3.2")
    assert why["cache_config.mamba_cache_mode"].release == "0.28"
    assert why["impact.gpu_memory_utilization"].rule == "C3.4b"
    assert u.field("startup.engine_block_size").value_from == 784  # 0.27.1's default block 16, aligned
    for f in u.changed:
        if f.field.startswith(("cache_config.", "impact.gpu")):
            assert f.rule is not None, f.field


def test_an_upgrade_out_of_the_all_mode_names_each_changed_decision():
    from enginecfg.commands import upgrade as run_upgrade

    u = run_upgrade(str(CONFIGS / "jamba-default"), from_version="0.24.0", to_version="0.34.0",
                    enable_prefix_caching=True)
    changed = {f.field: f for f in u.changed}
    assert {"startup.block_size", "startup.mamba_block_size", "startup.starts"} <= set(changed)
    assert [name for name, f in changed.items() if f.why == RULE_NOT_IDENTIFIED] == []
    assert changed["startup.starts"].rule.rule == "K4" and changed["startup.block_size"].rule.rule == "S3"
