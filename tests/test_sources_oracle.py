"""enginecfg against vLLM 0.19.0 on model folders with everything beside config.json.

The folders are built from ``sources_oracle/cases.py`` in a temp dir; ``sources_oracle/
expected.json`` is what the real vLLM made of the same folders (``make_expected.py``).  Field
for field: dtype (from safetensors headers when the config does not say it), max_model_len
(sliding window, tokenizer and sentence-transformers limits), head size, KV heads, MLA, the
runner, the pooling settings, the Mamba page, the block size; the messages; the errors.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from support import SEED_MESSAGE

sys.path.insert(0, str(Path(__file__).resolve().parent / "sources_oracle"))
from cases import CASES, HUB_COMMIT, HUB_REPO, build  # noqa: E402

from enginecfg import EngineCfgError, EngineConfig, InvalidInputError, Pipeline  # noqa: E402
from enginecfg.pipeline.plugins import builtin_stages  # noqa: E402

EXPECTED = json.loads((Path(__file__).resolve().parent / "sources_oracle" / "expected.json").read_text())
BY_NAME = {r["name"]: r for r in EXPECTED["results"]}

#: the vLLM log lines enginecfg reproduces: dtype resolution, the missing-length warning, and
#: everything of vLLM's config-hook module
_MODEL_LINES = re.compile(r"^(Upcasting|Downcasting|Casting|Your device|The model's config\.json does not)")


#: exceptions that are vLLM crashing on a config it does not check, not vLLM refusing it
_CRASHES = ("TypeError", "KeyError", "AttributeError", "IndexError")


def _vllm_messages(result: dict) -> list[tuple[str, str]]:
    out = []
    for m in result["logs"]:
        if m["logger"] == "vllm.model_executor.models.config" or (
                m["logger"] == "vllm.config.model" and _MODEL_LINES.match(m["message"])):
            out.append((m["level"], m["message"]))
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return build(tmp_path_factory.mktemp("sources-oracle"))


def _run(folder: str, paths: dict, args: dict, monkeypatch):
    if folder.startswith("hub:"):
        monkeypatch.setenv("HF_HUB_CACHE", str(paths[folder].parents[2]))
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        cfg = EngineConfig.from_pretrained(HUB_REPO, **args)
    else:
        cfg = EngineConfig.from_pretrained(str(paths[folder]), **args)
    return Pipeline(stages=builtin_stages(), gpu_validation="off").run(cfg)


def test_expected_covers_every_case():
    assert [r["name"] for r in EXPECTED["results"]] == [name for name, _, _ in CASES]
    assert EXPECTED["produced_by"]["vllm"] == "0.19.0"


#: where enginecfg answers differently on purpose (strict expected failures: a case that starts
#: to match must leave this table)
KNOWN = {
    "vcls-lfm2-moe-bare/prefix": "without num_key_value_heads, LFM2-MoE's config class defaults it to 8 over "
                                 "4 query heads; vLLM resolves heads that do not split evenly, enginecfg "
                                 "refuses them as bad input naming the field (check_buildable)",
}


@pytest.mark.parametrize("name, folder, args", [
    pytest.param(*c, marks=pytest.mark.xfail(reason=KNOWN[c[0]], strict=True)) if c[0] in KNOWN else c
    for c in CASES], ids=[c[0] for c in CASES])
def test_case_matches_vllm(name, folder, args, folders, monkeypatch):
    want = BY_NAME[name]
    if want["error"] is not None:
        with pytest.raises(EngineCfgError) as info:
            _run(folder, folders, args, monkeypatch)
        if (want["error"].get("root_type") or want["error"]["type"]) in _CRASHES:
            # vLLM crashed inside its own code; enginecfg names the bad input instead
            assert isinstance(info.value, InvalidInputError) and info.value.field
            return
        text = want["error"].get("root_message") or want["error"]["message"]
        first = " ".join(text.split()).split(". ")[0]
        assert first in " ".join(str(info.value).split())
        return
    result = _run(folder, folders, args, monkeypatch)
    doc = result.to_dict()
    assert doc["status"] == "resolved", doc["error"]
    vm = want["after_verify"]["model_config"]
    mc = doc["config"]["model_config"]
    for field in ("dtype", "max_model_len", "head_size", "num_kv_heads", "total_num_kv_heads", "use_mla",
                  "is_hybrid", "runner_type", "convert_type", "sliding_window", "architecture"):
        assert mc[field] == vm[field], f"model_config.{field}"
    vc, cc = want["after_verify"]["cache_config"], doc["config"]["cache_config"]
    for field in ("block_size", "enable_prefix_caching", "mamba_cache_mode", "mamba_page_size_padded"):
        assert cc[field] == vc[field], f"cache_config.{field}"
    vp, pc = want["after_verify"]["pooler_config"], doc["config"]["pooler_config"]
    if vp is None:
        assert pc is None
    else:
        for field in ("seq_pooling_type", "tok_pooling_type", "use_activation"):
            assert pc[field] == vp[field], f"pooler_config.{field}"
    pages = want["page_sizes"] or {}
    if pages.get("mamba_page_size") and mc["is_hybrid"] and args.get("enable_prefix_caching"):
        assert doc["pages"]["mamba_page_size"] == pages["mamba_page_size"]
    got = [(m["level"], m["message"]) for m in doc["messages"]
           if _MODEL_LINES.match(m["message"]) or SEED_MESSAGE.match(m["message"])]
    assert got == _vllm_messages(want)


def test_hub_case_records_repo_commit_and_hashes(folders, monkeypatch):
    result = _run("hub:st-bf16-f32", folders, {}, monkeypatch)
    source = result.to_dict()["source"]
    assert (source["kind"], source["repo_id"], source["commit"]) == ("hub", HUB_REPO, HUB_COMMIT)
    names = {f["name"]: f for f in source["files"]}
    # config.json whole; both shards' headers only (the config did not decide the dtype)
    assert set(names) == {"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    assert {names[n]["how"] for n in names if n.endswith(".safetensors")} == {"header"}
