"""Small helpers the built-in stages share (no I/O, no store, no logging set-up)."""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline.models.architectures import ARCHITECTURES


def config_hook(cfg: Any) -> str | None:
    """The MODELS_CONFIG_MAP hook of the config's architecture, keyed by its un-normalised name."""
    info = ARCHITECTURES.get(cfg.model_config.architecture or "")
    return info.config_hook if info is not None else None


def cdiv(a: int, b: int) -> int:
    return -(a // -b)
