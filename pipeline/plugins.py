"""Stage discovery: the built-ins of a release plus stages from installed packages.

A plugin distribution declares entry points in the group ``enginecfg.stages``; each names a
:class:`~enginecfg.Stage` subclass or instance.  Discovery goes through the installed
metadata (:mod:`importlib.metadata`), the way pytest and vLLM find their plugins, so a
package is a plugin exactly while it is installed.

``ENGINECFG_PLUGINS`` decides which installed code may run: ``all`` (the default),
``none``, or a comma-separated allow-list of distribution names (compared the way package
indexes compare them: case, ``-``, ``_`` and ``.`` do not matter).  An allow-list permits,
it does not require: a named distribution that is not installed is simply absent.

Every discovered stage gets ``origin = "<distribution> <version>"``; that origin travels
with the stage into its events, its errors and the audit record.

Scanning the installed metadata costs milliseconds, so the entry points are read once per
process and read again only when what is installed can have changed: the cache is keyed on
``sys.path`` and the modification time of each of its folders (installing or removing a
distribution adds or deletes a ``*.dist-info`` folder there, which changes that time).
Each ``Pipeline()`` still gets fresh stage instances.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any

from enginecfg.pipeline import rulepacks
from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError, StageError, StageTimeoutError
from enginecfg.pipeline.timelimit import TimedOut, call_with_limit
from enginecfg.pipeline.stage import Stage

if TYPE_CHECKING:
    from enginecfg.pipeline.config import BaseEngineConfig
    from enginecfg.pipeline.run import Pipeline

__all__ = [
    "ENTRY_POINT_GROUP",
    "POLICY_ENV",
    "builtin_stages",
    "plugin_stages",
    "discover_stages",
    "plugin_policy",
    "describe_stages",
]

ENTRY_POINT_GROUP = "enginecfg.stages"
POLICY_ENV = "ENGINECFG_PLUGINS"


def builtin_stages(release: str | None = None) -> list[Stage]:
    """Fresh instances of the built-in stages of *release* (None: the default release), in
    their declared order (:mod:`.rulepacks`: the application registers them).  Each runs
    after the one before it in the release's list (a stage class two releases share may
    sit at different places in them: the order is the instance's)."""
    out: list[Stage] = []
    for cls in rulepacks.get(release).stages:
        stage = cls()
        stage.after = (out[-1].name,) if out else ()
        stage.before = ()
        out.append(stage)
    return out


