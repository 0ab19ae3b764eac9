"""``releases``: every vLLM release enginecfg speaks for, each with the dated rules it adds on
top of the release before it (:mod:`enginecfg.pipeline.releases`), the option table its
``vllm serve`` lines are read with, and whether its every decision follows its own rules.
``to_dict()`` is ``enginecfg releases --json``."""

from __future__ import annotations

from typing import Any

import attrs

from enginecfg.pipeline import releases as room

__all__ = ["ReleaseList", "list_releases"]


@attrs.frozen
class ReleaseList:
    """The releases spoken for, oldest first, and the default one."""

    releases: tuple[room.Release, ...] = attrs.field(converter=tuple)
    default: str

    def to_dict(self) -> dict[str, Any]:
        return {"default": self.default, "releases": [r.to_dict() for r in self.releases]}


def list_releases() -> ReleaseList:
    """Every release spoken for, with its rules (see the module doc)."""
    from enginecfg.pipeline import rulepacks

    return ReleaseList(room.all_releases(), rulepacks.default_release())
