"""What a warm run no longer reads again, and what it still always sees.

Two shortcuts of issue 33 (round 3):

- a model file (and a model folder's listing) is kept with the ``os.stat`` facts it was read
  under (:mod:`enginecfg.pipeline.hf.sources`): a file whose facts are the same is not read
  and hashed again, but only once it has been left alone for ``SETTLED_NS``; a file written
  in place, same size, is always seen;
- a stage that changed nothing leaves the config's state as it was: the state taken after
  it is the one taken before (:meth:`BaseEngineConfig.state`), and its memo key with it.
"""

from __future__ import annotations

import json
import os

import pytest

from support import append_extra_architecture, make_stage
from enginecfg import EngineConfig, Pipeline
from enginecfg.pipeline.hf import sources


@pytest.fixture
def counted_reads(monkeypatch):
    """The names of the files opened and read (``_read_regular``), in order."""
    seen: list[str] = []
    real = sources._read_regular

    def counting(path, source, name):
        seen.append(name)
        return real(path, source, name)

    monkeypatch.setattr(sources, "_read_regular", counting)
    return seen


def _max_len(folder) -> int:
    return Pipeline(gpu_validation="off").resolve(folder).config.model_config.max_model_len


def _same_size_edit(d) -> None:
    """config.json written in place with another max_position_embeddings of the same length."""
    raw = (d / "config.json").read_bytes()
    assert b'"max_position_embeddings": 262144' in raw
    edited = raw.replace(b'"max_position_embeddings": 262144', b'"max_position_embeddings": 131072')
    assert len(edited) == len(raw)
    with open(d / "config.json", "r+b") as fh:  # in place: the same inode
        fh.write(edited)


def test_a_settled_file_is_not_read_again(qwen_folder, monkeypatch, counted_reads):
    monkeypatch.setattr(sources, "SETTLED_NS", 0)  # the copy counts as left alone long enough
    first = EngineConfig.from_pretrained(qwen_folder)
    assert counted_reads == ["config.json"]
    again = EngineConfig.from_pretrained(qwen_folder)
    assert counted_reads == ["config.json"]  # answered from what was kept
    assert again.source == first.source  # the same files, the same sha256 in the record
    # every name looked for and absent is answered from the folder's kept listing
    assert again.source["absent"] == first.source["absent"] and again.source["absent"]


def test_a_file_written_in_place_the_same_size_is_always_seen(qwen_folder, counted_reads):
    assert _max_len(qwen_folder) == 262144
    _same_size_edit(qwen_folder)
    assert _max_len(qwen_folder) == 131072
    assert counted_reads == ["config.json", "config.json"]


def test_a_same_size_write_with_the_old_modification_time_is_seen(qwen_folder, monkeypatch, counted_reads):
    """Even where every file is trusted at once and the writer puts the modification time
    back, the change time (which no caller can set back) tells the write."""
    monkeypatch.setattr(sources, "SETTLED_NS", 0)
    path = qwen_folder / "config.json"
    assert _max_len(qwen_folder) == 262144
    st = os.stat(path)
    _same_size_edit(qwen_folder)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = os.stat(path)
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)
    if now.st_ctime_ns == st.st_ctime_ns:
        pytest.skip("this filesystem's clock did not move between the two writes")
    assert _max_len(qwen_folder) == 131072
    assert counted_reads == ["config.json", "config.json"]


def test_a_file_added_to_a_settled_folder_is_seen(qwen_folder, monkeypatch):
    monkeypatch.setattr(sources, "SETTLED_NS", 0)
    first = EngineConfig.from_pretrained(qwen_folder)
    assert "modules.json" in first.source["absent"]
    os.utime(qwen_folder, ns=(0, 0))  # the folder's modification time put back: its change time moved
    (qwen_folder / "modules.json").write_text(json.dumps([
        {"type": "sentence_transformers.models.Transformer", "path": ""}]))
    again = EngineConfig.from_pretrained(qwen_folder)
    assert "modules.json" not in again.source["absent"]
    assert "modules.json" in [f["name"] for f in again.source["files"]]


def test_a_file_changed_recently_is_read_every_time(qwen_folder, counted_reads):
    """Under the default SETTLED_NS a file just written is not trusted by its stat facts."""
    EngineConfig.from_pretrained(qwen_folder)
    EngineConfig.from_pretrained(qwen_folder)
    assert counted_reads == ["config.json", "config.json"]


# -- the state after a stage that changed nothing -----------------------------------------------

