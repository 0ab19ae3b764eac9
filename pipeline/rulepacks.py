"""Rule packs: what the engine runs for a vLLM release, registered by the application.

A release of vLLM decides with its own rules: the stages it runs and their order, and how
a model's files become a config (its model knowledge, its engine defaults).  The engine
knows none of them; it runs the :class:`RulePack` it is given.  The application layer
(``enginecfg/__init__.py``, which runs before any ``enginecfg.*`` module) registers the
built-in pack of vLLM 0.19.0 as the default, the way a plugin host registers its built-in
plugins; another release is one more :func:`register` call, and a pipeline picks a pack by
release (:func:`get`).

The engine never imports the stages or the loader: a pack hands them over.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.stage import Stage

__all__ = ["RulePack", "register", "get", "releases", "default_release"]


@attrs.frozen
class RulePack:
    """One release's rules.

    * ``release``: the vLLM version the pack speaks for (``"0.19.0"``);
    * ``stages``: the built-in stage classes, in the release's order (each runs after the one
      before it);
    * ``load``: ``load(path, engine_args, revision, *, defer_argument_errors)`` -> a config
      (``EngineConfig.from_pretrained``'s work; deferred engine-argument errors are raised
      by the pipeline at the step where vLLM reports them);
    * ``prefetch``: ``prefetch(paths)``: get ready to load many paths at once (may do nothing);
    * ``arguments``: the release's engine-argument table (``engine_args.release_table``), or
      None for the first release's (``engine_args.ENGINE_ARGS``): what a plugin's stage sets is
      checked against it as the caller's arguments are.
    """

    release: str
    stages: tuple[type[Stage], ...]
    load: Callable[..., Any]
    prefetch: Callable[[list[Any]], Any] = lambda paths: None
    arguments: Any = None


_PACKS: dict[str, RulePack] = {}
_DEFAULT: list[str] = []


def register(pack: RulePack, *, default: bool = False) -> None:
    """Make *pack* the rules of its release (replacing an earlier one of the same release);
    with *default*, the release a pipeline runs when none is asked for."""
    if not isinstance(pack, RulePack):
        raise InvalidInputError.for_value("rule pack", pack, "a RulePack")
    _PACKS[pack.release] = pack
    if default or not _DEFAULT:
        _DEFAULT[:] = [pack.release]


def releases() -> tuple[str, ...]:
    """The releases with a registered pack, in registration order."""
    return tuple(_PACKS)


def default_release() -> str:
    """The release a pipeline runs when none is asked for."""
    if not _DEFAULT:
        raise InvalidInputError("no rule pack is registered: import enginecfg, which registers the "
                                "built-in one", field="vllm_version")
    return _DEFAULT[0]


def get(release: str | None = None) -> RulePack:
    """The pack of *release* (None: the default release's)."""
    name = default_release() if release is None else release
    pack = _PACKS.get(name) if isinstance(name, str) else None
    if pack is None:
        raise InvalidInputError.for_value("vllm_version", release, ", ".join(_PACKS) or "none registered")
    return pack
