"""The stage contract and the context a stage works through.

A stage is one verification step: a pure decision over the config.  It states where it
belongs (``after`` / ``before`` other stage names), whether it applies to a config, and
makes its changes through :class:`StageContext` so that each carries its reason::

    class CapContext(Stage):
        name = "site-max-len"
        after = ("pooling",)
        def applies(self, cfg):
            return cfg.model_config.max_model_len > 32768
        def run(self, cfg, ctx):
            ctx.set("model_config", "max_model_len", 32768, reason="site policy: 32k context")

Changes made behind the context's back (plain assignment, in-place edits of lists and
dicts, writes to ``hf_config``) are still found by the pipeline's snapshot diff and recorded
against the stage that made them.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.hf import HFConfigView, typed
from enginecfg.pipeline.jsonvalue import to_json

if TYPE_CHECKING:
    from enginecfg.pipeline.config import EngineConfig

__all__ = ["Stage", "StageContext", "LEVELS", "MAX_TEXT", "capped"]

LEVELS = ("INFO", "WARNING")

#: the longest reason, explanation or message a stage's change or log line keeps, in
#: characters.  vLLM's reasons are log lines, and the built-in reasons, explanations and
#: messages stay under 600 characters on every fixture config under both releases; a
#: plugin's text beyond this is cut, and says so, so that the run document, the audit
#: record and every listing stay of a readable size.
MAX_TEXT = 10_000


def capped(text: str, limit: int = MAX_TEXT) -> str:
    """*text* cut to *limit* characters, the cut said at its end (the length it had)."""
    if not isinstance(text, str) or len(text) <= limit:
        return text
    note = f" [... cut: {len(text):,} characters, the first {limit:,} kept]"
    return text[:limit] + note


class Stage:
    """Base class of every verification step, built-in or from a plugin.

    Subclasses set ``name`` (unique, kebab-case), optionally ``after`` / ``before`` (names of
    stages this one must run after / before; unknown names are an error) and implement
    :meth:`run`; :meth:`applies` defaults to always. ``facts`` names the facts the stage
    records with :meth:`StageContext.record`: each is a key of the run document (``None``
    when the stage did not record it), so the document's shape does not depend on the config.
    """

    name: ClassVar[str] = ""
    after: ClassVar[tuple[str, ...]] = ()
    before: ClassVar[tuple[str, ...]] = ()
    facts: ClassVar[tuple[str, ...]] = ()
    #: where the stage sits in vLLM's own sequence: ``"model"`` (part of building the model
    #: config: the model-level hook, the engine defaults), ``"configs"`` (the cache and
    #: scheduler configs built from the arguments), ``"engine"`` (the vllm-level hooks; the
    #: default), ``"post"`` (the checks after them) or ``"final"`` (after every check of
    #: vLLM's: enginecfg's own).  Engine-argument errors are reported at the step where vLLM
    #: checks them (:mod:`enginecfg.pipeline.arg_order`).
    vllm_step: ClassVar[str] = "engine"
    #: the vLLM releases the stage speaks for (``("0.19.0",)``); None: every release.  A
    #: pipeline of another release leaves the stage out (a plugin written for one release's
    #: rules does not run on another's).
    releases: ClassVar[tuple[str, ...] | None] = None

    def configure(self, pipeline: Any) -> None:
        """Called once when a :class:`~enginecfg.Pipeline` holding the stage is built; does
        nothing unless overridden.

        A stage that takes options reads them here with ``pipeline.options_for(self.name)``:
        ``Pipeline(gpu_validation="off")`` hands ``"off"`` to the ``gpu-validation`` stage (an
        option's keyword is the stage name with ``_`` for ``-``). Validate the option here,
        raising :class:`~enginecfg.InvalidInputError`, so a bad one fails at construction.
        """
    @property
    def origin(self) -> str:
        """Where the stage comes from: ``built-in``, ``<distribution> <version>`` for an
        entry-point plugin (set by discovery), else ``local <module>`` for a stage class
        handed to ``Pipeline(stages=...)`` directly, so the record never calls it ours."""
        given = self.__dict__.get("_origin")
        if given:
            return given
        cls = type(self)
        found = _ORIGINS.get(cls)
        return found if found is not None else _class_origin(cls)

    @origin.setter
    def origin(self, value: str) -> None:
        self.__dict__["_origin"] = value

    def applies_to(self, release: str) -> bool:
        """Whether the stage runs in a pipeline of vLLM *release* (see :attr:`releases`)."""
        releases = self.releases
        if releases is None:
            return True
        if isinstance(releases, str):
            return releases == release
        return release in releases

    def applies(self, cfg: "EngineConfig") -> bool:
        return True

    def run(self, cfg: "EngineConfig", ctx: "StageContext") -> None:
        raise NotImplementedError

    def check(self, cfg: "EngineConfig") -> None:
        """Refuse *cfg* where it breaks a rule this stage's :meth:`run` refuses (raise the same
        error); change nothing.  Does nothing unless overridden.

        The pipeline calls it on the built-in stages that already ran after a plugin's stage
        changed the config, so that a value a plugin sets meets the checks a value the caller gives
        meets (:mod:`enginecfg.pipeline.plugin_checks`)."""

    def __repr__(self) -> str:
        return f"<Stage {self.name} ({self.origin})>"


def _not_json(value: Any, where: str = "it") -> str | None:
    """Why *value* is not JSON data (None when it is), naming where in it."""
    todo = [(where, value, 0)]
    while todo:
        path, item, depth = todo.pop()
        if depth > 100:
            return f"{path} is nested more than 100 levels deep (or contains itself)"
        if item is None or isinstance(item, (str, bool, int, float)):
            continue
        if isinstance(item, dict):
            for key, sub in item.items():
                if not isinstance(key, str):
                    return f"{path} has a key {key!r} of type {type(key).__name__}, not text"
                todo.append((f"{path}[{key!r}]", sub, depth + 1))
        elif isinstance(item, (list, tuple)):
            todo.extend((f"{path}[{i}]", sub, depth + 1) for i, sub in enumerate(item))
        elif callable(getattr(type(item), "to_dict", None)):
            try:
                todo.append((f"{path}.to_dict()", item.to_dict(), depth + 1))
            except Exception as exc:  # noqa: BLE001 - the plugin's object, reported
                return f"{path}.to_dict() raised {type(exc).__name__}"
        else:
            return f"{path} is of type {type(item).__name__}, not JSON data"
    return None


@functools.cache
def _sections() -> "dict[str, type]":
    """The config's sections by name (imported on first use: the config module is above this one)."""
    from enginecfg.pipeline.config import SECTIONS

    return SECTIONS


