"""The vLLM releases enginecfg speaks for: one rule pack each.

A release is its ordered built-in stages and its loader (how a model's files become a config
under its rules), registered with :mod:`enginecfg.pipeline.rulepacks`; a pipeline picks one
by release (``Pipeline(vllm_version=...)``, ``--vllm-version``, ``ENGINECFG_VLLM_VERSION``).

- **0.19.0** (the default): :data:`enginecfg.stages.BUILTIN_STAGES` and
  :func:`~enginecfg.pipeline.loading.load_pretrained`;
- **0.34.0**: :data:`enginecfg.stages.v034.STAGES`, and the same loader followed by what
  0.34.0 resolves differently while it builds its config
  (:func:`enginecfg.pipeline.models.v034.config_time.adapt`), after refusing the engine
  arguments 0.34.0 no longer has.
"""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline import rulepacks
from enginecfg.pipeline.arg_order import CONFIGS
from enginecfg.pipeline.engine_args import release_table
from enginecfg.pipeline.loading import load_pretrained, prefetch_pretrained
from enginecfg.pipeline.models.v034 import config_time as v034
from enginecfg.stages import BUILTIN_STAGES
from enginecfg.stages.v034 import STAGES as STAGES_034

__all__ = ["DEFAULT_RELEASE", "PACKS", "load_034", "register_all"]

#: the release a pipeline speaks for unless told otherwise
DEFAULT_RELEASE = "0.19.0"


#: 0.34.0's engine arguments, (table, phases): its parser's choices, its config classes'
#: bounds, and the checks its config classes make at their step
ARGUMENTS_034 = (release_table(dict(v034.ARGUMENT_CHOICES), dict(v034.ARGUMENT_BOUNDS)),
                 {name: CONFIGS for name in v034.CONFIG_CLASS_CHECKED})


def load_034(path: Any, engine_args: dict[str, Any], revision: str | None = None, *,
             defer_argument_errors: bool = False):
    """A config under vLLM 0.34.0's rules (see the module doc)."""
    v034.check_engine_args(engine_args)
    cfg = load_pretrained(path, engine_args, revision, defer_argument_errors=defer_argument_errors,
                          registry=v034.REGISTRY, arguments=ARGUMENTS_034)
    return v034.adapt(cfg)


PACKS = (
    rulepacks.RulePack(release=DEFAULT_RELEASE, stages=BUILTIN_STAGES, load=load_pretrained,
                       prefetch=prefetch_pretrained),
    rulepacks.RulePack(release=v034.RELEASE, stages=STAGES_034, load=load_034, prefetch=prefetch_pretrained),
)


def register_all() -> None:
    """Register every pack, the default release's as the default."""
    for pack in PACKS:
        rulepacks.register(pack, default=pack.release == DEFAULT_RELEASE)
