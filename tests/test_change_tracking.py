"""The pipeline's change detection after each stage, and the memo of the impact figures.

After a stage the pipeline re-reads only what can have changed: every field when anything
was assigned (the write stamp moved), otherwise the lists and dicts (edited in place) and
the transformers-config writes.  These tests hold the short read to the full one on every
kind of edit a stage can make, and the impact memo to a fresh computation on every fixture.
"""

from __future__ import annotations

import itertools

import attrs
import pytest

from support import CONFIGS, FIXTURES, resolved_cases
from enginecfg import EngineCfgError, EngineConfig, Pipeline, Stage
from enginecfg.pipeline.config import SECTIONS, CacheConfig, PoolerConfig
from enginecfg.pipeline.jsonvalue import to_json
from enginecfg.pipeline.hf.memo import ContentMemo, Unkeyable, content_key
from enginecfg.pipeline import hf, releases
from enginecfg.pipeline.models import capacity

QWEN = str(CONFIGS / "qwen3.5-27b")
NEMOTRON = str(CONFIGS / "nemotron-h-56b-base-8k")


# -- the short re-read equals the full one ----------------------------------------------------

def _assign(cfg):
    cfg.cache_config.block_size = 64


def _assign_equal(cfg):
    cfg.cache_config.block_size = cfg.cache_config.block_size


def _append(cfg):
    cfg.model_config.architectures.append("Extra")


def _replace_list(cfg):
    cfg.model_config.architectures = ["Other"]


def _replace_section(cfg):
    cfg.cache_config = CacheConfig(block_size=128)


def _hf_write(cfg):
    cfg.model_config.hf_config.is_causal = False


def _hf_nested(cfg):
    cfg.model_config.hf_text_config.rope_parameters["rope_theta"] = 7.0


def _hf_undo(cfg):
    rope = cfg.model_config.hf_text_config.rope_parameters
    rope["rope_theta"] = cfg.model_config.hf_config.base_value("text_config.rope_parameters")["rope_theta"]


def _nothing(cfg):
    pass


EDITS = [_assign, _assign_equal, _append, _replace_list, _replace_section, _hf_write, _hf_nested,
         _hf_undo, _nothing]


@pytest.mark.parametrize("first,second", list(itertools.product(EDITS, repeat=2)),
                         ids=lambda f: f.__name__.strip("_"))
def test_a_state_read_since_an_earlier_one_equals_a_full_read(first, second):
    cfg = EngineConfig.from_pretrained(QWEN)
    start = cfg.state()
    for edit in (first, _nothing, second, _nothing):
        edit(cfg)
        short = cfg.state(since=start)
        full = cfg.state(since=None)
        assert dict(short) == dict(full)
        assert [type(v) for v in short.values()] == [type(v) for v in full.values()]
        start = short


def test_the_stamp_moves_with_a_write_through_another_config_sharing_the_section():
    a, b = EngineConfig.from_pretrained(QWEN), EngineConfig.from_pretrained(QWEN)
    b.cache_config = a.cache_config  # one section object, two configs
    before, before_a = b.state(), a.state()
    a.cache_config.block_size = 96
    assert b.state(since=before)["cache_config.block_size"] == 96
    # the write moves the count of the config the section was last given to (b), not a's: a
    # config sharing a section reads its write stamp, never the count alone
    assert a.state(since=before_a)["cache_config.block_size"] == 96
    assert a.state()["cache_config.block_size"] == 96


def test_nothing_assigned_since_a_state_is_told_without_reading_the_write_stamp(monkeypatch):
    """After a stage that assigned nothing, the state taken before is handed back on the
    config's assignment count alone; one assignment anywhere reads the stamp again."""
    from enginecfg.pipeline.config import BaseEngineConfig

    cfg = EngineConfig.from_pretrained(QWEN)
    first = cfg.state()
    reads = []
    real = BaseEngineConfig._write_stamp
    monkeypatch.setattr(BaseEngineConfig, "_write_stamp", lambda self: reads.append(1) or real(self))
    assert cfg.state() is first and not reads
    cfg.scheduler_config.max_num_seqs = 7
    after = cfg.state()
    assert after is not first and reads and after["scheduler_config.max_num_seqs"] == 7


