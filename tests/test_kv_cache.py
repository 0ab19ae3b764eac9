"""KV-cache specs, groups and capacity against vLLM 0.19.0's own ``kv_cache_utils``.

``kv_oracle/expected.json`` was written by ``kv_oracle/make_expected.py`` with the real
vLLM 0.19.0 (its version is in the file): for each fixture config and argument set, the
layer specs, KV-cache groups, page sizes, block counts, KV tokens, concurrency and the
largest max_model_len at several memory budgets.  Every figure must match exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import FIXTURES

from enginecfg import EngineConfig, Pipeline
from enginecfg.pipeline.errors import EngineCfgError
from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import kv_specs
from enginecfg.pipeline.models.engine_defaults import max_num_batched_tokens

EXPECTED = json.loads((Path(__file__).parent / "kv_oracle" / "expected.json").read_text())
CASES = EXPECTED["cases"]
CONTEXTS = EXPECTED["contexts"]
_RESOLVED: dict[str, object] = {}


def resolve(case):
    """The pipeline's resolved config for a case (memoised: several tests read it)."""
    name = case["name"]
    if name not in _RESOLVED:
        args = {k: v for k, v in case["engine_args"].items() if k != "disable_hybrid_kv_cache_manager"}
        _RESOLVED[name] = Pipeline().run(EngineConfig.from_pretrained(FIXTURES / case["config"], **args)).config
    return _RESOLVED[name]


def limits(cfg, max_model_len=None):
    return kc.Limits(max_model_len=max_model_len or cfg.model_config.max_model_len,
                     max_num_batched_tokens=max_num_batched_tokens(cfg),
                     mamba_cache_mode=cfg.cache_config.mamba_cache_mode)


def groups_for(case, cfg):
    disable = bool(case["engine_args"].get("disable_hybrid_kv_cache_manager"))
    return kc.get_kv_cache_groups(kv_specs.layer_specs(cfg), disable_hybrid_kv_cache_manager=disable)


def test_expected_file_is_vllm_0_19_0():
    assert EXPECTED["produced_by"]["vllm"] == "0.19.0"
    assert len(EXPECTED["budgets"]) >= 3
    kinds = {layer[1] for c in CASES for layer in c.get("layers", [])}
    assert {"FullAttentionSpec", "SlidingWindowSpec", "MambaSpec", "MLAAttentionSpec"} <= kinds
    assert any(c.get("layers") == [] for c in CASES)  # a model without KV cache


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_layer_specs(case):
    cfg = resolve(case)
    specs = kv_specs.layer_specs(cfg)
    got = [[name, type(s).__name__, s.block_size, s.page_size_bytes] for name, s in specs.items()]
    assert got == case["layers"]
    res = case["resolved"]
    assert cfg.cache_config.block_size == res["block_size"]
    assert cfg.cache_config.mamba_page_size_padded == res["mamba_page_size_padded"]
    assert max_num_batched_tokens(cfg) == res["max_num_batched_tokens"]
    mambas = [s for s in specs.values() if isinstance(s, kc.MambaSpec)]
    if "mamba" in case:
        m, want = mambas[0], case["mamba"]
        assert [list(s) for s in m.shapes] == want["shapes"]
        assert list(m.dtypes) == want["dtypes"]
        assert (m.block_size, m.page_size_padded, m.real_page_size_bytes, m.mamba_type) == (
            want["block_size"], want["page_size_padded"], want["real_page_size_bytes"], want["mamba_type"])
    else:
        assert mambas == []


OK_CASES = [c for c in CASES if c["error"] is None]
ERR_CASES = [c for c in CASES if c["error"] is not None]


@pytest.mark.parametrize("case", OK_CASES, ids=[c["name"] for c in OK_CASES])
def test_groups_and_capacity(case):
    cfg = resolve(case)
    specs = kv_specs.layer_specs(cfg)
    groups = groups_for(case, cfg)
    order = {name: i for i, name in enumerate(specs)}
    got_groups = []
    for g, want in zip(groups, case["groups"]):
        s = g.spec
        d = {"kind": type(s).__name__ if not isinstance(s, kc.UniformTypeSpecs) else "UniformTypeKVCacheSpecs",
             "num_layers": len(g.layer_names), "layers": [order[n] for n in g.layer_names],
             "block_size": s.block_size, "page_size_bytes": s.page_size_bytes}
        if hasattr(s, "num_kv_heads"):
            d.update(num_kv_heads=s.num_kv_heads, head_size=s.head_size, dtype=s.dtype,
                     sliding_window=getattr(s, "sliding_window", None))
        if hasattr(s, "shapes"):
            d.update(page_size_padded=s.page_size_padded)
        got_groups.append(d)
    assert got_groups == case["groups"]
    lim = limits(cfg)
    assert kc.max_memory_usage_bytes(specs.values(), lim) == case["max_memory_usage_bytes"]
    assert kc.group_memory_usage_bytes(groups, lim) == case["group_memory_usage_bytes"]
    for want in case["budgets"]:
        budget = want["available_memory"]
        kcfg = kc.kv_cache_config_from_groups(groups, budget)
        got = {
            "available_memory": budget,
            "estimate_max_model_len": kc.estimate_max_model_len(specs.values(), lim, budget),
            "group_estimate_max_model_len": kc.group_estimate_max_model_len(groups, lim, budget),
            "check_enough": kc.check_enough_kv_cache_memory(specs, lim, budget),
            "error": kc.check_groups_fit(groups, lim, budget),
            "num_blocks": kcfg.num_blocks,
            "num_tensors": len(kcfg.tensor_sizes),
            "tensor_bytes": sum(kcfg.tensor_sizes),
            "kv_tokens": kc.kv_tokens(kcfg),
            "max_concurrency": kc.max_concurrency(kcfg, lim) if groups else None,
            "max_concurrency_at": {str(n): kc.max_concurrency(kcfg, limits(cfg, n)) for n in CONTEXTS}
            if groups else None,
        }
        assert got == want, budget


