"""Fuzzed nested fields of the Qwen3.5 fixture: every field of ``text_config``,
``vision_config`` and the top level set to every JSON type, or deleted; and the fields the
pooling hook, the ModelOpt KV-cache scheme and rope scaling read, on fixtures that have them.

vLLM 0.19.0 reads a ``qwen3_5`` config with a config class of its own (not transformers'),
so a malformed field there meets different checks than transformers 5.23's class makes.
The cases are built from the fixture at test time (nothing but the edits is stored);
``make_expected.py`` asked the real vLLM about each and wrote ``expected.json``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: the fixture configs, kept in the repository (``tests/data/vllm-0.19.0``)
CONFIGS = HERE.parent / "data" / "vllm-0.19.0" / "configs"
BASE = "qwen3.5-27b"

#: every JSON type (and deletion, ``DELETE``), as a field's value
VALUES: dict[str, Any] = {
    "null": None, "true": True, "false": False, "int7": 7, "int-1": -1, "int0": 0,
    "float": 2.5, "str": "x", "list": [], "list-mixed": [1, "a"], "object": {},
    "object-a": {"a": 1},
}
DELETE = "delete"


def base_config() -> dict[str, Any]:
    return json.loads((CONFIGS / BASE / "config.json").read_text())


def _paths(cfg: dict[str, Any]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for name in sorted(cfg):
        out.append((name,))
    for section in ("text_config", "vision_config"):
        for name in sorted(cfg[section]):
            out.append((section, name))
    for name in sorted(cfg["text_config"]["rope_parameters"]):
        out.append(("text_config", "rope_parameters", name))
    return out


def cases() -> list[tuple[str, tuple[str, ...], str]]:
    """``(case name, path, value name)`` of every case, in a stable order."""
    out = []
    for path in _paths(base_config()):
        for value in [*VALUES, DELETE]:
            if path == ("model_type",) and isinstance(VALUES.get(value), (list, dict)):
                continue  # the oracle's harness looks the model type up in a dict first
            out.append((".".join(path) + "=" + value, path, value))
    return out


#: fields other stages and derivations read, on the fixtures that have them:
#: (fixture, path, what is set first).  The pooling hook's ``pooling``, the ModelOpt KV-cache
#: scheme and its inner fields, a yarn rope scaling's type, factor and original length.
_YARN = {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 1024}
EXTRA: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    ("nemotron-vl-embed-avg", ("pooling",), {}),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "kv_cache_scheme"), {}),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "kv_cache_scheme", "num_bits"), {}),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "kv_cache_scheme", "type"), {}),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "kv_cache_scheme", "dynamic"), {}),
    ("deepseek-v2-lite-like", ("rope_scaling",), {}),
    ("deepseek-v2-lite-like", ("rope_scaling", "factor"), {"rope_scaling": _YARN}),
    ("deepseek-v2-lite-like", ("rope_scaling", "original_max_position_embeddings"),
     {"rope_scaling": _YARN}),
    ("deepseek-v2-lite-like", ("rope_scaling", "type"), {"rope_scaling": _YARN}),
]


def extra_cases() -> list[tuple[str, str, tuple[str, ...], dict[str, Any], str]]:
    """``(case name, fixture, path, first edits, value name)`` of the cases on other fixtures."""
    return [(f"{base}:{'.'.join(path)}={value}", base, path, first, value)
            for base, path, first in EXTRA for value in [*VALUES, DELETE]]


def edited(path: tuple[str, ...], value: str, base: str = BASE,
           first: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fixture config with the field at ``path`` set to ``VALUES[value]`` (or deleted)."""
    cfg = json.loads((CONFIGS / base / "config.json").read_text())
    for name, section in (first or {}).items():
        cfg[name] = copy.deepcopy(section)
    node = cfg
    for step in path[:-1]:
        node = node[step]
    if value == DELETE:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = copy.deepcopy(VALUES[value])
    return cfg


def all_cases() -> list[tuple[str, dict[str, Any]]]:
    """``(case name, config)`` of every case: the Qwen3.5 grid, then the other fixtures."""
    out = [(name, edited(path, value)) for name, path, value in cases()]
    out += [(name, edited(path, value, base, first))
            for name, base, path, first, value in extra_cases()]
    return out


def build(root: Path) -> dict[str, Path]:
    """Each case's model folder (a ``config.json``) under ``root``, by case name."""
    paths = {}
    for i, (name, data) in enumerate(all_cases()):
        folder = root / f"case-{i:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(data, indent=1))
        paths[name] = folder
    return paths
