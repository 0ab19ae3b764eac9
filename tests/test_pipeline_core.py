"""The pipeline core: attribution of every mutation, freezing, events, ordering."""

from __future__ import annotations

import pytest

from support import CONFIGS, append_extra_architecture, make_stage
from enginecfg import (ConfigRejectedError, EngineConfig, FrozenConfigError, InvalidInputError, Pipeline,
                       Stage, StageError, StageOrderError)
from enginecfg.pipeline import events
from enginecfg.testing import capture_events

QWEN = str(CONFIGS / "qwen3.5-27b")
LLAMA_VL = str(CONFIGS / "nemotron-vl-embed-avg")


def _cfg(path=QWEN, **args):
    return EngineConfig.from_pretrained(path, **args)


class HfWrite(Stage):
    name = "hf-write"

    def run(self, cfg, ctx):
        cfg.model_config.hf_config.is_causal = False
        cfg.model_config.hf_text_config.rope_parameters["rope_theta"] = 1.0  # nested, in place


class DirectAssign(Stage):
    name = "direct-assign"

    def run(self, cfg, ctx):
        cfg.cache_config.block_size = 32


class ContextSet(Stage):
    name = "context-set"

    def run(self, cfg, ctx):
        ctx.set("cache_config", "block_size", 48, reason="because a test says so")


def test_in_place_edit_of_nested_list_is_attributed():
    with capture_events(events.config_changed) as captured:
        result = Pipeline(stages=[make_stage("nested-edit", append_extra_architecture)]).run(_cfg())
    got = captured["config_changed"]
    [change] = result.changes
    assert change.stage == "nested-edit" and change.field == "model_config.architectures"
    assert change.via == "direct"
    assert change.new[-1] == "Extra" and "Extra" not in change.old
    assert [e.field for e in got] == ["model_config.architectures"]


def test_writes_to_the_transformers_config_are_attributed():
    result = Pipeline(stages=[HfWrite()]).run(_cfg())
    fields = {c.field: c for c in result.changes}
    assert fields["hf_config.is_causal"].stage == "hf-write"
    assert fields["hf_config.is_causal"].new is False
    rope = fields["hf_config.text_config.rope_parameters"]
    assert rope.new["rope_theta"] == 1.0 and rope.old["rope_theta"] != 1.0
    # the write stays in this run: a new load sees the checkpoint's value again
    assert _cfg().model_config.hf_text_config.rope_parameters["rope_theta"] != 1.0


def test_direct_assignment_and_context_set_are_both_recorded_once():
    result = Pipeline(stages=[DirectAssign(), ContextSet()]).run(_cfg())
    assert [(c.stage, c.field, c.old, c.new, c.via) for c in result.changes] == [
        ("direct-assign", "cache_config.block_size", 16, 32, "direct"),
        ("context-set", "cache_config.block_size", 32, 48, "context"),
    ]


def test_assignment_after_freeze_raises():
    result = Pipeline(stages=[]).run(_cfg())
    cfg = result.config
    with pytest.raises(FrozenConfigError):
        cfg.cache_config.block_size = 64
    with pytest.raises(FrozenConfigError):
        cfg.model_config.hf_config.is_causal = True
    with pytest.raises(FrozenConfigError):
        cfg.cache_config = None
    with pytest.raises((TypeError, AttributeError)):
        cfg.model_config.hf_text_config.rope_parameters["x"] = 1  # read-only once frozen
    assert cfg.cache_config.block_size == 16


def test_bad_values_are_refused_at_the_boundary():
    cfg = _cfg()
    with pytest.raises(InvalidInputError, match=r"cache_config\.block_size.*-4.*positive"):
        cfg.cache_config.block_size = -4
    with pytest.raises(InvalidInputError, match=r"attention_config\.backend.*'NOPE'"):
        cfg.attention_config.backend = "NOPE"


def test_stage_failure_publishes_run_failed_and_names_the_stage():
    class Boom(Stage):
        name = "boom"

        def run(self, cfg, ctx):
            raise KeyError("x")
    with capture_events(events.run_failed) as captured:
        with pytest.raises(StageError, match="boom.*KeyError"):
            Pipeline(stages=[Boom()]).run(_cfg())
    got = captured["run_failed"]
    assert got and got[0].stage == "boom" and got[0].status == "rejected"


def test_event_sequence_of_a_run():
    with capture_events() as got:
        Pipeline(stages=[ContextSet()]).run(_cfg())
    assert got.order == ["run_started", "stage_started", "config_changed", "stage_finished", "run_finished"]


