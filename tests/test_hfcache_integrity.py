"""A damaged, edited or swapped disk snapshot never changes a resolved config."""

from __future__ import annotations

import json
import shutil

import pytest

from enginecfg import EngineConfig, Pipeline
from enginecfg.pipeline.hf import cache as hfcache
from enginecfg.pipeline.jsonvalue import fingerprint
from support import CONFIGS

QWEN = CONFIGS / "qwen3.5-27b"
MAMBA = CONFIGS / "mamba-130m-hf"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty disk cache of this test's own; memory cleared before and after."""
    d = tmp_path / "snapshots"
    monkeypatch.setenv("ENGINECFG_CACHE_DIR", str(d))
    hfcache.clear()
    yield d
    hfcache.clear()


def _resolve(path) -> dict:
    hfcache.clear()  # only the disk cache stands between runs
    doc = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(path)).to_dict()
    return {k: doc[k] for k in ("config", "changes", "messages", "fingerprint")}


def _entry(cache, path):
    key = hfcache._key(hfcache._canonical(json.loads((path / "config.json").read_text())))
    return cache / f"{key}.json"


def _edit(file):
    entry = json.loads(file.read_text())
    text = entry["snapshot"]["attrs"]["text_config"]["attrs"]
    text["max_position_embeddings"] = 1234  # what the resolved max_model_len comes from
    text["num_key_value_heads"] = 1
    file.write_text(json.dumps(entry))


def _truncate(file):
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def _swap(file, cache):
    other = _entry(cache, MAMBA)
    _resolve(MAMBA)  # a genuine entry, of another config
    shutil.copyfile(other, file)


def _empty_snapshot(file):
    entry = json.loads(file.read_text())
    entry["snapshot"] = {}
    file.write_text(json.dumps(entry))


@pytest.mark.parametrize("damage", ["edit", "truncate", "swap", "empty", "not-json", "old-layout"])
def test_a_bad_cache_entry_is_rebuilt_and_the_config_is_unchanged(cache, damage):
    expected = _resolve(QWEN)
    file = _entry(cache, QWEN)
    good = json.loads(file.read_text())
    assert good["key"] == file.stem and good["sha256"] == fingerprint(good["snapshot"])
    if damage == "edit":
        _edit(file)
    elif damage == "truncate":
        _truncate(file)
    elif damage == "swap":
        _swap(file, cache)
    elif damage == "empty":
        _empty_snapshot(file)
    elif damage == "not-json":
        file.write_bytes(b"\x00\xff garbage")
    elif damage == "old-layout":
        file.write_text(json.dumps(good["snapshot"]))  # a bare snapshot, as older versions wrote
    assert hfcache._disk_get(file.stem) is None
    assert _resolve(QWEN) == expected
    assert json.loads(file.read_text()) == good  # rebuilt in place


def test_an_edited_entry_would_change_the_config_if_it_were_believed(cache):
    """The edit above matters: loaded from the edited snapshot, the config is different."""
    expected = _resolve(QWEN)
    file = _entry(cache, QWEN)
    _edit(file)
    entry = json.loads(file.read_text())
    hfcache.clear()
    hfcache._memory[file.stem] = entry["snapshot"]  # believed, bypassing the check
    doc = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(QWEN)).to_dict()
    assert doc["config"]["model_config"]["max_model_len"] == 1234
    assert doc["config"] != expected["config"]


@pytest.mark.parametrize("module", ["enginecfg.pipeline.hf.snapshot", "enginecfg.pipeline.hf._worker",
                                    "enginecfg.pipeline.hf._classes",
                                    "enginecfg.pipeline.hf.vllm_classes"])
def test_a_change_to_the_snapshot_builder_code_changes_every_key(tmp_path, monkeypatch, module):
    """No hand-bumped constant: editing the builder's source (the snapshot, the worker, vLLM's
    rebuilt classes and their table) is enough to miss old entries."""
    import importlib

    mod = importlib.import_module(module)
    cfg = json.loads((QWEN / "config.json").read_text())
    before_version, before_key = hfcache.layout_version(), hfcache._key(hfcache._canonical(cfg))
    copy = tmp_path / "module.py"
    copy.write_text(open(mod.__file__).read() + "\n# one more line\n")
    monkeypatch.setattr(mod, "__file__", str(copy))
    hfcache.clear()  # the digest of the builder's code is worked out again
    assert hfcache.layout_version() != before_version
    assert hfcache._key(hfcache._canonical(cfg)) != before_key
    monkeypatch.undo()
    hfcache.clear()
    assert hfcache.layout_version() == before_version


def test_one_clear_forgets_every_cache_and_on_request_the_disk_entries(cache):
    """hf.clear(): the snapshots in memory, the loaded-config templates and every memoised
    figure; with disk=True the disk entries too, rebuilt as they were on the next load."""
    from enginecfg.pipeline.loadmemo import LOADS
    from enginecfg.pipeline.models import capacity, pages

    path = CONFIGS / "nemotron-h-56b-base-8k"  # hybrid: page facts and figures are memoised
    for _ in range(2):
        expected = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(path)).to_dict()
    file = _entry(cache, path)
    entry = file.read_text()
    assert len(LOADS) and len(capacity.FIGURES) and len(pages.PAGES) and capacity.FIGURES.hits
    hfcache.clear()
    assert (len(LOADS), len(capacity.FIGURES), len(pages.PAGES), capacity.FIGURES.hits) == (0, 0, 0, 0)
    assert file.read_text() == entry  # the disk cache stays
    hfcache.clear(disk=True)
    assert not file.exists()
    again = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(path)).to_dict()
    del again["run_id"], expected["run_id"]
    assert again == expected
    assert file.read_text() == entry
