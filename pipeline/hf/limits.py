"""Bounds on what a config may ask enginecfg to build, checked before anything is built.

A config's layer count drives per-layer work: the transformers config class makes a list
entry per layer (``layer_types``, ``layers_block_type``), and enginecfg's KV-cache figures a
spec per layer.  ``num_hidden_layers: 10**40`` would keep either busy without end, growing in
memory, so a layer count above :data:`MAX_LAYERS` is refused before the config reaches
transformers, with the field, the value and the limit named.

The limit is 10,000 layers.  The deepest models served have a little over a hundred decoder
layers (Llama 3.1 405B: 126) and the deepest trained transformers about a thousand (DeepNet);
ten thousand is well above any of them, and the per-layer work stays linear up to it (about
a second per run at the limit).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_LAYERS", "LAYER_COUNT_FIELDS", "layer_count_error"]

#: the most layers a config may declare (see the module doc)
MAX_LAYERS = 10_000

#: the names transformers' config classes give a layer count (``num_layers`` and ``n_layer``
#: are mapped onto ``num_hidden_layers`` by many of them), in any section
LAYER_COUNT_FIELDS = frozenset({
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers",
    "decoder_layers", "num_encoder_layers", "encoder_layers",
})


def _shown(value: int | float) -> str:
    """A count as the message shows it (a number of thousands of digits is not spelt out)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    return f"{value:,} layers" if isinstance(value, int) else f"{value!r} layers"


def layer_count_error(config: Any, where: str = "hf_config") -> tuple[str, str] | None:
    """``(dotted field, message)`` for the first layer count above :data:`MAX_LAYERS` in a
    config (a ``config.json`` dict, or a snapshot: its ``attrs`` are read as the fields),
    nearest the top first; None when every layer count is within the limit."""
    todo: deque[tuple[str, Any]] = deque([(where, config)])
    while todo:
        path, node = todo.popleft()
        if isinstance(node, Mapping):
            snapshot = "__snapshot__" in node
            for key, value in node.items():
                name = path if snapshot and key == "attrs" else f"{path}.{key}"
                if (key in LAYER_COUNT_FIELDS and isinstance(value, (int, float))
                        and not isinstance(value, bool) and value > MAX_LAYERS):
                    return name, (f"invalid {name}: got {_shown(value)}; allowed: at most "
                                  f"{MAX_LAYERS:,} (no engine builds a model this deep: the "
                                  "deepest ones served have a few hundred layers)")
                if isinstance(value, (Mapping, list)):
                    todo.append((name, value))
        elif isinstance(node, list):
            todo.extend((f"{path}.{i}", value) for i, value in enumerate(node))
    return None
