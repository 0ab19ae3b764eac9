"""vLLM 0.19.0's own config classes, rebuilt from data (worker side: imports transformers).

For ``qwen3_5`` and ``qwen3_5_moe`` vLLM registers config classes of its own in place of
transformers': plain ``PretrainedConfig`` subclasses that store each named field as given
(no type checks), fill in ``layer_types``, let transformers check the layer types, and leave a
``text_config`` / ``vision_config`` that is not a JSON object unset.  transformers 5.23's
classes are strict dataclasses that refuse wrongly typed fields vLLM never looks at.  The
object vLLM reads is the one to snapshot, so :func:`build` makes it from
:data:`~enginecfg.pipeline.hf.vllm_classes.VLLM_CLASSES` (the fields, their defaults
and their order) on transformers' ``PretrainedConfig``, whose own validators (rope, token
ids, layer types) run as they run under vLLM.
"""

from __future__ import annotations

import copy
from typing import Any

from enginecfg.pipeline.hf.vllm_classes import VLLM_CLASSES

__all__ = ["build"]

_CLASSES: dict[str, type] = {}


def _take(kwargs: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    return {name: kwargs.pop(name) if name in kwargs else copy.deepcopy(default)
            for name, default in fields.items()}


def _text_class(spec: dict[str, Any], base: type) -> type:
    def __init__(self, **kwargs):
        early = _take(kwargs, spec["early"])
        later = _take(kwargs, spec["after_layer_types"])
        late = _take(kwargs, spec["late"])
        layer_types = kwargs.pop("layer_types", None)
        for name, value in early.items():
            setattr(self, name, value)
        for name, value in spec["kwarg_defaults"].items():
            kwargs.setdefault(name, value)
        self.layer_types = layer_types
        if layer_types is None:
            rule = spec["layer_types"]
            interval = kwargs.get(rule["interval_key"], rule["interval"])
            self.layer_types = [rule["else"] if (i + 1) % interval else rule["every"]
                                for i in range(self.num_hidden_layers)]
        kwargs["ignore_keys_at_rope_validation"] = set(spec["rope_ignore"])
        self.validate_layer_type()
        for name, value in later.items():
            setattr(self, name, value)
        base.__init__(self, **kwargs)
        for name, value in late.items():  # after the base class, whose own defaults differ
            setattr(self, name, value)

    return type(spec["class"], (base,), {"model_type": spec["model_type"], "base_config_key": "text_config",
                                         "__init__": __init__})


def _vision_class(spec: dict[str, Any], base: type) -> type:
    def __init__(self, **kwargs):
        fields = _take(kwargs, spec["fields"])
        base.__init__(self, **kwargs)
        for name, value in fields.items():
            setattr(self, name, value)

    return type(spec["class"], (base,), {"model_type": spec["model_type"],
                                         "base_config_key": "vision_config", "__init__": __init__})


def _top_class(spec: dict[str, Any], base: type) -> type:
    text_cls, vision_cls = _text_class(spec["text"], base), _vision_class(spec["vision"], base)

    def __init__(self, text_config=None, vision_config=None, tie_word_embeddings=False, **kwargs):
        # a section that is neither a JSON object nor null is left unset, as vLLM's class does
        for name, value, cls in (("vision_config", vision_config, vision_cls),
                                 ("text_config", text_config, text_cls)):
            if isinstance(value, dict):
                setattr(self, name, cls(**value))
            elif value is None:
                setattr(self, name, cls())
        for name, value in _take(kwargs, spec["top"]).items():
            setattr(self, name, value)
        base.__init__(self, **kwargs)
        self.tie_word_embeddings = tie_word_embeddings

    return type(spec["class"], (base,), {
        "model_type": spec["model_type"], "__init__": __init__,
        "sub_configs": {"vision_config": vision_cls, "text_config": text_cls}})


def build(config_dict: dict[str, Any]):
    """The config object vLLM 0.19.0's class makes of ``config_dict``."""
    from transformers import PretrainedConfig

    model_type = config_dict["model_type"]
    cls = _CLASSES.get(model_type)
    if cls is None:
        cls = _CLASSES[model_type] = _top_class(VLLM_CLASSES[model_type], PretrainedConfig)
    return cls.from_dict(dict(config_dict))
