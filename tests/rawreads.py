"""Find model-config reads that bypass :mod:`enginecfg.pipeline.hf.typed` (a static check).

A read of a config field without its type checked is how a malformed config.json reaches a
``TypeError`` deep inside enginecfg.  :func:`raw_reads` walks a module's syntax tree and
reports every read of a field of a *config expression*:

* ``getattr(X, ...)`` of anything (``getattr`` is how a dynamic field read hides; the
  reads of other objects are an explicit allow-list in the test),
* ``C.get(...)`` and ``C.has(...)``,
* an attribute read ``C.name`` (not the view's own methods, such as ``get_text_config``),
* a subscript read ``C[...]``,

where ``C`` is a config expression: an attribute chain ending in ``hf_config``,
``hf_text_config`` or a nested section (``text_config``, ``quantization_config``, ...), or a
local name the code base gives to a config view or a config JSON object (``hf``, ``text``,
``quant``, ``rope``, ...: :data:`CONFIG_NAMES`).  The names are a convention the check
enforces: a view held under another name is not seen, so the convention is part of the rule.
Writes (``text.sliding_window = None``) are not reads and are not reported.
"""

from __future__ import annotations

import ast
from pathlib import Path

#: attribute names that are a config view (or a JSON object of the config) wherever they end a chain
CONFIG_ATTRS = frozenset({
    "hf_config", "hf_text_config", "text_config", "vision_config", "llm_config",
    "quantization_config", "rope_parameters", "rope_scaling", "linear_attn_config",
})
#: local names that hold a config view or a JSON object of the config, by convention
CONFIG_NAMES = CONFIG_ATTRS | frozenset({
    "hf", "text", "view", "quant", "inner", "rope", "llm", "vision", "sub_config",
})
#: the view's own interface: calling these is not reading a config field
VIEW_METHODS = frozenset({
    "get_text_config", "keys", "freeze", "fresh", "overlay_state", "base_value", "is_frozen",
    "class_name", "items", "values",
})


def is_config(node: ast.AST) -> bool:
    """Is ``node`` a config expression (see the module docstring)?"""
    if isinstance(node, ast.Name):
        return node.id in CONFIG_NAMES
    if isinstance(node, ast.Attribute):
        # a chain ending in a section name, or ``self.text`` (an object holding a view)
        return node.attr in CONFIG_ATTRS or (
            isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in CONFIG_NAMES)
    return False


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def raw_reads(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every raw config read in ``source``."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    calls_on: set[int] = set()  # attribute nodes that are the callee of a call
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id == "getattr" and node.args:
                found.append((node.lineno, _text(node)))
            elif isinstance(fn, ast.Attribute) and is_config(fn.value):
                calls_on.add(id(fn))
                if fn.attr in ("get", "has"):
                    found.append((node.lineno, _text(node)))
                elif fn.attr not in VIEW_METHODS:
                    found.append((node.lineno, _text(node)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) \
                and id(node) not in calls_on and is_config(node.value) \
                and node.attr not in VIEW_METHODS and node.attr not in CONFIG_ATTRS:
            found.append((node.lineno, _text(node)))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_config(node.value):
            found.append((node.lineno, _text(node)))
    return sorted(set(found))


def scan(root: Path, folders: tuple[str, ...] = ("pipeline", "stages")) -> dict[str, list[tuple[int, str]]]:
    """Raw reads of every module under ``root``'s ``folders``, by path relative to ``root``."""
    out = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            reads = raw_reads(path.read_text())
            if reads:
                out[str(path.relative_to(root))] = reads
    return out
