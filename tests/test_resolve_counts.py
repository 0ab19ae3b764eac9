"""What one resolve works out, counted: one layer pattern and one KV-cache grouping a run,
whatever the release; and the memo keys of frozen attrs values those counts rely on."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from enginecfg import Pipeline
from enginecfg.pipeline.hf import memo
from enginecfg.pipeline.hf.memo import ContentMemo, Unkeyable, content_key, memoised
from enginecfg.pipeline.models import kv_specs
from enginecfg.pipeline.models.gpus import DEFAULT_GPU, Gpu
from enginecfg.pipeline.models.v034 import kv_planning

CONFIGS = Path(__file__).parent / "data" / "vllm-0.19.0" / "configs"
#: hybrid (gated delta net + attention, the start-up block moves), sliding + global attention,
#: Mamba2 + attention, and a plain MLA decoder (no layout of its own)
MODELS = ("qwen3.5-27b", "gemma-4-26b-a4b", "nemotron-3-nano-30b-a3b-bf16", "deepseek-v2-lite-like")


@attrs.frozen
class _Point:
    x: int
    y: tuple = ()


@attrs.frozen
class _Other:
    x: int
    y: tuple = ()


@attrs.define
class _Mutable:
    x: int


def test_frozen_attrs_values_are_keyed_by_their_fields_and_mutable_ones_never():
    assert content_key(_Point(1, (2, "a"))) == content_key(_Point(1, (2, "a")))
    assert hash(content_key(_Point(1, (2, "a")))) == hash(content_key(_Point(1, (2, "a"))))
    assert content_key(_Point(1)) != content_key(_Point(2))
    assert content_key(_Point(1)) != content_key(_Point(True))  # types all the way down
    assert content_key(_Point(1)) != content_key(_Point(1.0))
    assert content_key(_Point(1)) != content_key(_Other(1))  # the class is part of the key
    card = Gpu(DEFAULT_GPU.name, DEFAULT_GPU.memory_bytes, tuple(DEFAULT_GPU.capability), DEFAULT_GPU.device_name)
    assert content_key(card) == content_key(attrs.evolve(card))
    assert content_key(card) != content_key(attrs.evolve(card, memory_bytes=card.memory_bytes + 1))
    # mutable values are never keyed
    with pytest.raises(Unkeyable):
        content_key(_Mutable(1))
    with pytest.raises(Unkeyable):  # frozen outside, something that can be assigned to inside
        content_key(_Point(1, (_Mutable(2),)))


def test_a_memoised_function_answers_equal_frozen_options_from_one_entry():
    calls = []
    box = ContentMemo(4)

    class _Cfg:
        def state(self):
            return self

        def content_key(self):
            return (), ("cfg",)

    @memoised(box)
    def figure(cfg, *, card):
        calls.append(card)
        return card.memory_bytes

    figure(_Cfg(), card=Gpu("A", 1, (9, 0)))
    figure(_Cfg(), card=Gpu("A", 1, (9, 0)))
    figure(_Cfg(), card=Gpu("A", 2, (9, 0)))
    assert [c.memory_bytes for c in calls if isinstance(c, Gpu)] == [1, 2]


def _count(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, counted)
    return calls


def _layouts_counted(monkeypatch):
    calls = []
    for key, fn in list(kv_specs.LAYOUTS.items()):
        def counted(b, fn=fn):
            calls.append(fn.__name__)
            return fn(b)
        monkeypatch.setitem(kv_specs.LAYOUTS, key, counted)
    for name in ("_mla", "_decoder"):  # the classes without a layout of their own
        real = getattr(kv_specs, name)

        def counted(b, real=real):
            calls.append(real.__name__)
            return real(b)
        monkeypatch.setattr(kv_specs, name, counted)
    return calls


@pytest.mark.parametrize("release", ["0.19.0", "0.34.0"])
@pytest.mark.parametrize("model", MODELS)
def test_one_layer_pattern_per_run(monkeypatch, release, model):
    pipeline = Pipeline(gpu_validation="off", vllm_version=release)
    pipeline.resolve(CONFIGS / model)  # the snapshot built (its cache is not the memos')
    memo.clear_all()
    calls = _layouts_counted(monkeypatch)
    pipeline.resolve(CONFIGS / model)
    assert len(calls) == 1, calls
    pipeline.resolve(CONFIGS / model)  # the same content again: from the memo
    assert len(calls) == 1, calls


@pytest.mark.parametrize("model", MODELS)
def test_one_kv_grouping_per_034_run(monkeypatch, model):
    pipeline = Pipeline(gpu_validation="off", vllm_version="0.34.0")
    pipeline.resolve(CONFIGS / model)
    memo.clear_all()
    calls = _count(monkeypatch, kv_planning, "layer_specs")  # the grouping's first step
    result = pipeline.resolve(CONFIGS / model)
    assert calls == ["layer_specs"]
    assert result.facts["impact"].groups  # the figures came from that one grouping
    pipeline.resolve(CONFIGS / model)
    assert calls == ["layer_specs"]  # the same content again: from the memo


_PAIRS = [
    (1, 1), (1, True), (1, 1.0), (0.0, -0.0), (float("nan"), float("nan")), ("a", "a"), (None, None),
    ([1, 2], [1, 2]), ([1, 2], [1, True]), ([1, 2], (1, 2)), (["a", 1.0], ["a", 1]),
    ({"a": 1, "b": 2}, {"a": 1, "b": 2}), ({"a": 1, "b": 2}, {"b": 2, "a": 1}), ({"a": [1]}, {"a": [True]}),
    ({"a": {"b": [0.5, None]}}, {"a": {"b": [0.5, None]}}), ([[1], [2]], [[1], [2.0]]), ([], []), ({}, []),
]


@pytest.mark.parametrize("a, b", _PAIRS)
def test_same_content_is_content_key_equality(a, b):
    from enginecfg.pipeline.hf.memo import same_content

    assert same_content(a, b) == (content_key(a) == content_key(b))
    assert same_content(b, a) == (content_key(a) == content_key(b))


@pytest.mark.parametrize("model", MODELS)
def test_one_034_startup_working_out_per_config_content(monkeypatch, model):
    """The four start-up stages of 0.34.0 take their steps from one memoised plan: the backends
    and the preferred block are worked out once for a config content, GPU and release, not per run."""
    from enginecfg.pipeline.models.v034 import startup as rules
    from enginecfg.stages.v034 import startup as stages

    pipeline = Pipeline(gpu_validation="off", vllm_version="0.34.0")
    first = pipeline.resolve(CONFIGS / model)
    memo.clear_all()
    backends, blocks = _count(monkeypatch, rules, "select_backends"), _count(monkeypatch, rules, "preferred_block")
    calls = lambda: sorted(backends + blocks)  # noqa: E731
    again = pipeline.resolve(CONFIGS / model)
    assert calls() == ["preferred_block", "select_backends"]
    assert again.facts["startup"] == first.facts["startup"]
    assert [m for m in again.messages] == [m for m in first.messages]
    pipeline.resolve(CONFIGS / model)
    assert calls() == ["preferred_block", "select_backends"]  # the same content again: the plan
    assert len(stages.PLANS) == 1
    Pipeline(gpu_validation="off", vllm_version="0.34.0", gpu="A100").resolve(CONFIGS / model)
    assert len(stages.PLANS) == 2  # another card: a plan of its own


@pytest.mark.parametrize("model", ["qwen3.5-27b", "mamba-130m-hf"])
def test_034_startup_plan_looked_up_once_per_run(model):
    """The first of 0.34.0's start-up stages finds the plan by the config's content; the
    stages after it find the config in the same state and take the same plan without keying
    the memo again (one lookup a run, where each of the four stages made its own)."""
    from enginecfg.stages.v034 import startup as stages

    pipeline = Pipeline(gpu_validation="off", vllm_version="0.34.0")
    first = pipeline.resolve(CONFIGS / model)
    stages.PLANS.hits = stages.PLANS.misses = 0
    again = pipeline.resolve(CONFIGS / model)
    assert (stages.PLANS.hits, stages.PLANS.misses) == (1, 0)
    assert again.facts == first.facts
    assert again.messages == first.messages


def test_034_startup_stage_after_a_change_between_works_it_out_again():
    """A stage between the start-up stages that changes the config: the stages after it do
    not take the plan the first one found for the config before the change."""
    from enginecfg.pipeline.plugins import builtin_stages
    from enginecfg.stages.v034 import startup as stages

    from enginecfg import Stage

    class Between(Stage):
        name = "between"
        after = ("attention-backend",)
        before = ("startup-block-size",)

        def run(self, cfg, ctx):
            ctx.set("cache_config", "block_size", 32, reason="a block size between the start-up stages")

    def resolve():
        return Pipeline(stages=builtin_stages("0.34.0") + [Between()], gpu_validation="off",
                        vllm_version="0.34.0").resolve(CONFIGS / "qwen3.5-27b")

    Pipeline(gpu_validation="off", vllm_version="0.34.0").resolve(CONFIGS / "qwen3.5-27b")
    warm = resolve()
    memo.clear_all()
    stages._LAST[0] = (None,) * 6
    cold = resolve()
    assert warm.facts == cold.facts
    assert warm.messages == cold.messages
    # the block set between the stages is the user's to the stages after it: their decisions differ
    assert warm.facts["startup"] != Pipeline(
        gpu_validation="off", vllm_version="0.34.0").resolve(CONFIGS / "qwen3.5-27b").facts["startup"]


def test_a_list_or_dict_of_plain_values_is_keyed_without_keying_each_item(monkeypatch):
    """A list of strings, integers, booleans and None (a Qwen3.5 ``layer_types``), or a dict
    of them, is keyed in one step, its items and their types side by side; a nested or float
    value still gets each item keyed.  Equal keys still mean equal with the same types."""
    calls = []
    real = memo.content_key

    def counting(value):
        calls.append(value)
        return real(value)

    monkeypatch.setattr(memo, "content_key", counting)
    layer_types = ["linear_attention"] * 3 + ["full_attention"] + [None, 1, True]
    counting(layer_types)
    counting({"a": 1, "b": None})
    assert len(calls) == 2
    calls.clear()
    counting([1, [2]])
    assert len(calls) == 3  # the list, then 1 and [2] (itself plain)
    assert real([1, 2]) != real([1, True]) != real([1, 2.0]) and real([1, 2]) != real((1, 2))
    assert real({"a": 1}) != real({"a": True}) and real({"a": 1}) != real({"a": 1.0})
    assert real([1, [2]]) != real([1, (2,)]) and real([True]) == real([True])


def test_034_figures_options_keyed_once_for_a_start_up_fact(monkeypatch):
    """0.34.0's impact stage keys the figures' options (the start-up decisions, the card, the
    memory flags) once for the start-up fact the plan memo hands every run of a config content,
    not on every run; another fact (another config) keys them again."""
    from enginecfg.pipeline.models.v034 import kv_planning as planning

    calls = []
    real = planning.impact.options_key

    def counting(**options):
        calls.append(options["startup"])
        return real(**options)

    monkeypatch.setattr(planning.impact, "options_key", counting)
    first = Pipeline(gpu_validation="off", vllm_version="0.34.0").resolve(CONFIGS / "qwen3.5-27b")
    calls.clear()
    again = Pipeline(gpu_validation="off", vllm_version="0.34.0").resolve(CONFIGS / "qwen3.5-27b")
    assert calls == []
    assert again.facts["impact"] == first.facts["impact"]
    other = Pipeline(gpu_validation="off", vllm_version="0.34.0").resolve(CONFIGS / "mamba-130m-hf")
    assert len(calls) == 1 and other.facts["impact"] != first.facts["impact"]
    memo.clear_all()
    assert Pipeline(gpu_validation="off", vllm_version="0.34.0").resolve(
        CONFIGS / "mamba-130m-hf").facts["impact"] == other.facts["impact"]


def test_the_reference_release_is_found_once_for_the_releases_known(monkeypatch):
    """Every run document (a failed load's too) names its release's reference, the latest
    known release deciding at engine start: found once for the releases known, not by
    parsing every known release's name on each document; a release added, or one replaced,
    is seen at once."""
    from enginecfg.pipeline import releases

    release, latest = releases.get("0.27.1"), releases.last()
    assert release.reference is latest
    parsed = []
    real = releases.version_key
    monkeypatch.setattr(releases, "version_key", lambda name: parsed.append(name) or real(name))
    for _ in range(3):
        assert release.reference is latest and release.unwired == release.unwired
    assert parsed == []
    scratch = releases.Release("0.99.0", before=releases.last())
    monkeypatch.setitem(releases._KNOWN, "0.99.0", scratch)
    assert release.reference is scratch
    assert releases.first().reference is releases.first()  # one deciding at config time: the first
    monkeypatch.delitem(releases._KNOWN, "0.99.0")
    assert release.reference is latest


@pytest.mark.parametrize("model", ["gemma4-text-default", "gemma-4-26b-a4b"])
def test_034_gemma4_head_sizes_read_once_a_run(monkeypatch, model):
    """0.34.0's gemma4-backend reads the layers' head sizes once a run (the rule and the words
    of its explanation take the same reading), where it read them twice."""
    from enginecfg.pipeline.models.v034 import config_time as ct

    first = Pipeline(gpu_validation="off", vllm_version="0.34.0").resolve(CONFIGS / model)
    read = _count(monkeypatch, ct, "gemma4_head_dims")
    again = Pipeline(gpu_validation="off", vllm_version="0.34.0").resolve(CONFIGS / model)
    assert read == ["gemma4_head_dims"]
    assert [c.to_dict() for c in again.changes] == [c.to_dict() for c in first.changes]
    assert again.messages == first.messages
