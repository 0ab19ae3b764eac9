"""The vLLM releases enginecfg speaks for: one rule pack each, composed from the dated rules.

Every release of :mod:`enginecfg.pipeline.releases` (the release before it plus its dated rules)
gets a rule pack registered with :mod:`enginecfg.pipeline.rulepacks`: its ordered built-in
stages and its loader.  Which stages and loader run follows from the release's rules, not its
name:

- a release that decides the block size at config time (before rule C8, the first release
  spoken for and its patch release): :data:`enginecfg.stages.BUILTIN_STAGES` and
  :func:`~enginecfg.pipeline.loading.load_pretrained`;
- a release that decides it at engine start (C8 on): :data:`enginecfg.stages.v034.STAGES`, and
  the same loader followed by what those releases resolve differently while they build their
  config (:func:`enginecfg.pipeline.models.v034.config_time.adapt`, which takes the release and
  its dated rules), after refusing the engine arguments the release no longer has.

A pipeline picks one by release (``Pipeline(vllm_version=...)``, ``--vllm-version``,
``ENGINECFG_VLLM_VERSION``); :func:`register` adds a release composed in-process.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from enginecfg.pipeline import releases, rulepacks
from enginecfg.pipeline.arg_order import CONFIGS
from enginecfg.pipeline.errors import ConfigRejectedError
from enginecfg.pipeline.engine_args import release_table
from enginecfg.pipeline.loading import load_pretrained, prefetch_pretrained
from enginecfg.pipeline.models.v034 import config_time as v034
from enginecfg.stages import BUILTIN_STAGES
from enginecfg.stages.v034 import STAGES as STAGES_034

__all__ = ["DEFAULT_RELEASE", "arguments_for", "pack_for", "load_at_start", "register", "register_all"]

#: the release a pipeline speaks for unless told otherwise (the first one spoken for)
DEFAULT_RELEASE = releases.first().name


def arguments_for(release: releases.Release) -> tuple[dict[str, Any], dict[str, str]]:
    """The engine arguments of *release*, a release that decides at engine start: ``(table,
    phases)``, its parser's choices (:data:`v034.ARGUMENT_CHOICES`, the ``bfloat16`` Mamba dtypes,
    from the release that brought them, C5b: a release between two held option tables has them
    even where the earlier table does not), its config classes' bounds and the steps they are
    checked at."""
    choices = dict(v034.ARGUMENT_CHOICES) if release.has("C5b") else {}
    if release.has("C7e") and not release.has("C7f"):
        # C7e: 'all' is no Mamba cache mode any more (CacheConfig's Literal); from C7f on the
        # argument is taken and ignored whatever it holds
        choices["mamba_cache_mode"] = ("align", "none")
    if not release.has("C13"):  # before C13 the block and parallel sizes are unbounded fields
        return (release_table(choices, {k: v for k, v in v034.ARGUMENT_BOUNDS.items() if k not in v034.BOUNDED_BY_C13}),
                {})
    return (release_table(choices, dict(v034.ARGUMENT_BOUNDS)),
            {name: CONFIGS for name in v034.CONFIG_CLASS_CHECKED})


def load_at_start(release: releases.Release, path: Any, engine_args: dict[str, Any],
                  revision: str | None = None, *, defer_argument_errors: bool = False,
                  arguments: tuple[dict[str, Any], dict[str, str]] | None = None):
    """A config under the rules of *release*, a release that decides at engine start (see the
    module doc).  *arguments*: :func:`arguments_for` of *release*, where the caller holds it
    already (the rule pack works it out once, not on every load)."""
    v034.check_engine_args(engine_args, release)
    try:
        # adapted once per config content: the load memo keeps the adapted config
        return load_pretrained(path, engine_args, revision, defer_argument_errors=defer_argument_errors,
                               registry=v034.registry_for(release),
                               arguments=arguments_for(release) if arguments is None else arguments,
                               adapt=partial(_adapted, release), adapt_key=(str(release), release.rules))
    except ConfigRejectedError as exc:  # an argument error raised now, not deferred: in the release's words
        reworded = v034.in_release_words(exc, release)
        if reworded is exc:
            raise
        raise reworded from None


def _adapted(release: releases.Release, cfg: Any) -> Any:
    return v034.adapt(cfg, release)


def pack_for(release: releases.Release) -> rulepacks.RulePack:
    """The rule pack of *release* (see the module doc)."""
    if release.decides_at_engine_start:
        arguments = arguments_for(release)  # a release is a frozen value: its table never moves
        return rulepacks.RulePack(release=release.name, stages=STAGES_034,
                                  load=partial(load_at_start, release, arguments=arguments),
                                  prefetch=prefetch_pretrained, arguments=arguments[0])
    return rulepacks.RulePack(release=release.name, stages=BUILTIN_STAGES, load=load_pretrained,
                              prefetch=prefetch_pretrained)


def register(release: releases.Release) -> releases.Release:
    """Make *release* (one of :mod:`enginecfg.pipeline.releases`, or one composed with
    :func:`enginecfg.pipeline.releases.compose`) a release every command accepts."""
    releases.add(release)
    rulepacks.register(pack_for(release), default=release.name == DEFAULT_RELEASE)
    return release


def register_all() -> None:
    """Register every release spoken for, the first as the default."""
    for release in releases.all_releases():
        register(release)
