"""Turn a transformers config object into a plain, cacheable snapshot (and back into a view).

vLLM reads attributes of the object transformers builds; the values depend on the config
class (its defaults, its attribute aliases, its per-layer attributes).  Building that object
costs an ``import transformers`` (which pulls in torch) plus milliseconds per config, so
enginecfg builds it once per distinct config content, out of process, and keeps what vLLM
would read as a snapshot:

``{"class": str, "model_type": str | None, "attrs": {name: value}, "raises": {name: text},
   "per_layer": [{name: value}] | None, "text_config": attr name | "self", "aliases": {name: target},
   "default_architecture": str | None}``

Nested configs (``text_config``, ``vision_config``, ``llm_config`` ...) are snapshots
themselves.  A ``torch.dtype`` is stored as its name (``"bfloat16"``).  Only this module's
:func:`snapshot_of` touches transformers objects; it never imports transformers itself.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SNAPSHOT_VERSION", "snapshot_of", "is_snapshot"]

#: marks a dict as a snapshot.  Not a version to bump by hand: the on-disk cache is keyed by
#: a digest of this module's and the worker's source (``cache.layout_version``)
SNAPSHOT_VERSION = 2

# properties (not instance attributes) that vLLM reads on some config classes
_READ_PROPERTIES = ("layers_block_type",)


def is_snapshot(value: Any) -> bool:
    return isinstance(value, dict) and value.get("__snapshot__") == SNAPSHOT_VERSION


def _is_config(obj: Any) -> bool:
    return hasattr(obj, "to_dict") and hasattr(obj, "model_type") and hasattr(obj, "attribute_map")


def _plain(value: Any, depth: int) -> Any:
    """A JSON-able copy of *value*; nested configs become snapshots."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) or math.isinf(value) else value
    if _is_config(value):
        return snapshot_of(value, depth + 1)
    if isinstance(value, dict):
        return {str(k): _plain(v, depth) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth) for v in value]
    if isinstance(value, (set, frozenset)):
        # a set's repr follows the process's string hashing: sort it, so the same config
        # gives the same snapshot in every process
        return {"__repr__": "{" + ", ".join(sorted(map(repr, value))) + "}" if value else repr(value)}
    mod = type(value).__module__
    if mod == "torch" and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    return {"__repr__": repr(value)}


def _read(obj: Any, name: str, depth: int, attrs: dict, raises: dict) -> None:
    try:
        value = getattr(obj, name)
    except Exception as exc:  # a per-layer attribute read globally, a broken property
        raises[name] = f"{type(exc).__name__}: {exc}"
        return
    attrs[name] = _plain(value, depth)


def snapshot_of(config: Any, depth: int = 0) -> dict[str, Any]:
    """Capture what vLLM could read from a transformers config object."""
    if depth > 6:
        return {"__snapshot__": SNAPSHOT_VERSION, "class": type(config).__name__, "attrs": {}, "raises": {}}
    # vLLM's remap: a config with llm_config and no text_config reads llm_config as text_config
    aliases: dict[str, str] = {}
    names = [n for n in vars(config) if not n.startswith("_") or n == "_name_or_path"]
    if "llm_config" in names and getattr(config, "text_config", None) is None:
        aliases["text_config"] = "llm_config"
    attrs: dict[str, Any] = {}
    raises: dict[str, str] = {}
    for name in names:
        _read(config, name, depth, attrs, raises)
    for alias in getattr(config, "attribute_map", {}) or {}:
        if alias not in attrs and alias not in raises:
            _read(config, alias, depth, attrs, raises)
    for prop in _READ_PROPERTIES:
        if prop not in attrs and hasattr(type(config), prop):
            _read(config, prop, depth, attrs, raises)

    per_layer = None
    layer_attrs = getattr(config, "per_layer_attributes", None) if raises else None
    if layer_attrs:
        try:
            per_layer = [
                {a: _plain(getattr(layer, a, None), depth) for a in sorted(layer_attrs)}
                for layer in config.per_layer_config
            ]
        except Exception as exc:
            raises["per_layer_config"] = f"{type(exc).__name__}: {exc}"

    text_config = "self"
    try:
        target = config.get_text_config() if not aliases else getattr(config, "llm_config")
        if target is not config:
            for name in ("text_config", "llm_config", "text_encoder", "decoder", "generator"):
                if getattr(config, name, None) is target:
                    text_config = name
                    break
    except Exception as exc:
        raises["get_text_config"] = f"{type(exc).__name__}: {exc}"

    return {
        "__snapshot__": SNAPSHOT_VERSION,
        "class": type(config).__name__,
        "model_type": getattr(config, "model_type", None) or None,
        "attrs": attrs,
        "raises": raises,
        "per_layer": per_layer,
        "text_config": text_config,
        "aliases": aliases,
    }
