"""Out-of-process transformers loader.

Run as ``python -m enginecfg.pipeline._hfworker``: reads ``{"items": [{"path": ...} |
{"config": {...}}]}`` as JSON on stdin and writes ``{"results": [snapshot | {"error":
{...}}]}`` on stdout.  It is the only place that imports transformers on enginecfg's
behalf, so the calling process never pays for (or imports) transformers and torch.
Offline, ``trust_remote_code=False``: remote code named by ``auto_map`` is never run.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _generic(config_dict: dict[str, Any]):
    """A config of an architecture transformers does not know: all fields kept as attributes."""
    from transformers import PretrainedConfig

    cfg = PretrainedConfig(**{k: v for k, v in config_dict.items() if k != "model_type"})
    model_type = config_dict.get("model_type")
    if model_type is not None:
        cfg.model_type = model_type  # instance attribute; the class has an empty one
    return cfg


def _known_model_type(model_type: Any) -> bool:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return isinstance(model_type, str) and model_type in CONFIG_MAPPING


def load_config(config_dict: dict[str, Any]):
    """The config object vLLM 0.19.0 reads: for the model types where vLLM registers its own
    config class, the config as that class builds it (see :mod:`.config_defaults`)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from enginecfg.pipeline.models.config_defaults import apply

    config_dict, build, failed = apply(config_dict)
    if failed is not None:
        # vLLM's class asserts these (a bare AssertionError): bad input, named as a field error
        raise AssertionError(f"Validation error for field '{failed}': vLLM 0.19.0's "
                             f"{config_dict.get('model_type')} config class refuses its value "
                             f"{config_dict.get(failed)!r}")
    if build == "plain":
        return _generic(config_dict)
    model_type = config_dict.get("model_type")
    if _known_model_type(model_type):
        cls = CONFIG_MAPPING[model_type]
        return cls.from_dict(dict(config_dict))
    return _generic(config_dict)


def default_architecture(model_type: Any) -> str | None:
    try:
        from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    except Exception:
        return None
    return MODEL_MAPPING_NAMES.get(model_type) if isinstance(model_type, str) else None


def snapshot_item(item: dict[str, Any]) -> dict[str, Any]:
    from enginecfg.pipeline.hfsnapshot import snapshot_of

    config_dict = item["config"]
    try:
        cfg = load_config(config_dict)
    except Exception as exc:  # transformers refused the config: that is vLLM's answer too
        return {"error": {"type": type(exc).__name__, "message": str(exc)}}
    snap = snapshot_of(cfg)
    snap["default_architecture"] = default_architecture(snap.get("model_type"))
    return snap


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    request = json.load(sys.stdin)
    results = [snapshot_item(item) for item in request["items"]]
    json.dump({"results": results}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