def test_a_stage_that_changed_nothing_leaves_the_state_as_it_was(qwen_folder):
    states: list = []

    def seen(cfg, ctx):  # keeps the state each stage found (its opening state)
        states.append(ctx.opening_state())

    stages = [make_stage("seen-a", seen), make_stage("seen-b", seen, after=("seen-a",)),
              make_stage("edits", append_extra_architecture, after=("seen-b",)),
              make_stage("seen-c", seen, after=("edits",))]
    result = Pipeline(stages=stages).resolve(qwen_folder)
    a, b, c = states
    assert b is a  # seen-a changed nothing: the state after it is the one before
    assert c is not b  # the in-place edit is read
    assert c["model_config.architectures"][-1] == "Extra"
    assert [ch.field for ch in result.changes] == ["model_config.architectures"]


def test_a_state_taken_again_without_a_change_is_the_same_state(qwen_folder):
    cfg = EngineConfig.from_pretrained(qwen_folder)
    first = cfg.state()
    assert cfg.state() is first
    cfg.model_config.hf_config.foo = 1  # a write into the transformers config
    second = cfg.state()
    assert second is not first and second["hf_config.foo"] == 1
    assert cfg.state() is second
    cfg.cache_config.block_size = 32
    assert cfg.state() is not second


# -- the load memo's bound -----------------------------------------------------------------------

def test_the_load_memo_holds_a_set_of_settings_resolved_in_turn(qwen_folder):
    """100 settings of one folder loaded in turn, twice: the second round is answered from
    the memo (a bound below the set's size evicts each entry just before it is asked for)."""
    from enginecfg.pipeline.loadmemo import LOADS

    settings = [{"max_model_len": 1024 + i} for i in range(100)]
    for args in settings:
        EngineConfig.from_pretrained(qwen_folder, **args)
    hits = LOADS.hits
    for args in settings:
        assert EngineConfig.from_pretrained(qwen_folder, **args).model_config.max_model_len == args["max_model_len"]
    assert LOADS.hits - hits == len(settings)


def test_a_gpu_name_found_before_is_not_looked_up_again(monkeypatch):
    from enginecfg.pipeline.models import gpus

    first = gpus.find_gpu("h100-sxm" if "H100-SXM" in gpus.GPUS else "h200")
    calls: list[str] = []
    real = gpus._norm
    monkeypatch.setattr(gpus, "_norm", lambda text: calls.append(text) or real(text))
    assert gpus.find_gpu("h100-sxm" if "H100-SXM" in gpus.GPUS else "h200") is first
    assert calls == []
    with pytest.raises(Exception):
        gpus.find_gpu("no-such-card")  # an unknown name is still refused


def test_a_pipeline_without_impact_options_reuses_the_parsed_default(monkeypatch):
    """The impact stage's options are parsed once per GPU when a pipeline gives none."""
    from enginecfg.stages import impact

    first = [st for st in Pipeline(gpu_validation="off").stages if st.name == "impact"][0]
    calls: list = []
    real = impact._parse_options
    monkeypatch.setattr(impact, "_parse_options", lambda *a: calls.append(a) or real(*a))
    again = Pipeline(gpu_validation="off")
    assert [st for st in again.stages if st.name == "impact"][0].options is first.options
    assert calls == []
    Pipeline(gpu_validation="off", impact={"gpu_memory_utilization": 0.8})  # given: parsed
    assert len(calls) == 1


def test_an_in_place_edit_of_a_transformers_value_is_seen_after_quiet_checks(qwen_folder):
    """The check of the transformers writes remembers what it compared; a value copied on
    read later, a write, and an edit in place of a list read before are each still seen."""
    cfg = EngineConfig.from_pretrained(qwen_folder)
    text = cfg.model_config.hf_text_config
    layers = text.layer_types  # copied on read: equal to the snapshot's, in no state
    first = cfg.state()
    assert cfg.state() is first and cfg.state() is first  # checked, then checked again
    layers[0] = "edited"  # in place: no write
    second = cfg.state()
    assert second is not first and second["hf_config.text_config.layer_types"][0] == "edited"
    assert cfg.state() is second
    heads = text.num_attention_heads  # a plain value read: nothing put in an overlay
    assert cfg.state() is second
    text.num_attention_heads = heads + 1  # a write
    third = cfg.state()
    assert third is not second and third["hf_config.text_config.num_attention_heads"] == heads + 1
    rope = text.rope_parameters if "rope_parameters" in text.keys() else None
    if isinstance(rope, dict):  # a dict copied on read after the last state, then edited
        assert cfg.state() is third
        rope["edited"] = True
        assert cfg.state() is not third


def test_a_path_object_given_again_is_parsed_once(tmp_path):
    """A model folder given as a ``Path`` (the bench and most callers) is parsed once, as its
    text is: two opens share one path object, and what they read is the folder's."""
    from pathlib import Path

    from enginecfg.pipeline.hf.sources import open_source

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    first, again = open_source(Path(folder)), open_source(Path(str(folder)))
    assert first.root is again.root and first.root == folder
    assert first.given == again.given == str(folder)
    assert again.config_bytes() == b'{"model_type": "llama"}'