def test_an_assignment_to_a_section_rereads_that_section_and_no_other():
    # the write stamp behind state(): one count per section, in SECTIONS' order
    cfg = EngineConfig.from_pretrained(QWEN)
    cfg.pooler_config = PoolerConfig()
    for name in SECTIONS:
        sec = getattr(cfg, name)
        field = next(a.name for a in attrs.fields(type(sec)) if not a.name.startswith("_"))
        before = cfg.state()
        setattr(sec, field, getattr(sec, field))
        after = cfg.state(since=before)
        in_place = {key for _, _, key, _ in before.containers}  # lists and dicts: always read
        assert {key.split(".")[0] for key in set(after.reread) - in_place} == {name}, name
    before = cfg.state()
    cfg.pooler_config = None
    after = cfg.state(since=before)
    assert after.reread is None and after["pooler_config"] is None  # replaced: all read again


class _Edit(Stage):
    def __init__(self, name, edit):
        self.name, self._edit = name, edit

    def run(self, cfg, ctx):
        self._edit(cfg)


@pytest.mark.parametrize("edit", [e for e in EDITS if e not in (_nothing, _assign_equal, _hf_undo)],
                         ids=lambda f: f.__name__.strip("_"))
def test_an_edit_after_stages_that_changed_nothing_is_recorded_once(edit):
    stages = [_Edit("quiet-1", _nothing), _Edit("quiet-2", _nothing), _Edit("edit", edit),
              _Edit("quiet-3", _nothing)]
    for a, b in zip(stages, stages[1:]):
        b.after = (a.name,)
    result = Pipeline(stages=stages).run(EngineConfig.from_pretrained(QWEN))
    assert result.changes and {c.stage for c in result.changes} == {"edit"}
    assert len({c.field for c in result.changes}) == len(result.changes)


# -- content keys and the memo --------------------------------------------------------------

def test_content_keys_tell_apart_what_equality_does_not():
    same_in_python = [1, 1.0, True]
    assert len({content_key(v) for v in same_in_python}) == 3
    assert content_key(0.0) != content_key(-0.0)
    assert content_key(float("nan")) == content_key(float("nan"))
    assert content_key([1, 2]) != content_key((1, 2))
    assert content_key({"a": [1, {"b": None}]}) == content_key({"a": [1, {"b": None}]})
    assert content_key({"a": [1, {"b": None}]}) != content_key({"a": [1, {"b": False}]})
    with pytest.raises(Unkeyable):
        content_key({"a": object()})


def test_a_memo_hit_needs_the_same_anchor_objects_and_the_memo_is_bounded():
    memo = ContentMemo(maxsize=2)
    snap = {"attrs": {}}
    twin = {"attrs": {}}  # equal, but another object
    key = (id(snap), "x")
    memo.put(key, (snap,), "value")
    assert memo.get(key, (snap,)) == "value"
    assert memo.get(key, (twin,)) is None
    for i in range(3):
        memo.put((id(snap), i), (snap,), i)
    assert len(memo) == 2 and memo.get(key, (snap,)) is None


def test_to_json_shares_nothing_mutable():
    value = {"a": [1, {"b": [2]}], "c": "d"}
    copied = to_json(value)
    copied["a"][1]["b"].append(3)
    assert value == {"a": [1, {"b": [2]}], "c": "d"}


CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_memoised_impact_equals_a_fresh_computation(case, warm_snapshots):
    path = str(FIXTURES / case["config"])
    args = case["engine_args"]
    hf.clear()
    fresh = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(path, **args)).impact
    hits = capacity.FIGURES.hits
    again = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(path, **args)).impact
    assert again == fresh
    if capacity.FIGURES.misses:  # a config the memo could key
        assert capacity.FIGURES.hits == hits + 1


class _Fp8(Stage):
    """Stores the KV cache in fp8, just before ``impact``."""
    name = "fp8-cache"
    after = ("hybrid-alignment",)
    before = ("impact",)

    def run(self, cfg, ctx):
        ctx.set("cache_config", "cache_dtype", "fp8", reason="test")


