"""On SQLite the write path binds JSON columns' text encoded ahead: it must be the text the
column type itself writes (PostgreSQL's driver takes values through its own adapter)."""

from __future__ import annotations

import json
import math

import pytest
from sqlalchemy.dialects import sqlite

from enginecfg.store.models import JSONValue, encode_json, normalise_json

VALUES = [
    {"b": 1, "a": [1, 2.5, None, True], "nested": {"x": (1, 2), "y": "ü ∞ \"q\""}},
    {3: "int key", "tuple": (1, (2, 3))},
    [0.1, 1e300, -0.0, 2 ** 70, "", []],
    "a string",
    7,
    {"dtype": object()},  # not JSON: encoded through str() as every column value is
    # scalars, which take a shorter way
    "NaN", "$float", True, False, 2 ** 70, -0.0, 1e-300, 0.1, "é \x00 \ud800",
]
NOT_FINITE = [{"x": float("nan")}, [float("inf")], {"$float": "inf"}, {"s": "NaN in a string"},
              {"$esc": {"a": 1}},
              # rewritten in the text: the numbers are, the same words inside strings are not
              [float("inf"), "Infinity", 'a"NaN"b', -float("inf")],
              {"s": "-Infinity \\", "v": [1, float("-inf"), {"k": float("nan")}], "ü": "\"NaN"},
              {"k": float("inf"), "tag in a value": "$float"}]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_text_is_what_the_column_itself_writes(value):
    normalised, text = encode_json(value)
    assert text is not None
    dialect = sqlite.dialect()
    process = JSONValue().dialect_impl(dialect).bind_processor(dialect)
    assert text == process(normalised)
    assert normalised == normalise_json(value)


@pytest.mark.parametrize("value", NOT_FINITE, ids=range(len(NOT_FINITE)))
def test_values_the_column_rewrites_get_the_rewritten_text(value):
    encoded, text = encode_json(value)
    dialect = sqlite.dialect()
    process = JSONValue().dialect_impl(dialect).bind_processor(dialect)
    assert text == process(normalise_json(value))
    json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in {text}"))  # PostgreSQL refuses those
    want = normalise_json(value)
    if isinstance(value, dict) and "x" in value:
        assert math.isnan(encoded["x"]) and math.isnan(want["x"])
    else:
        assert encoded == want
