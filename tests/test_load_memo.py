"""Loading a model folder again: answered from the memo only when every file read is the same.

The memo (:mod:`enginecfg.pipeline.loadmemo`) keeps a loaded config per path and engine
arguments, with the bytes of every file the load looked at.  These tests hold a load answered
from it to a fresh load on every fixture case, and show that a changed, added or removed
file, another working folder or the MLA switch makes the loader read and derive afresh.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from hubsupport import safetensors_bytes
from support import CONFIGS, FIXTURES, resolved_cases
from enginecfg import EngineConfig, Pipeline
from enginecfg.pipeline.hf import cache as hfcache
from enginecfg.pipeline.loadmemo import LOADS

QWEN = CONFIGS / "qwen3.5-27b"


def _facts(cfg: EngineConfig) -> dict:
    """Everything a loaded config carries, as plain data."""
    mc = cfg.model_config
    return {
        "state": dict(cfg.state()),
        "doc": cfg.to_config_dict(),
        "engine_args": dict(cfg.engine_args),
        "messages": list(cfg.load_messages),
        "source": cfg.source,
        "pending": [(phase, str(err)) for phase, err in cfg.pending_errors],
        "arch_info": mc.arch_info,
        "hf_writes": mc.hf_config.overlay_state() if mc.hf_config is not None else None,
        "text_is_hf": mc.hf_text_config is mc.hf_config,
        "text_keys": list(mc.hf_text_config.keys()) if mc.hf_text_config is not None else None,
    }


def _document(cfg: EngineConfig) -> dict:
    doc = Pipeline(gpu_validation="off").run(cfg).to_dict()
    return {k: v for k, v in doc.items() if k not in ("run_id",)}


CASES = resolved_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_load_from_the_memo_equals_a_fresh_load(case, warm_snapshots):
    path = str(FIXTURES / case["config"])
    args = case["engine_args"]
    hfcache.clear()
    first = EngineConfig.from_pretrained(path, **args)
    fresh = _facts(first)
    kept = len(LOADS)
    assert kept == (0 if first.pending_errors else 1)  # a deferred argument error is not kept
    again = EngineConfig.from_pretrained(path, **args)
    assert LOADS.hits == kept
    if not kept:
        assert _facts(again) == fresh
        return
    assert again is not first and again.model_config is not first.model_config
    assert again.model_config.hf_config is not first.model_config.hf_config
    assert _facts(again) == fresh
    # the first one's run (its writes, its freezing) leaves the next load as it was
    first_doc = _document(first)
    third = EngineConfig.from_pretrained(path, **args)
    assert LOADS.hits == 2 and _facts(third) == fresh
    assert _document(third) == first_doc


def _load_twice_with(folder, change) -> tuple[EngineConfig, EngineConfig, int]:
    before = EngineConfig.from_pretrained(folder)
    hits = LOADS.hits
    change(folder)
    after = EngineConfig.from_pretrained(folder)
    return before, after, LOADS.hits - hits


def test_an_edited_config_json_is_read_afresh(qwen_folder, warm_snapshots):
    def edit(d):
        raw = json.loads((d / "config.json").read_text())
        raw["text_config"]["max_position_embeddings"] = 4096
        (d / "config.json").write_text(json.dumps(raw))

    before, after, hits = _load_twice_with(qwen_folder, edit)
    assert hits == 0
    assert before.model_config.max_model_len != 4096 and after.model_config.max_model_len == 4096


def test_a_file_added_beside_the_config_is_read_afresh(qwen_folder, warm_snapshots):
    def add_sentence_transformers(d):
        (d / "modules.json").write_text(json.dumps([
            {"type": "sentence_transformers.models.Transformer", "path": ""},
            {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]))
        (d / "1_Pooling").mkdir()
        (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))

    before, after, hits = _load_twice_with(qwen_folder, add_sentence_transformers)
    assert hits == 0
    assert before.pooler_config is None
    assert after.pooler_config is not None and after.pooler_config.seq_pooling_type == "MEAN"
    assert "modules.json" in {f["name"] for f in after.source["files"]}


def test_a_file_removed_or_changed_is_read_afresh(qwen_folder, warm_snapshots):
    def add(d):
        (d / "modules.json").write_text(json.dumps([
            {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]))
        (d / "1_Pooling").mkdir()
        (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))

    add(qwen_folder)
    cls = EngineConfig.from_pretrained(qwen_folder)
    assert cls.pooler_config.seq_pooling_type == "CLS"

    def change(d):
        (d / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_lasttoken": True}))

    _, last, hits = _load_twice_with(qwen_folder, change)
    assert hits == 0 and last.pooler_config.seq_pooling_type == "LAST"

    def remove(d):
        (d / "modules.json").unlink()

    _, plain, hits = _load_twice_with(qwen_folder, remove)
    assert hits == 0 and plain.pooler_config is None


def test_weights_added_or_changed_are_read_afresh(tmp_path, warm_snapshots):
    """A config without a dtype takes it from the weights' headers: those count as read files."""
    d = tmp_path / "model"
    d.mkdir()
    shutil.copyfile(CONFIGS / "bamba-default" / "config.json", d / "config.json")
    assert json.loads((d / "config.json").read_text())["dtype"] is None
    hfcache.clear()
    (d / "model.safetensors").write_bytes(safetensors_bytes({"w": ("F16", [64])}))
    half = EngineConfig.from_pretrained(d)
    assert half.model_config.dtype == "float16"
    again = EngineConfig.from_pretrained(d)
    assert LOADS.hits == 1 and again.model_config.dtype == "float16"
    (d / "model.safetensors").write_bytes(safetensors_bytes({"w": ("BF16", [64])}))
    bf16 = EngineConfig.from_pretrained(d)
    assert LOADS.hits == 1 and bf16.model_config.dtype == "bfloat16"
    (d / "model-2.safetensors").write_bytes(safetensors_bytes({"v": ("F32", [64])}))
    mixed = EngineConfig.from_pretrained(d)
    assert LOADS.hits == 1
    assert {f["name"] for f in mixed.source["files"]} >= {"model.safetensors", "model-2.safetensors"}