def test_a_changed_input_is_not_answered_from_the_memo(warm_snapshots):
    from enginecfg.pipeline.plugins import discover_stages

    hf.clear()
    plain = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(NEMOTRON)).impact
    fp8 = Pipeline(stages=list(discover_stages()) + [_Fp8()], gpu_validation="off").run(
        EngineConfig.from_pretrained(NEMOTRON)).impact

    def attention(figures):
        return [g for g in figures.groups if g.kind == "full_attention"]

    assert attention(plain) and attention(fp8)
    assert [g.bytes_per_token for g in attention(fp8)] == [g.bytes_per_token // 2 for g in attention(plain)]
    other_gpu = Pipeline(gpu_validation="off", impact={"gpu_memory_gib": 80}).run(
        EngineConfig.from_pretrained(NEMOTRON)).impact
    assert other_gpu.memory.gpu_memory_bytes != plain.memory.gpu_memory_bytes


def test_editing_a_result_does_not_reach_the_memo(warm_snapshots):
    first = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(NEMOTRON))
    kept = first.impact.to_dict()
    # the figures are frozen all the way down: the memo's value cannot be edited through a result
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.impact.groups[0].block_size = -1
    with pytest.raises(TypeError):
        first.impact.concurrency[8192] = 0.0
    with pytest.raises(AttributeError):
        first.impact.groups.append(None)
    # and the run document is a copy of them
    doc = first.to_dict()
    doc["impact"]["groups"][0]["block_size"] = -1
    doc["impact"]["memory"].clear()
    second = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(NEMOTRON))
    assert second.impact.to_dict() == kept == second.to_dict()["impact"]


def test_a_state_after_two_assignments_reads_those_two_fields_only(monkeypatch):
    """After a stage assigned a field of a section, the next state reads that field again,
    not every tracked field of the section (model_config has ~25) filtered one by one."""
    from enginecfg.pipeline import config as config_module

    cfg = EngineConfig.from_pretrained(str(CONFIGS / "qwen3.5-27b"))
    before = cfg.state()
    cfg.model_config.max_model_len = 4096
    cfg.cache_config.block_size = 32
    listed = []
    real = config_module.tracked_fields
    monkeypatch.setattr(config_module, "tracked_fields", lambda cls: listed.append(cls) or real(cls))
    getattr(config_module, "_TRACKED_AT", {}).clear()
    after = cfg.state()
    assert {"cache_config.block_size", "model_config.max_model_len"} <= set(after.reread)
    assert after["model_config.max_model_len"] == 4096 and after["cache_config.block_size"] == 32
    assert dict(after) == dict(cfg.state(None))
    listed.clear()
    cfg.model_config.max_model_len = 2048
    again = cfg.state()
    assert listed == []  # the section's field list is not gone over again
    assert again["model_config.max_model_len"] == 2048 and dict(again) == dict(cfg.state(None))
    assert before["model_config.max_model_len"] != 4096


def _full(cfg) -> list:
    state = cfg.state(since=None)
    return [(key, type(value), content_key(value)) for key, value in state.items()]


@pytest.mark.parametrize("release", releases.names())
def test_a_built_in_stage_deciding_whether_it_applies_changes_nothing(release, warm_snapshots):
    """The pipeline takes no state after a built-in stage that does not apply (its applies()
    only reads): every built-in's applies(), on every fixture case, leaves every field (the
    writes into the transformers config included) as it found it."""
    from enginecfg.pipeline.plugins import builtin_stages

    stages = builtin_stages(release)
    asked = []
    for stage in stages:
        decide = stage.applies

        def checked(cfg, _decide=decide, _name=stage.name):
            before = _full(cfg)
            out = _decide(cfg)
            assert _full(cfg) == before, _name
            asked.append(_name)
            return out
        stage.applies = checked
    pipeline = Pipeline(stages, vllm_version=release, gpu_validation="off")
    for case in CASES:
        try:
            pipeline.resolve(str(FIXTURES / case["config"]), **case["engine_args"])
        except EngineCfgError:
            pass  # a refused case still decided for the stages before the refusal
    assert set(asked) == {st.name for st in stages}