def test_ordering_hints_cycles_unknown_and_duplicates():
    def c():
        return make_stage("c", before=("a",))

    with pytest.raises(StageOrderError, match=r"cycle: (a -> b -> a|b -> a -> b)"):
        Pipeline(stages=[make_stage("a", after=("b",)), make_stage("b", after=("a",))])
    with pytest.raises(StageOrderError, match="unknown stage.*'nope'"):
        Pipeline(stages=[make_stage("u", after=("nope",))])
    with pytest.raises(StageOrderError, match="two stages are named 'c'"):
        Pipeline(stages=[c(), c()])
    assert Pipeline(stages=[make_stage("a"), c()]).stage_names == ["c", "a"]


def test_the_same_names_with_other_hints_are_ordered_again():
    """The order is cached by the stages' names and hints: only hints seen before reuse it."""
    for _ in range(2):  # the second pass is answered from the cache
        assert Pipeline(stages=[make_stage("x"), make_stage("y")]).stage_names == ["x", "y"]
        assert Pipeline(stages=[make_stage("x", after=("y",)), make_stage("y")]).stage_names == ["y", "x"]
        assert Pipeline(stages=[make_stage("x"), make_stage("y", before=("x",))]).stage_names == ["y", "x"]
        assert Pipeline(stages=[make_stage("y"), make_stage("x")]).stage_names == ["y", "x"]
    with pytest.raises(StageOrderError, match="cycle"):
        Pipeline(stages=[make_stage("x", after=("y",)), make_stage("y", after=("x",))])
    with pytest.raises(StageOrderError, match="cycle"):  # a refused set is never cached
        Pipeline(stages=[make_stage("x", after=("y",)), make_stage("y", after=("x",))])


def test_builtin_order_is_vllms():
    # the public contract of the built-in stage names and order, stated once for the tests
    from enginecfg.pipeline.plugins import builtin_stages
    assert Pipeline(stages=builtin_stages(), gpu_validation="off").stage_names == [
        "pooling", "engine-defaults", "scheduler", "gemma4-backend", "ssm-dtype", "hybrid-kv-scales",
        "mamba-cache-mode", "hybrid-alignment", "vllm-checks", "engine-start", "impact", "gpu-validation"]


def test_pooling_step_writes_are_change_events_of_the_pooling_stage():
    from enginecfg.pipeline.plugins import builtin_stages
    result = Pipeline(stages=builtin_stages(), gpu_validation="off").run(_cfg(LLAMA_VL))
    by_field = {c.field: c for c in result.changes}
    assert by_field["hf_config.is_causal"].stage == "pooling"
    assert by_field["pooler_config.seq_pooling_type"].new == "MEAN"
    # MEAN pooling turns the defaults off, decided after pooling
    assert by_field["scheduler_config.enable_chunked_prefill"].new is False
    assert by_field["cache_config.enable_prefix_caching"].stage == "engine-defaults"


def test_original_is_the_callers_value():
    seen = {}

    class Peek(Stage):
        name = "peek"
        after = ("hybrid-alignment",)

        def run(self, cfg, ctx):
            seen["now"] = cfg.cache_config.mamba_block_size
            seen["orig"] = ctx.original("cache_config", "mamba_block_size")

    from enginecfg.pipeline.plugins import builtin_stages
    Pipeline(stages=builtin_stages() + [Peek()], gpu_validation="off").run(
        _cfg(enable_prefix_caching=True, mamba_cache_mode="align"))
    assert seen == {"now": 784, "orig": None}


def test_rejected_run_keeps_vllms_message():
    with pytest.raises(ConfigRejectedError, match="Chunked prefill is required for mamba cache mode 'align'"):
        Pipeline(gpu_validation="off").run(_cfg(enable_prefix_caching=True, mamba_cache_mode="align",
                                               enable_chunked_prefill=False))


def test_result_is_frozen_and_fingerprinted():
    r1 = Pipeline(gpu_validation="off").run(_cfg())
    r2 = Pipeline(gpu_validation="off").run(_cfg())
    r3 = Pipeline(gpu_validation="off").run(_cfg(block_size=1024))
    assert r1.config.frozen and r1.fingerprint == r2.fingerprint != r3.fingerprint
    with pytest.raises(InvalidInputError, match="already resolved"):
        Pipeline().run(r1.config)


def test_run_ids_are_random_uuids_whatever_the_program_seeds():
    """A run id is a version-4 UUID in hex; a program seeding Python's random module (as ML
    code does for reproducibility) makes no two processes' ids alike, and a forked child
    draws other ids than its parent."""
    import os
    import random
    import uuid

    from enginecfg.pipeline.run import new_run_id

    random.seed(0)
    ids = [new_run_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(len(i) == 32 and uuid.UUID(i).version == 4 and uuid.UUID(i).hex == i for i in ids)
    random.seed(0)
    assert new_run_id() not in ids
    if hasattr(os, "fork"):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its next id, to the parent
            os.write(write, new_run_id().encode())
            os._exit(0)
        os.close(write)
        child = os.read(read, 64).decode()
        os.waitpid(pid, 0)
        os.close(read)
        assert len(child) == 32 and child != new_run_id()