#: the origin of a stage class's instances that discovery named none for, by class
_ORIGINS: dict[type, str] = {}


def _class_origin(cls: type) -> str:
    """The origin of a stage of class *cls* that discovery named none for, kept per class (a
    class's module is fixed once it is defined)."""
    module = cls.__module__
    found = _ORIGINS[cls] = "built-in" if module.startswith("enginecfg.") else f"local {module}"
    return found


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(attrs.fields_dict(cls))


class StageContext:
    """What a running stage may do: change a field with a reason, log, read the caller's input.

    The pipeline creates one per stage execution.  ``set`` validates and applies the value
    immediately (a bad value raises :class:`InvalidInputError`), and records the change.
    """

    def __init__(self, run: Any, stage: Stage, cfg: "EngineConfig"):
        self._run = run
        self._stage = stage
        self._cfg = cfg
        self.set_fields: dict[str, Any] = {}

    @property
    def stage(self) -> str:
        return self._stage.name

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def release(self) -> Any:
        """The vLLM release the run speaks for (a :class:`~enginecfg.pipeline.releases.Release`;
        None for a pack registered without one)."""
        return self._run.release

    def set(self, section: str, field: str, value: Any, *, reason: str, level: str = "INFO",
            log: bool = False, explanation: str | None = None) -> bool:
        """Set ``section.field`` to *value* because of *reason*; returns whether it changed.

        ``section`` is a config section (``"cache_config"``) or ``"hf_config"``, where *field*
        may be a dotted path into a sub-config (``"llm_config.is_causal"``).  Setting a field
        to the value it already has records no change.  ``log=True`` also issues *reason* as a
        message at *level* (for changes that vLLM announces with a log line).  *explanation*
        says, in words, the rule and the numbers that gave *value* (where *reason* is vLLM's
        terse log line); it is stored with the change and shown by ``why`` and ``show``.
        """
        if level not in LEVELS:
            raise InvalidInputError.for_value("level", level, ", ".join(LEVELS))
        reason, explanation = capped(reason), capped(explanation)
        path = f"{section}.{field}"
        if section == "hf_config":
            old = self.get(section, field)
            target, leaf = self._hf_target(field)
            setattr(target, leaf, value)
        else:
            sec = self._section(section)
            old = getattr(sec, field)
            if field.startswith("_") or field not in _field_names(type(sec)):
                raise InvalidInputError(f"{path} is not a config field", field=path)
            setattr(sec, field, value)
        changed = not (old == value and type(old) is type(value))
        if changed:
            self.set_fields[path] = to_json(value)
            self._run.record_change(self._stage, path, old, value, reason, level, via="context",
                                   explanation=explanation)
        if log:
            self._run.record_message(self._stage, level, reason)
        return changed

    def get(self, section: str, field: str) -> Any:
        if section == "hf_config":
            target, leaf = self._hf_target(field)
            return typed.attr(target, leaf, typed.ANY)  # as it stands: the stage checks it
        return getattr(self._section(section), field)

    def warn(self, message: str, *, level: str = "WARNING") -> None:
        """Log a message without a change (``level`` "INFO" or "WARNING")."""
        if level not in LEVELS:
            raise InvalidInputError.for_value("level", level, ", ".join(LEVELS))
        self._run.record_message(self._stage, level, capped(message))

    def info(self, message: str) -> None:
        self.warn(message, level="INFO")

    def original(self, section: str, field: str) -> Any:
        """The value the caller gave (before any stage of this run changed it)."""
        return self._run.original(f"{section}.{field}")

    def validation_checked(self, **fields: Any) -> None:
        """Publish one GPU-validation check (see :class:`enginecfg.pipeline.events.ValidationChecked`)."""
        self._run.record_check(self._stage, fields)

    def record(self, name: str, value: Any) -> None:
        """Publish a derived fact of this run (e.g. ``"pages"``) into the run document.

        The value is JSON data (dicts with text keys, lists, text, numbers, true/false, null)
        or a value object whose ``to_dict()`` is; anything else (an ``object()``, a set, a
        socket) is refused with :class:`InvalidInputError` naming the fact, since the
        document and the audit record could only keep its ``repr``."""
        if self._stage.origin != "built-in":  # the built-ins' facts are value objects
            problem = _not_json(value)
            if problem is not None:
                raise InvalidInputError(
                    f"invalid fact {name!r} of stage {self._stage.name!r} ({self._stage.origin}): "
                    f"{problem}; allowed: JSON data (dicts with text keys, lists, text, numbers, "
                    "true, false, null) or a value object whose to_dict() gives it",
                    field=f"facts.{name}", stage=self._stage.name)
        self._run.facts[name] = value

    def opening_state(self) -> Any:
        """The config's state as this stage found it (a
        :class:`~enginecfg.pipeline.config.ConfigState`, the one the pipeline took after the stage
        before; read it, never change it): a built-in stage that keys a memo on the config's
        content before changing anything reads it instead of taking another."""
        return self._run.last_state

    @property
    def changes(self) -> tuple:
        """The changes the earlier stages of this run made, in order (``Change`` records with
        their reasons and explanations)."""
        return tuple(self._run.changes)

    def fact(self, name: str) -> Any:
        """The fact *name* an earlier stage of this run recorded (None when none did): a
        later step builds on an earlier one's decision (the start-up step's backends, say)."""
        return self._run.facts.get(name)

    # -- helpers ---------------------------------------------------------------------------
    def _section(self, section: str) -> Any:
        sections = _sections()
        if section not in sections:
            raise InvalidInputError.for_value("section", section, ", ".join(list(sections) + ["hf_config"]))
        sec = getattr(self._cfg, section)
        if sec is None:
            raise InvalidInputError(f"{section} is not set on this config", field=section)
        return sec

    def _hf_target(self, dotted: str) -> tuple[HFConfigView, str]:
        view = self._cfg.model_config.hf_config
        *parents, leaf = dotted.split(".")
        for p in parents:
            view = typed.attr(view, p, typed.ANY, required=True, expect="a sub-config")
            if not isinstance(view, HFConfigView):
                raise InvalidInputError(f"hf_config.{dotted}: {p} is not a sub-config", field=f"hf_config.{dotted}")
        return view, leaf