def test_the_provenance_is_of_this_load(qwen_folder, warm_snapshots):
    first = EngineConfig.from_pretrained(qwen_folder)
    again = EngineConfig.from_pretrained(qwen_folder)
    assert LOADS.hits == 1
    assert again.source == first.source and again.source is not first.source
    assert again.source["path"] == os.path.realpath(qwen_folder)


def test_the_working_folder_is_part_of_a_relative_path(tmp_path, monkeypatch, warm_snapshots):
    hfcache.clear()
    for name, source in (("a", QWEN), ("b", CONFIGS / "nemotron-h-56b-base-8k")):
        (tmp_path / name / "model").mkdir(parents=True)
        shutil.copyfile(source / "config.json", tmp_path / name / "model" / "config.json")
    monkeypatch.chdir(tmp_path / "a")
    qwen = EngineConfig.from_pretrained("model")
    monkeypatch.chdir(tmp_path / "b")
    nemotron = EngineConfig.from_pretrained("model")
    assert LOADS.hits == 0
    assert qwen.model_config.architecture != nemotron.model_config.architecture


def test_a_removed_working_folder_loads_an_absolute_path_with_the_memo(tmp_path, monkeypatch, warm_snapshots):
    """An absolute path names the same folder whatever the working folder is: its key needs no
    working folder, so a removed one changes nothing; a relative path's key is the working
    folder's (there is none to key here, and no memo entry is made)."""
    hfcache.clear()
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert os.path.isabs(QWEN)
    first = EngineConfig.from_pretrained(QWEN)
    again = EngineConfig.from_pretrained(QWEN)
    assert len(LOADS) == 1 and LOADS.hits == 1
    assert _facts(again) == _facts(first)
    assert LOADS.key("relative/folder", None, {}) is None


def test_the_mla_switch_is_part_of_the_key(monkeypatch, warm_snapshots):
    hfcache.clear()
    path = CONFIGS / "deepseek-v2-lite-like"
    monkeypatch.delenv("VLLM_MLA_DISABLE", raising=False)
    with_mla = EngineConfig.from_pretrained(path)
    monkeypatch.setenv("VLLM_MLA_DISABLE", "1")
    without = EngineConfig.from_pretrained(path)
    assert LOADS.hits == 0
    assert with_mla.model_config.use_mla and not without.model_config.use_mla


def test_clearing_the_snapshot_memory_clears_the_memo(warm_snapshots):
    EngineConfig.from_pretrained(QWEN)
    assert len(LOADS) >= 1
    hfcache.clear()
    assert len(LOADS) == 0


def test_engine_arguments_are_part_of_the_key(warm_snapshots):
    hfcache.clear()
    plain = EngineConfig.from_pretrained(QWEN)
    cached = EngineConfig.from_pretrained(QWEN, enable_prefix_caching=True)
    assert LOADS.hits == 0
    assert plain.cache_config.enable_prefix_caching is None
    assert cached.cache_config.enable_prefix_caching is True
    assert cached.engine_args == {"enable_prefix_caching": True}


def test_a_release_deciding_at_engine_start_adapts_a_config_once_per_content(monkeypatch):
    """0.34.0's load-time adaptation (``v034.adapt``) is kept with the load: a load the memo
    answers is not adapted again, and each release gets its own adapted template (a release
    between, with other rules, is never answered with 0.34.0's)."""
    from enginecfg.pipeline import rulepacks
    from enginecfg.pipeline.models.v034 import config_time

    calls = []
    real = config_time.adapt

    def counting(cfg, release):
        calls.append(str(release))
        return real(cfg, release)

    monkeypatch.setattr(config_time, "adapt", counting)
    LOADS.clear()
    warm = {}
    for name in ("0.34.0", "0.20.0", "0.34.0", "0.20.0", "0.34.0"):
        warm[name] = rulepacks.get(name).load(QWEN, {"mamba_cache_mode": "align"}, None)
    assert calls == ["0.34.0", "0.20.0"]
    for name, cfg in warm.items():
        LOADS.clear()
        assert _facts(cfg) == _facts(rulepacks.get(name).load(QWEN, {"mamba_cache_mode": "align"}, None))
    assert _facts(warm["0.34.0"]) != _facts(warm["0.20.0"])