def _norm(name: str) -> str:
    """A distribution name as package indexes compare it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def plugin_policy(value: str | None = None) -> str | frozenset[str]:
    """``"all"``, ``"none"`` or the frozenset of allowed distribution names (normalised).

    *value* defaults to ``$ENGINECFG_PLUGINS``.  ``all`` or ``none`` mixed with names is
    refused: it cannot be told whether the operator meant to allow everything or a list.
    """
    raw = os.environ.get(POLICY_ENV, "all") if value is None else value
    if not isinstance(raw, str):
        raise InvalidInputError.for_value(POLICY_ENV, raw, "all, none, or a comma-separated list of "
                                          "distribution names")
    return _parsed_policy(raw)


@functools.lru_cache(maxsize=64)
def _parsed_policy(raw: str) -> str | frozenset[str]:
    """:func:`plugin_policy` of the text *raw* (pure: kept per text; a refusal is raised again
    each time, as exceptions are not kept)."""
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    keywords = [p for p in parts if p.lower() in ("all", "none")]
    if not parts:
        return "all"
    if keywords:
        if len(parts) == 1:
            return keywords[0].lower()
        raise InvalidInputError.for_value(POLICY_ENV, raw, "all, none, or a comma-separated list of "
                                          "distribution names (not both)")
    return frozenset(_norm(p) for p in parts)


_scan: tuple[tuple, list[tuple[EntryPoint, str, str]]] | None = None


def _installed_state() -> tuple:
    """What the installed distributions' metadata depends on: the path and its folders' mtimes."""
    state = []
    for entry in sys.path:
        try:
            st = os.stat(entry or ".")
        except (OSError, TypeError, ValueError):
            state.append((entry, None))
            continue
        state.append((entry, st.st_mtime_ns, st.st_ino))
    return tuple(state)


def _entry_points() -> list[tuple[EntryPoint, str, str]]:
    """This group's entry points with their distribution and origin, in a stable order: by
    distribution, then entry-point name (read once per installed state, see above)."""
    global _scan
    state = _installed_state()
    if _scan is not None and _scan[0] == state:
        return _scan[1]
    eps = entry_points(group=ENTRY_POINT_GROUP)
    found = [(ep, *_origin(ep)) for ep in eps]
    found.sort(key=lambda row: (_norm(row[1]) if row[0].dist is not None else "", row[0].name))
    _scan = (state, found)
    return found


def _origin(ep: EntryPoint) -> tuple[str, str]:
    if ep.dist is None:
        return "unknown", f"unknown distribution (entry point {ep.value})"
    return ep.dist.name, f"{ep.dist.name} {ep.dist.version}"


def plugin_stages(policy: str | None = None) -> list[Stage]:
    """Instances of the installed plugin stages that *policy* allows.

    A plugin that cannot be imported or instantiated stops discovery with a
    :class:`StageError` naming the entry point and its distribution: running without a
    stage the operator installed would silently skip a check they rely on.
    """
    allowed = plugin_policy(policy)
    if allowed == "none":
        return []
    found: list[Stage] = []
    for ep, dist, origin in _entry_points():
        if allowed != "all" and _norm(dist) not in allowed:
            continue
        try:
            obj: Any = ep.load()
            stage = obj() if isinstance(obj, type) else obj
        except (Exception, SystemExit) as exc:
            raise StageError(f"plugin entry point {ep.name!r} ({ep.value}) of {origin} could not be "
                             f"loaded: {type(exc).__name__}: {exc}", stage=ep.name, origin=origin) from exc
        if not isinstance(stage, Stage):
            raise InvalidInputError(f"plugin entry point {ep.name!r} ({ep.value}) of {origin} names "
                                    f"{obj!r}, which is not an enginecfg.Stage subclass or instance",
                                    field="entry_point")
        stage.origin = origin
        found.append(stage)
    return found


def discover_stages(policy: str | None = None, *, release: str | None = None) -> list[Stage]:
    """The built-ins (of *release*; None: the default) followed by the allowed plugins: what
    ``Pipeline()`` orders and runs."""
    return builtin_stages(release) + plugin_stages(policy)


def describe_stages(pipeline: "Pipeline", cfg: "BaseEngineConfig | None" = None) -> list[dict[str, Any]]:
    """One row per stage of *pipeline*, in run order, for ``enginecfg stages``.

    Each row: ``position`` (from 0, as in the run's events), ``name``, ``origin``,
    ``after`` and ``before`` (lists of names) and ``applies``: with *cfg*, whether the
    stage's :meth:`~enginecfg.Stage.applies` says yes for the config as given (before any
    stage changed it; a run may still decide otherwise for a stage whose test reads a field
    an earlier stage sets); without *cfg*, None.  An ``applies`` that raises is reported as
    in a run: a :class:`StageError` naming the stage and its origin; a plugin's that takes
    longer than the pipeline's stage time limit, a :class:`StageTimeoutError`.
    """
    rows: list[dict[str, Any]] = []
    for position, stage in enumerate(pipeline.stages):
        applies: bool | None = None
        if cfg is not None:
            try:
                if stage.origin == "built-in":
                    applies = bool(stage.applies(cfg))
                else:  # a plugin's: under the pipeline's stage time limit, as in a run
                    applies = bool(call_with_limit(lambda: stage.applies(cfg), pipeline.stage_timeout, stage.name))
            except TimedOut:
                raise StageTimeoutError(f"stage {stage.name!r} ({stage.origin}) did not finish within the stage "
                                        f"time limit of {pipeline.stage_timeout:g} s while deciding whether it "
                                        f"applies (--stage-timeout, ENGINECFG_STAGE_TIMEOUT)",
                                        stage=stage.name, origin=stage.origin,
                                        timeout=pipeline.stage_timeout) from None
            except EngineCfgError as exc:
                if exc.stage is None:
                    exc.stage = stage.name
                raise
            except Exception as exc:
                raise StageError(f"stage {stage.name!r} ({stage.origin}) failed while deciding whether "
                                 f"it applies: {type(exc).__name__}: {exc}",
                                 stage=stage.name, origin=stage.origin) from exc
        rows.append({
            "position": position,
            "name": stage.name,
            "origin": stage.origin,
            "after": _names(stage.after),
            "before": _names(stage.before),
            "applies": applies,
        })
    return rows


def _names(refs: Any) -> list[str]:
    return [refs] if isinstance(refs, str) else list(refs)
