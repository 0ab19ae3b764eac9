"""Stage discovery: the built-ins plus stages from installed packages.

A plugin distribution declares entry points in the group ``enginecfg.stages``; each names a
:class:`~enginecfg.Stage` subclass or instance.  ``ENGINECFG_PLUGINS`` decides which
installed code may run: ``all`` (the default), ``none``, or a comma-separated allow-list of
distribution names.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from typing import Any

from enginecfg.pipeline.errors import InvalidInputError, StageError
from enginecfg.pipeline.stage import Stage

__all__ = ["ENTRY_POINT_GROUP", "builtin_stages", "plugin_stages", "discover_stages", "plugin_policy"]

ENTRY_POINT_GROUP = "enginecfg.stages"


def builtin_stages() -> list[Stage]:
    from enginecfg.stages import BUILTIN_STAGES

    return [cls() for cls in BUILTIN_STAGES]


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def plugin_policy(value: str | None = None) -> str | set[str]:
    """``"all"``, ``"none"`` or the set of allowed distribution names (normalised)."""
    raw = os.environ.get("ENGINECFG_PLUGINS", "all") if value is None else value
    raw = raw.strip()
    if raw.lower() in ("", "all"):
        return "all"
    if raw.lower() == "none":
        return "none"
    return {_norm(part) for part in raw.split(",") if part.strip()}


def plugin_stages(policy: str | None = None) -> list[Stage]:
    allowed = plugin_policy(policy)
    if allowed == "none":
        return []
    found: list[Stage] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.dist.name if e.dist else "", e.name)):
        dist = ep.dist.name if ep.dist is not None else "unknown"
        version = ep.dist.version if ep.dist is not None else "?"
        if allowed != "all" and _norm(dist) not in allowed:
            continue
        origin = f"{dist} {version}"
        try:
            obj: Any = ep.load()
            stage = obj() if isinstance(obj, type) else obj
        except Exception as exc:
            raise StageError(f"plugin entry point {ep.name!r} of {origin} could not be loaded: "
                             f"{type(exc).__name__}: {exc}", stage=ep.name, origin=origin) from exc
        if not isinstance(stage, Stage):
            raise InvalidInputError(f"plugin entry point {ep.name!r} of {origin} names {obj!r}, "
                                    f"which is not an enginecfg.Stage", field="entry_point")
        stage.origin = origin
        found.append(stage)
    return found


def discover_stages(policy: str | None = None) -> list[Stage]:
    return builtin_stages() + plugin_stages(policy)
