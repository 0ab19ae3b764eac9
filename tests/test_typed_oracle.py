"""Every field of the Qwen3.5 fixture, fuzzed with every JSON type (or deleted), against vLLM
(and the pooling, KV-cache-scheme and rope-scaling fields on the fixtures that have them).

vLLM 0.19.0 reads ``qwen3_5`` configs with a config class of its own, which checks no field
types; transformers 5.23's class checks them.  Where they differ, vLLM's outcome is the
contract.  ``typed_oracle/typed_cases.py`` builds the configs from the fixture; ``typed_oracle/
expected.json`` is what the real vLLM made of each (``typed_oracle/make_expected.py``).

* vLLM refused with its own check (a ValueError, an assertion): enginecfg refuses with the
  same type and first sentence;
* vLLM crashed on the value (TypeError, AttributeError, ...), or pydantic's or a config
  class's type check refused it: enginecfg refuses it as bad input naming a field (never a
  crash);
* vLLM resolved: enginecfg resolves to the same fields, pages and config-module messages.

Beneath that, the config object itself: ``typed_oracle/class_digests.json`` holds, for every
Qwen3.5 fixture and case, the snapshot of what vLLM's own class built (or what it raised);
enginecfg's rebuilt classes (:mod:`enginecfg.pipeline.hf._classes`) must build the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support import SEED_MESSAGE

sys.path.insert(0, str(Path(__file__).resolve().parent / "typed_oracle"))
from typed_cases import all_cases, build  # noqa: E402
import class_digests  # noqa: E402

from enginecfg import ConfigRejectedError, EngineCfgError, EngineConfig, InvalidInputError, Pipeline  # noqa: E402
from enginecfg.pipeline.errors import StageError  # noqa: E402
from enginecfg.pipeline.hf import cache as hfcache  # noqa: E402

EXPECTED = json.loads((Path(__file__).resolve().parent / "typed_oracle" / "expected.json").read_text())
RESULTS = EXPECTED["results"]
CASES = [name for name, _ in all_cases()]
#: exceptions that are vLLM crashing on a value it does not check, not vLLM refusing it
CRASHES = {"TypeError", "AttributeError", "KeyError", "IndexError", "ZeroDivisionError"}
#: a config class's own type check of one field (transformers' strict dataclasses): bad
#: input naming the field, as a pydantic type error is
TYPE_CHECKS = {"StrictDataclassFieldValidationError"}
MODEL = ("architecture", "dtype", "max_model_len", "is_hybrid", "is_attention_free", "use_mla",
         "head_size", "num_kv_heads", "total_num_kv_heads", "supports_mamba_prefix_caching",
         "mamba_chunk_size", "quantization")


def _first(message: str) -> str:
    return " ".join(message.split()).split(". ")[0]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hfcache, "_in_process", lambda: True)  # hundreds of new configs: no worker round trips
        yield build(tmp_path_factory.mktemp("typed-oracle"))


def test_expected_covers_every_case():
    assert sorted(RESULTS) == sorted(CASES)
    assert EXPECTED["produced_by"]["vllm"] == "0.19.0"


def outcome(name: str, folder: Path) -> list[str]:
    """What differs between enginecfg and vLLM on one case (empty: the same)."""
    want = RESULTS[name]
    try:
        doc = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(str(folder))).to_dict()
    except EngineCfgError as exc:
        if isinstance(exc, StageError):
            return [f"a stage crashed: {exc}"]
        if want["status"] == "resolved":
            return [f"vLLM resolved; enginecfg: {type(exc).__name__}: {exc}"]
        if want["type"] in CRASHES or want["invalid_fields"] or want["type"] in TYPE_CHECKS:
            if not isinstance(exc, InvalidInputError) or not exc.field:
                return [f"vLLM {want['type']}; enginecfg {type(exc).__name__} (not bad input naming a field)"]
            return []
        if not isinstance(exc, ConfigRejectedError) or exc.vllm_type != want["type"]:
            return [f"vLLM {want['type']}: {want['message'][:80]!r}; enginecfg {type(exc).__name__}: {exc}"]
        if _first(want["message"]) not in " ".join(str(exc).split()):
            return [f"message: want {_first(want['message'])!r}, got {str(exc)[:120]!r}"]
        return []
    if want["status"] != "resolved":
        return [f"vLLM {want['type']}: {want['message'][:100]!r}; enginecfg resolved"]
    out = []
    cfg = doc["config"]
    for k in MODEL:
        if cfg["model_config"].get(k) != want["model_config"][k]:
            out.append(f"model_config.{k}: want {want['model_config'][k]!r} got {cfg['model_config'].get(k)!r}")
    for k, v in want["cache_config"].items():
        if cfg["cache_config"].get(k) != v:
            out.append(f"cache_config.{k}: want {v!r} got {cfg['cache_config'].get(k)!r}")
    if cfg["scheduler_config"]["enable_chunked_prefill"] != want["enable_chunked_prefill"]:
        out.append("enable_chunked_prefill")
    for k, v in want["pages"].items() if want["model_config"]["is_hybrid"] else ():
        # the page facts of the hybrid alignment, as the fixtures keep them (hybrid models)
        if (doc.get("pages") or {}).get(k) != v:
            out.append(f"pages.{k}: want {v!r} got {(doc.get('pages') or {}).get(k)!r}")
    got = [[m["level"], m["message"]] for m in doc["messages"] if SEED_MESSAGE.match(m["message"])]
    if got != [m for m in want["messages"] if SEED_MESSAGE.match(m[1])]:
        out.append(f"messages: {got}")
    return out


#: where enginecfg still answers differently, and why (each is an expected failure, strict:
#: a case that starts to match must leave this table)
KNOWN = {

    "model_type=delete": "without a model type, transformers' AutoConfig looks for a model "
                         "type's name inside the folder's path; enginecfg builds a generic config "
                         "and names the first field it misses",
    **{f"text_config.{f}={v}": "vLLM computes a negative or fractional state shape and resolves; "
                               "enginecfg refuses the count as bad input"
       for f in ("linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads",
                 "linear_num_value_heads", "linear_value_head_dim") for v in ("int-1", "float")},
    "deepseek-v2-lite-like:rope_scaling.factor=str": "vLLM multiplies the length by the text "
                                                     "(repeating it) and fails to read the result "
                                                     "as a number; enginecfg refuses the factor",
    "text_config.num_key_value_heads=int-1": "vLLM resolves with -1 KV heads; enginecfg refuses them",
    "text_config.head_dim=int-1": "vLLM's VllmConfig assertion; enginecfg refuses the head size as bad input",
    **{f"text_config.{f}={v}": "vLLM resolves a model no engine can build (a size or count below 1); "
                               "enginecfg refuses it as bad input naming the field (check_buildable)"
       for f, values in (("hidden_size", ("int0", "int-1", "false")), ("vocab_size", ("int0", "int-1", "false")),
                         ("num_attention_heads", ("int0", "int-1", "false")),
                         ("num_key_value_heads", ("int0", "false")),
                         *((f, ("int0", "false")) for f in ("linear_conv_kernel_dim", "linear_key_head_dim",
                                                             "linear_num_key_heads", "linear_num_value_heads",
                                                             "linear_value_head_dim")))
       for v in values},
    **{f"text_config.{f}={v}": "vLLM resolves query heads that do not split evenly over the key/value "
                               "heads (24 over 4 is changed to 7 or 1); enginecfg refuses them as bad "
                               "input naming the field (check_buildable)"
       for f, v in (("num_attention_heads", "int7"), ("num_attention_heads", "true"),
                    ("num_key_value_heads", "int7"))},
}


@pytest.mark.parametrize("name", [
    pytest.param(c, marks=pytest.mark.xfail(reason=KNOWN[c], strict=True)) if c in KNOWN
    else c for c in CASES])
def test_case_matches_vllm(name, folders):
    assert outcome(name, folders[name]) == []


def test_known_differences_are_cases():
    assert set(KNOWN) <= set(RESULTS)


DIGESTS = json.loads((Path(__file__).resolve().parent / "typed_oracle" / "class_digests.json").read_text())


def test_the_rebuilt_classes_build_what_vllms_classes_build():
    """Snapshot for snapshot (or the same exception) on 760 configs: the fixtures and cases."""
    pytest.importorskip("transformers")
    from enginecfg.pipeline.hf._classes import build as rebuilt

    configs = class_digests.configs()
    assert sorted(configs) == sorted(DIGESTS["results"])
    assert DIGESTS["produced_by"]["vllm"] == "0.19.0"
    differ = [name for name, data in configs.items()
              if class_digests.outcome(rebuilt, data) != DIGESTS["results"][name]]
    assert differ == []


def test_the_class_comparison_can_fail():
    """A rebuilt class that sets one default differently is caught."""
    pytest.importorskip("transformers")
    from enginecfg.pipeline.hf import _classes as _hfclasses

    def wrong(data):
        cfg = _hfclasses.build(data)
        cfg.text_config.head_dim = 128
        return cfg

    name = "fixture/qwen3.5-27b"
    data = class_digests.configs()[name]
    assert class_digests.outcome(wrong, data) != DIGESTS["results"][name]
    assert class_digests.outcome(_hfclasses.build, data) == DIGESTS["results"][name]
