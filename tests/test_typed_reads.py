"""Typed reads of the model config: a field of the wrong type is vLLM's outcome where vLLM
has one, else bad input naming the dotted field; never a crash.

The cases are real fixture configs with one field malformed (``tests/order_oracle``,
``types/*``; what vLLM 0.19.0 answered is in ``expected.json``).  vLLM's own refusal
(ValueError) must be enginecfg's, with its first sentence and type; where vLLM crashes on the
value (AttributeError, TypeError, KeyError) or its pydantic type check refuses it, enginecfg
refuses it as :class:`InvalidInputError` naming the field; where vLLM resolves, so does
enginecfg.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from enginecfg import ConfigRejectedError, EngineCfgError, InvalidInputError, Pipeline
from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.errors import StageError
from enginecfg.pipeline.plugins import builtin_stages

HERE = Path(__file__).resolve().parent / "order_oracle"
EXPECTED = json.loads((HERE / "expected.json").read_text())
CASES = sorted(n for n in EXPECTED if n.startswith("types/"))
CRASHES = {"ZeroDivisionError", "TypeError", "AttributeError", "KeyError", "IndexError"}

#: the field each case malforms (its dotted name in enginecfg's errors)
FIELD = {
    "qalgo-object": "quantization_config.quant_algo",
    "qalgo-object-layers-list": "quantization_config.quant_algo",
    "qalgo-int": "quantization_config.quant_algo", "qalgo-list": "quantization_config.quant_algo",
    "qlayers-list": "quantization_config.quantized_layers",
    "qmethod-int": "quantization_config.quant_method",
    "qmethod-object": "quantization_config.quant_method",
    "qconfig-list": "quantization_config", "qconfig-string": "quantization_config",
    "qkvscheme-string": "quantization_config.kv_cache_scheme",
    "text-heads-string": "num_attention_heads", "text-headdim-float": "head_dim",
    "text-layertypes-string": "layer_types", "text-rope-list": "rope_parameters",
    "text-maxpos-string": "max_position_embeddings", "text-kvheads-null": "num_key_value_heads",
    "text-vheads-bool": "linear_num_value_heads", "vision-int": "vision_config",
    "text-config-list": "text_config", "text-ssmdtype-int": "mamba_ssm_dtype",
}
def _run(case):
    path = str((HERE / case["config"]).resolve())
    return Pipeline(stages=builtin_stages(), gpu_validation="off").resolve(path, **case["engine_args"])


def test_the_issue_reproduction_is_vllms_refusal_not_a_traceback(warm_snapshots):
    """quant_algo an object and quantized_layers a list: vLLM refuses the algorithm first."""
    case = EXPECTED["types/qalgo-object-layers-list"]
    with pytest.raises(ConfigRejectedError) as info:
        _run(case)
    assert str(info.value).startswith("ModelOpt currently only supports")
    assert info.value.field == "hf_config.quantization_config.quant_algo"


@pytest.mark.parametrize("name", CASES)
def test_a_malformed_field_gets_vllms_outcome_or_names_the_field(name, warm_snapshots):
    case, short = EXPECTED[name], name.split("/", 1)[1]
    if case["status"] == "resolved":
        assert _run(case).to_dict()["status"] == "resolved"
        return
    with pytest.raises(EngineCfgError) as info:
        _run(case)
    err = info.value
    assert not isinstance(err, StageError), err
    if case["type"] in CRASHES or case["invalid_fields"]:
        assert isinstance(err, InvalidInputError), err
        assert err.field.endswith(FIELD[short]) and FIELD[short].split(".")[-1] in str(err)
    else:
        assert isinstance(err, ConfigRejectedError), err
        assert " ".join(case["message"].split()).split(". ")[0] in " ".join(str(err).split())
        assert err.vllm_type == case["type"]


@pytest.mark.parametrize("value, kinds, ok", [
    (3, (typed.INT,), True), (True, (typed.INT,), False), (2.5, (typed.INT,), False),
    (2.5, (typed.NUMBER,), True), (float("nan"), (typed.NUMBER,), False),
    ("x", (typed.STR,), True), ({"a": 1}, (typed.STR,), False), ([1], (typed.OBJECT,), False),
    ({}, (typed.OBJECT,), True), ([], (typed.LIST,), True), (None, (typed.STR,), True),
])
def test_the_accessor(value, kinds, ok):
    if ok:
        assert typed.check("hf_config.x.y", value, *kinds) is value
        return
    with pytest.raises(InvalidInputError) as info:
        typed.check("hf_config.x.y", value, *kinds)
    assert info.value.field == "hf_config.x.y" and "hf_config.x.y" in str(info.value)
    assert repr(value) in str(info.value)


def test_absent_required_fields_and_what_reads_them():
    from types import SimpleNamespace as NS

    view = NS(head_dim=None, layer_types="x")
    with pytest.raises(InvalidInputError) as info:
        typed.attr(view, "num_heads", typed.INT, required=True, why="the KV cache reads it")
    assert str(info.value) == ("invalid hf_config.num_heads: got absent; allowed: an integer or null "
                               "(the KV cache reads it)")
    assert typed.attr(view, "num_heads", typed.INT, default=7) == 7
    with pytest.raises(InvalidInputError) as info:
        typed.attr(view, "head_dim", typed.INT, optional=False, expect="a positive integer")
    assert str(info.value) == "invalid hf_config.head_dim: got None; allowed: a positive integer"
    assert typed.attr(view, "layer_types", typed.ANY) == "x"
    with pytest.raises(TypeError):
        typed.attr(view, "layer_types")  # no kinds: a programming error, not a raw read
    with pytest.raises(InvalidInputError) as info:
        typed.key({"a": 1}, "hf_config.quantization_config", "quant_algo", typed.STR, required=True)
    assert info.value.field == "hf_config.quantization_config.quant_algo"


def test_a_section_names_its_fields_and_says_what_reads_them():
    from types import SimpleNamespace as NS

    sec = typed.Section(NS(conv_dim=True, heads="8"), "hf_config.text_config", "the state reads it")
    assert sec.has("conv_dim") and not sec.has("x")
    assert sec.attr("conv_dim", typed.INT, typed.BOOL) is True
    with pytest.raises(InvalidInputError) as info:
        sec.attr("heads", typed.INT)
    assert info.value.field == "hf_config.text_config.heads"
    assert str(info.value).endswith("(the state reads it)") and "'8'" in str(info.value)