@pytest.mark.parametrize("case", ERR_CASES, ids=[c["name"] for c in ERR_CASES])
def test_grouping_errors(case):
    cfg = resolve(case)
    with pytest.raises(EngineCfgError) as err:
        groups_for(case, cfg)
    first = case["error"].split(": ", 1)[1].split(". ")[0]
    assert first in str(err.value)


def test_sliding_window_needs_max_num_batched_tokens():
    """A sliding layer's per-request memory follows the scheduler budget, not max_model_len."""
    spec = kc.SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=256, dtype="bfloat16",
                                sliding_window=1024)
    small = spec.max_memory_usage_bytes(kc.Limits(max_model_len=262144, max_num_batched_tokens=2048))
    large = spec.max_memory_usage_bytes(kc.Limits(max_model_len=262144, max_num_batched_tokens=8192))
    assert small == (-(-(1023 + 2048) // 16) + 1) * spec.page_size_bytes
    assert large > small


def test_unify_refuses_indivisible_pages():
    a = kc.FullAttentionSpec(block_size=16, num_kv_heads=3, head_size=128, dtype="bfloat16")
    m = kc.MambaSpec(block_size=16, shapes=((1, 1000),), dtypes=("float32",))
    with pytest.raises(EngineCfgError, match="not divisible"):
        kc.get_kv_cache_groups({"a": a, "m": m})


#: state-keeping classes whose per-layer pattern is not encoded (their full-attention layers
#: are MLA with their own latent sizes); the impact of such a run records an error
NOT_ENCODED = {"KimiLinearForCausalLM", "BailingMoeV2_5ForCausalLM"}


def test_every_state_keeping_architecture_has_a_layer_pattern():
    """Each hybrid or recurrent row of the architecture table either names its per-layer
    pattern or is named as not encoded; plain attention rows take the decoder pattern."""
    from enginecfg.pipeline.models.architectures import ARCHITECTURES

    for name, info in ARCHITECTURES.items():
        if info.state_kind is None:
            continue
        assert (info.kv_layout is not None) != (name in NOT_ENCODED), name
    used = {info.kv_layout for info in ARCHITECTURES.values()} - {None}
    assert used == set(kv_specs.LAYOUTS)  # every pattern named exists, and every one is used


MODEL_LAYERS = json.loads((Path(__file__).parent / "kv_oracle" / "model_layers.json").read_text())
BUILT = sorted(k for k, v in MODEL_LAYERS["configs"].items() if v["layers"] is not None)


def test_model_layers_file_covers_each_layer_kind():
    assert MODEL_LAYERS["produced_by"]["vllm"] == "0.19.0"
    kinds = {row["kind"] for k in BUILT for row in MODEL_LAYERS["configs"][k]["layers"]}
    assert {"FullAttentionSpec", "SlidingWindowSpec", "MambaSpec"} <= kinds
    assert len(BUILT) >= 12


@pytest.mark.parametrize("folder", BUILT)
def test_layer_specs_match_vllms_own_model_classes(folder):
    """Names, order, kinds, heads, head sizes, windows and state shapes of every layer, against
    the specs vLLM's model class declares when it is built (kv_oracle/make_model_layers.py)."""
    cfg = Pipeline().run(EngineConfig.from_pretrained(
        FIXTURES / folder, enable_chunked_prefill=False, enable_prefix_caching=False)).config
    built = MODEL_LAYERS["configs"][folder]
    # vLLM's CPU platform (where the classes were built) keeps no fp8 KV cache: the attention
    # dtype is compared only where the cache dtype is the same as on the GPU
    same_cache = built["cache_dtype"] == cfg.cache_config.cache_dtype
    want = [{k: v for k, v in row.items() if same_cache or k != "dtype"} for row in built["layers"]]
    got = []
    for name, s in kv_specs.layer_specs(cfg).items():
        row = {"layer": name, "kind": type(s).__name__}
        if isinstance(s, kc.MambaSpec):
            row.update(mamba_type=s.mamba_type, shapes=[list(x) for x in s.shapes], dtypes=list(s.dtypes))
        else:
            row.update(num_kv_heads=s.num_kv_heads, head_size=s.head_size, sliding_window=s.sliding_window)
            if same_cache:
                row["dtype"] = s.dtype
            if isinstance(s, kc.FullAttentionSpec):
                row["head_size_v"] = s.head_size_v
        got.append(row)
    assert got == want
