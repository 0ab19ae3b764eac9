"""What a plugin's stage changes meets the checks the caller's values meet.

After a plugin's stage ran, every field it changed (through its context or past it) is
checked as the caller's engine argument for that field would be
(:func:`~enginecfg.pipeline.engine_args.config_value_error`: ``cache_config.block_size`` = 0
is refused as ``--block-size 0`` is), a changed ``max_model_len`` is held to the model's own
maximum as the loader holds the caller's, and the built-in stages that already ran check the
config again (:meth:`Stage.check`: the scheduler's limits, vLLM's checks after its hooks, the hybrid
page alignment), because vLLM checks each value once, after the step that sets it, and a
plugin's value comes after that step.  The first refusal fails the run, naming the plugin's
stage and the field.  Stages that run later check the plugin's values themselves.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from enginecfg.pipeline.errors import EngineCfgError
from enginecfg.pipeline.engine_args import config_value_error

__all__ = ["check_plugin_changes"]

_MAX_LEN = "model_config.max_model_len"


def _who(stage: Any) -> str:
    return f"stage {stage.name!r} ({stage.origin})"


def check_plugin_changes(cfg: Any, stage: Any, changes: Sequence[Any], earlier: Sequence[Any],
                         arguments: Any = None) -> None:
    """Refuse the changes *stage* (a plugin's) made, given as the run's change records, where
    the caller's value would be refused; *earlier*: the stages that ran before it; *arguments*:
    the release's engine-argument table (None: the first release's)."""
    mine = [c for c in changes if c.stage == stage.name]
    if not mine:
        return
    latest = {c.field: c for c in mine}  # a field changed twice: its last value stands
    for field, change in latest.items():
        err = config_value_error(field, _current(cfg, field, change.new), arguments)
        if err is not None:
            _raise_for(err, stage, field, change.new)
    if _MAX_LEN in latest:
        _check_max_len(cfg, stage)
    for earlier_stage in earlier:
        if earlier_stage.origin != "built-in":  # vLLM's checks are the built-ins'
            continue
        try:
            earlier_stage.check(cfg)
        except EngineCfgError as exc:
            _raise_for(exc, stage, ", ".join(latest), None, check=earlier_stage.name)


def _current(cfg: Any, field: str, recorded: Any) -> Any:
    """The field's value as the config holds it now (the record keeps JSON data)."""
    section, _, name = field.partition(".")
    sec = getattr(cfg, section, None)
    if sec is None or not name or "." in name or not hasattr(sec, name):
        return recorded
    return getattr(sec, name)


def _raise_for(err: EngineCfgError, stage: Any, field: str, value: Any, *, check: str | None = None) -> None:
    """*err* as the refusal of *stage*'s change: its type and words kept, the stage and the
    field it set named before them."""
    if check is None:
        where = f"{_who(stage)} set {field} to {value!r}"
    else:
        where = f"{_who(stage)} changed {field}, which the checks of stage {check!r} refuse"
    err.message = f"{where}: {err.message}"
    err.args = (err.message,)
    err.stage = stage.name
    raise err


def _check_max_len(cfg: Any, stage: Any) -> None:
    """A max_model_len over the model's own maximum, refused in vLLM's words as the caller's
    ``--max-model-len`` is while the model config is built (unless
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set)."""
    from enginecfg.pipeline.models import derive

    mc = cfg.model_config
    value = mc.max_model_len
    if mc.hf_text_config is None or not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return
    allow = os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")
    from enginecfg.pipeline.hf import typed

    text = mc.hf_text_config
    window = (typed.attr(text, "sliding_window", typed.ANY)
              if mc.disable_sliding_window and _has(text, "sliding_window") else None)
    try:
        derive.max_model_len(text, value, [], allow_long=allow, sliding_window=window)
    except EngineCfgError as exc:
        _raise_for(exc, stage, _MAX_LEN, value)


def _has(view: Any, name: str) -> bool:
    from enginecfg.pipeline.hf import typed

    return typed.has(view, name) and typed.attr(view, name, typed.ANY) is not None
