"""The pipeline: order the stages, run those that apply, record everything, freeze.

``Pipeline().run(cfg)`` publishes every step on the signal bus (:mod:`.events`), diffs the
config between stages so that no mutation escapes the record, and freezes the config before
returning a :class:`RunResult`.  A stage that raises fails the run: enginecfg's own errors
pass through unchanged, anything else becomes a :class:`StageError` naming the stage and
where it comes from; either way ``run_failed`` is published before the error propagates.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time
from typing import Any, Iterable, Sequence

import attrs

from enginecfg.pipeline import events
from enginecfg.pipeline.arg_order import ENGINE, FINAL, STEP_ORDER
from enginecfg.pipeline.config import BaseEngineConfig, ConfigState
from enginecfg.pipeline.document import Change, Message, RunResult, document
from enginecfg.pipeline.engine_args import ENGINE_ARGS, check_names
from enginecfg.pipeline.errors import (
    EngineCfgError, InvalidInputError, RunInterruptedError, StageError, StageTimeoutError,
)
from enginecfg.pipeline.jsonvalue import fingerprint, to_json
from enginecfg.pipeline.models.gpus import DEFAULT_GPU, Gpu, find_gpu
from enginecfg.pipeline.ordering import order_stages
from enginecfg.pipeline.plugins import discover_stages
from enginecfg.pipeline import releases, rulepacks
from enginecfg.pipeline.releases import RELEASE_ENV
from enginecfg.pipeline.stage import Stage, StageContext, capped
from enginecfg.pipeline.suggest import did_you_mean
from enginecfg.pipeline.timelimit import TimedOut, call_with_limit, stage_output
from enginecfg.pipeline.timelimit import stage_timeout as _stage_timeout
from enginecfg.pipeline.plugin_checks import check_plugin_changes

__all__ = ["Pipeline", "RELEASE_ENV", "release_from_env"]

def _release(vllm_version: str | None) -> str | None:
    """The release asked for: the argument, else ``$ENGINECFG_VLLM_VERSION`` (empty: unset),
    else None (the default release)."""
    if vllm_version is not None:
        return vllm_version
    return release_from_env()


def release_from_env() -> str | None:
    """``$ENGINECFG_VLLM_VERSION`` (None: unset or empty); a release not spoken for is
    refused, naming the variable and the releases there are (:func:`releases.from_env`)."""
    release = releases.from_env()
    return None if release is None else release.name


#: the generator of run ids: this process's own, seeded from the operating system (so a
#: program's random.seed() never makes two processes' ids alike), seeded again in a forked child
_IDS = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_IDS.seed)


def new_run_id() -> str:
    """A new run id: a random (version 4) UUID in hex, as ``uuid.uuid4().hex`` writes one."""
    n = _IDS.getrandbits(128)
    n = (n & ~(0xF000 << 64) | (4 << 76)) & ~(0xC000 << 48) | (0x8000 << 48)
    return f"{n:032x}"


def _gpu(gpu: "Gpu | str | None") -> Gpu:
    if gpu is None:
        return DEFAULT_GPU
    if isinstance(gpu, Gpu):
        return gpu
    return find_gpu(gpu)


class _Run:
    """Bookkeeping of one run; the StageContext reports to it."""

    def __init__(self, run_id: str, cfg: BaseEngineConfig, release: "releases.Release | None" = None):
        self.run_id = run_id
        self.release = release
        self.cfg = cfg
        self.changes: list[Change] = []
        self.messages: list[Message] = [Message("loading", lvl, msg) for lvl, msg in cfg.load_messages]
        self.facts: dict[str, Any] = {}
        self.initial = cfg.state()
        self.last_state = self.initial
        #: the run is over for a stage abandoned past its time limit: what it does later is
        #: not recorded
        self.closed = False

    def original(self, dotted: str) -> Any:
        if dotted in self.initial:
            return to_json(self.initial[dotted])
        if dotted.startswith("hf_config."):
            return self.cfg.model_config.hf_config.base_value(dotted[len("hf_config."):])
        raise InvalidInputError(f"{dotted} is not a config field", field=dotted)

    def record_change(self, stage: Stage, field: str, old: Any, new: Any, reason: str, level: str,
                      via: str, explanation: str | None = None) -> None:
        if self.closed:
            return
        change = Change(len(self.changes) + 1, stage.name, field, to_json(old), to_json(new),
                        reason, level, via, explanation)
        self.changes.append(change)
        if events.config_changed.receivers:
            events.config_changed.send(self.run_id, event=events.ConfigChanged(
                run_id=self.run_id, seq=change.seq, stage=change.stage, field=field, old=to_json(old),
                new=to_json(new), reason=reason, level=level, via=via, explanation=explanation))

    def record_message(self, stage: Stage, level: str, message: str) -> None:
        if self.closed:
            return
        self.messages.append(Message(stage.name, level, message))
        if events.warning_issued.receivers:
            events.warning_issued.send(self.run_id, event=events.WarningIssued(
                run_id=self.run_id, seq=len(self.messages), stage=stage.name, level=level, message=message))

    def record_check(self, stage: Stage, fields: dict[str, Any]) -> None:
        if self.closed:
            return
        events.validation_checked.send(self.run_id, event=events.ValidationChecked(
            run_id=self.run_id, **{k: to_json(v) for k, v in fields.items()}))

    def sweep(self, stage: Stage, before: dict[str, Any], ctx: StageContext, *,
              full: bool = False) -> int:
        """Record every change the stage made that its context did not report.  ``full``:
        read every field again, not only those of sections assigned to (a plugin's stage may
        change a field past the section's assignment hook)."""
        known = before if isinstance(before, ConfigState) and not full else None
        after = self.cfg.state(since=known) if not full else None
        if after is before or (full and isinstance(before, ConfigState)
                               and self.cfg.keep_state(before, full=True)):
            # a state taken now would be *before* again, field for field: nothing to record
            self.last_state = before
            return 0
        if after is None:
            after = self.cfg.state(since=None)
        self.last_state = after
        found = 0
        hf = self.cfg.model_config.hf_config
        if after.reread is not None:
            # only what was read again can differ: fields of sections assigned to since
            # *before*, containers (edited in place) and hf_config writes
            keys = after.reread + list(dict.fromkeys(known.hf_keys + after.hf_keys))
        else:
            keys = after.keys() | before.keys()
        for key in keys:
            new = after.get(key)
            if key in before:
                old = before[key]
            elif key.startswith("hf_config."):
                old = hf.base_value(key[len("hf_config."):]) if hf is not None else None
            else:
                old = None
            if old == new and type(old) is type(new):
                continue
            if key in ctx.set_fields and ctx.set_fields[key] == new:
                continue
            found += 1
            self.record_change(stage, key, old, new,
                               reason=f"changed by stage {stage.name!r} outside the stage context",
                               level="INFO", via="direct")
        return found


class Pipeline:
    """An ordered set of stages.

    It runs the rules of a vLLM release (:mod:`enginecfg.pipeline.rulepacks`): that
    release's built-in stages, and its loader for :meth:`resolve`.  ``vllm_version``: the
    release (default: ``$ENGINECFG_VLLM_VERSION``, else the default release, 0.19.0).
    ``gpu``: the GPU the engine starts on (a preset name of
    :mod:`enginecfg.pipeline.models.gpus` or a :class:`~enginecfg.pipeline.models.gpus.Gpu`;
    default the card the ``impact`` option names, else the H200): the start-up step picks
    attention backends by its compute capability, and the KV-cache figures use its memory.
    Both are recorded in the run document.  ``stages``: replace the stage set (default: the
    release's built-ins plus the installed plugins, see :mod:`enginecfg.pipeline.plugins`);
    a stage that says it speaks for other releases (``Stage.releases``) is left out either
    way.  ``disable``: stage names to leave out.  ``only``: run just these (plus nothing
    else).  ``plugins``: the plugin policy (see
    :func:`~enginecfg.pipeline.plugins.plugin_policy`).  Any other keyword is an option of the
    stage of that name, ``-`` spelt ``_`` (``gpu_validation="off"`` for the ``gpu-validation``
    stage), handed over by :meth:`options_for` in :meth:`Stage.configure`.

    ``stage_timeout``: the seconds a plugin's stage may take (default
    ``$ENGINECFG_STAGE_TIMEOUT``, else 10; see :mod:`.timelimit`): one that takes longer fails
    the run with :class:`StageTimeoutError`.  What a plugin's stage changes is checked as the
    same values given by the caller are (:mod:`.plugin_checks`).
    """

    def __init__(self, stages: Iterable[Stage] | None = None, *, vllm_version: str | None = None,
                 gpu: "Gpu | str | None" = None, disable: Iterable[str] = (),
                 only: Iterable[str] | None = None, plugins: str | None = None,
                 stage_timeout: float | str | None = None, **stage_options: Any):
        #: the rules of the release this pipeline speaks for
        self.rules = rulepacks.get(_release(vllm_version))
        #: seconds a plugin's stage may take before the run is refused
        self.stage_timeout = _stage_timeout(stage_timeout)
        if gpu is None:  # the card the ``impact`` option names, if it names one: one GPU per run
            named = stage_options.get("impact")
            gpu = named.get("gpu") if isinstance(named, dict) else getattr(named, "gpu", None)
        #: the GPU the engine starts on (its compute capability picks the attention backends)
        self.gpu = _gpu(gpu)
        if stages is None:
            stages = discover_stages(plugins, release=self.rules.release)
        stages = [st() if isinstance(st, type) else st for st in stages]
        for st in stages:
            if not isinstance(st, Stage):
                raise InvalidInputError(f"{st!r} is not an enginecfg.Stage", field="stages")
        stages = [st for st in stages if st.applies_to(self.rules.release)]
        ordered = order_stages(stages)
        names = {st.name for st in ordered}
        by_keyword = {st.name.replace("-", "_"): st.name for st in ordered}
        self._options: dict[str, Any] = {}
        for keyword, value in stage_options.items():
            if keyword not in by_keyword:
                raise InvalidInputError.for_value(
                    "Pipeline option", keyword, "disable, only, plugins, stages, stage_timeout, or a stage "
                    "name with '_' for '-': " + ", ".join(sorted(by_keyword)))
            self._options[by_keyword[keyword]] = value
        disable = set(disable)
        only_set = set(only) if only is not None else None
        for name in sorted(disable | (only_set or set())):
            if name not in names:
                raise InvalidInputError(
                    f"invalid stage: got {name!r}{did_you_mean(name, names)}; allowed: "
                    + ", ".join(st.name for st in ordered), field="stage")
        self.stages: list[Stage] = [
            st for st in ordered
            if st.name not in disable and (only_set is None or st.name in only_set)
        ]
        #: the facts the run document carries: those every known stage declares, in stage order
        self.fact_names: tuple[str, ...] = tuple(dict.fromkeys(f for st in ordered for f in st.facts))
        for st in self.stages:  # only those that will run: configuring may cost (GPU prefetch)
            st.configure(self)

    def options_for(self, stage_name: str) -> Any:
        """The option the caller gave for the stage *stage_name* (None if none was given)."""
        return self._options.get(stage_name)

    @property
    def stage_names(self) -> list[str]:
        return [st.name for st in self.stages]

    @property
    def vllm_version(self) -> str:
        """The vLLM release whose rules this pipeline runs."""
        return self.rules.release

    @property
    def release(self) -> releases.Release | None:
        """The vLLM release whose rules this pipeline runs, as a value (what it decides where);
        None for a rule pack registered under a name that is no release (its stages are
        handed None, as a run's context is)."""
        rules = self.rules
        known = self.__dict__.get("_release_for")
        if known is not None and known[0] is rules:  # worked out once for these rules
            return known[1]
        value = releases.get(rules.release) if releases.known(rules.release) else None
        self._release_for = (rules, value)
        return value

    # -- running ---------------------------------------------------------------------------
    def run(self, cfg: BaseEngineConfig, *, run_id: str | None = None) -> RunResult:
        """Verify and correct *cfg* through every stage that applies, then freeze it."""
        if not isinstance(cfg, BaseEngineConfig):
            raise InvalidInputError(f"Pipeline.run needs an EngineConfig, got {type(cfg).__name__}",
                                    field="cfg")
        if cfg.frozen:
            raise InvalidInputError("this config was already resolved and frozen; load it again to rerun",
                                    field="cfg")
        run = _Run(run_id or new_run_id(), cfg, self.release)
        if events.run_started.receivers:  # documents are built only for someone who listens
            input_doc = to_json(cfg.to_config_dict())
            events.run_started.send(run.run_id, event=events.RunStarted(
                run_id=run.run_id, started_at=time.time(), model=cfg.model,
                architecture=cfg.model_config.architecture, engine_args=to_json(cfg.engine_args),
                input_config=input_doc, input_fingerprint=fingerprint(input_doc),
                stages=tuple(self.stage_names), source=to_json(cfg.source),
                vllm_version=self.vllm_version, gpu=self.gpu.to_dict(),
                origins=tuple(st.origin for st in self.stages)))
        if events.warning_issued.receivers:  # built only for someone who listens
            for seq, (lvl, msg) in enumerate(cfg.load_messages, 1):
                events.warning_issued.send(run.run_id, event=events.WarningIssued(
                    run_id=run.run_id, seq=seq, stage="loading", level=lvl, message=msg))
        pending = list(cfg.pending_errors)
        for order, stage in enumerate(self.stages):
            if pending:  # (an engine-argument error waits for its step)
                self._raise_pending(run, pending, getattr(stage, "vllm_step", ENGINE))
            self._run_stage(run, order, stage)
        self._raise_pending(run, pending, None)
        cfg.freeze()
        result = RunResult(run.run_id, "resolved", cfg, run.changes, run.messages, run.facts, self.stage_names,
                           fact_names=self.fact_names, vllm_version=self.vllm_version, gpu=self.gpu.to_dict())
        if events.run_finished.receivers:
            events.run_finished.send(run.run_id, event=events.RunFinished(
                run_id=run.run_id, finished_at=time.time(), status="resolved", document=result.to_dict(),
                fingerprint=result.fingerprint))
        return result

    def _raise_pending(self, run: _Run, pending: list, step: str | None) -> None:
        """Raise the first engine-argument error vLLM reports before a stage of ``step``
        (None: the end of the run), as a failed run of the pseudo-stage ``engine-args``.

        enginecfg's own refusals (:data:`~.arg_order.FINAL`) come after every step of vLLM's,
        and say what vLLM made of the value they refuse (the run's changes show how)."""
        if not pending or (step is not None and step not in STEP_ORDER):
            return
        reached = len(STEP_ORDER) - 1 if step is None else STEP_ORDER.index(step)
        phase, exc = pending[0]
        if STEP_ORDER.index(phase) > reached:
            return
        if exc.stage is None:
            exc.stage = "engine-args"
        if phase == FINAL:
            self._say_what_vllm_made(run.cfg, exc, run.release)
        self._publish_failure(run.run_id, exc, run.cfg, run.changes, run.messages, run.facts)
        raise exc

    @staticmethod
    def _say_what_vllm_made(cfg: BaseEngineConfig, exc: EngineCfgError,
                            release: "releases.Release | None" = None) -> None:
        """Add to the refusal of a value vLLM (*release*; None: the first spoken for) accepts what
        its config holds after vLLM's steps."""
        arg = ENGINE_ARGS.get(exc.field or "")
        given = cfg.engine_args.get(exc.field or "")
        if arg is None or not isinstance(given, int) or isinstance(given, bool) or not arg.config_field:
            return  # a value of the wrong type was never taken into the config
        now = cfg.state().get(arg.config_field)
        exc.message = (f"{exc.message} (vLLM {release or releases.first()} accepts it while it builds its config, "
                       f"which ends with "
                       f"{arg.config_field} = {now}; enginecfg refuses it after every check of vLLM's)")

    def _run_stage(self, run: _Run, order: int, stage: Stage) -> None:
        t0 = time.perf_counter()
        cfg = run.cfg
        # the snapshot comes before applies(): a mutation made there is the stage's too.
        # Nothing changes the config between stages, so the previous stage's closing
        # snapshot is this one's opening snapshot.
        before = run.last_state
        n_before = len(run.changes)
        # a plugin's stage: what it prints goes to stderr (stdout carries the report or the
        # run document), and the config is read whole after it (a change made past the
        # config's own assignment, object.__setattr__, is still the plugin's)
        plugin = stage.origin != "built-in"
        try:
            if plugin:
                with _output_to_stderr(plugin):
                    applies = bool(self._bounded(plugin, stage, lambda: stage.applies(cfg)))
            else:  # a built-in runs as it is, in this thread
                applies = bool(stage.applies(cfg))
        except TimedOut:
            self._timed_out(run, order, stage, t0, (before, StageContext(run, stage, cfg), plugin),
                            "deciding whether it applies")
        except EngineCfgError as exc:
            self._fail(run, order, stage, exc, t0, (before, StageContext(run, stage, cfg), plugin))
        except (Exception, SystemExit) as exc:
            self._fail(run, order, stage, self._wrap(stage, exc, "deciding whether it applies"), t0,
                       (before, StageContext(run, stage, cfg), plugin))
        except BaseException as exc:  # KeyboardInterrupt: recorded, then raised on
            self._interrupted(run, order, stage, exc, t0, (before, StageContext(run, stage, cfg), plugin))
        if not applies:
            # a built-in stage's applies() only reads the config (tests/test_change_tracking.py
            # holds every one of every release to it): there is nothing to look for; what a
            # plugin's does is checked as anything else it does
            n = run.sweep(stage, before, StageContext(run, stage, cfg), full=True) if plugin else 0
            if plugin:  # a change made while deciding is checked as any other of the plugin's
                self._check_plugin(run, order, stage, n_before, t0)
            if events.stage_finished.receivers:
                events.stage_finished.send(run.run_id, event=events.StageFinished(
                    run_id=run.run_id, stage=stage.name, order=order, outcome="skipped",
                    duration_s=time.perf_counter() - t0, changes=n, origin=stage.origin))
            return
        ctx = StageContext(run, stage, cfg)
        if events.stage_started.receivers:
            events.stage_started.send(run.run_id, event=events.StageStarted(
                run_id=run.run_id, stage=stage.name, order=order, origin=stage.origin))
        try:
            if plugin:
                with _output_to_stderr(plugin):
                    self._bounded(plugin, stage, lambda: stage.run(cfg, ctx))
            else:
                stage.run(cfg, ctx)
        except TimedOut:
            self._timed_out(run, order, stage, t0, (before, ctx, plugin), "running")
        except EngineCfgError as exc:
            self._fail(run, order, stage, exc, t0, (before, ctx, plugin))
        except (Exception, SystemExit) as exc:
            self._fail(run, order, stage, self._wrap(stage, exc, "running"), t0, (before, ctx, plugin))
        except BaseException as exc:  # KeyboardInterrupt: recorded, then raised on
            self._interrupted(run, order, stage, exc, t0, (before, ctx, plugin))
        run.sweep(stage, before, ctx, full=plugin)
        if plugin:
            self._check_plugin(run, order, stage, n_before, t0)
        n = len(run.changes) - n_before
        if events.stage_finished.receivers:
            events.stage_finished.send(run.run_id, event=events.StageFinished(
                run_id=run.run_id, stage=stage.name, order=order, outcome="changed" if n else "unchanged",
                duration_s=time.perf_counter() - t0, changes=n, origin=stage.origin))

    def _check_plugin(self, run: _Run, order: int, stage: Stage, n_before: int, t0: float) -> None:
        """The changes a plugin's stage made, checked as the caller's values are
        (:mod:`.plugin_checks`); a refusal fails the run at that stage."""
        try:
            check_plugin_changes(run.cfg, stage, run.changes[n_before:], self.stages[:order], self.rules.arguments)
        except EngineCfgError as exc:
            self._fail(run, order, stage, exc, t0, None)

    def _bounded(self, plugin: bool, stage: Stage, call: Any) -> Any:
        """*call* within the stage time limit for a plugin's stage; a built-in runs as it is."""
        if not plugin:
            return call()
        return call_with_limit(call, self.stage_timeout, stage.name)

    def _timed_out(self, run: _Run, order: int, stage: Stage, t0: float,
                   sweep: tuple[dict, StageContext, bool], doing: str) -> None:
        """A plugin's stage ran past the limit: the run fails naming it; its thread is left
        to itself (:mod:`.timelimit`), with the run closed and the config frozen under it."""
        limit = self.stage_timeout
        err = StageTimeoutError(f"stage {stage.name!r} ({stage.origin}) did not finish within the stage time "
                                f"limit of {limit:g} s while {doing} (--stage-timeout, "
                                f"ENGINECFG_STAGE_TIMEOUT); the run was stopped there",
                                stage=stage.name, origin=stage.origin, timeout=limit)
        try:
            self._fail(run, order, stage, err, t0, sweep)
        finally:
            run.closed = True
            run.cfg.freeze()

    @staticmethod
    def _wrap(stage: Stage, exc: Exception, doing: str) -> StageError:
        err = StageError(f"stage {stage.name!r} ({stage.origin}) failed while {doing}: "
                         f"{type(exc).__name__}: {capped(_text_of(exc))}", stage=stage.name,
                         origin=stage.origin)
        err.__cause__ = exc
        return err

    def _interrupted(self, run: _Run, order: int, stage: Stage, exc: BaseException, t0: float,
                     sweep: tuple[dict, StageContext, bool]) -> None:
        """A stage was interrupted (``KeyboardInterrupt``: Ctrl-C, or raised by a plugin): the
        run fails as interrupted, is published (and so recorded), and *exc* goes on up."""
        err = RunInterruptedError(f"the run was interrupted while stage {stage.name!r} "
                                  f"({stage.origin}) ran: {type(exc).__name__}"
                                  + (f": {capped(_text_of(exc))}" if str(exc) else ""),
                                  stage=stage.name)
        try:
            self._fail(run, order, stage, err, t0, sweep)
        except RunInterruptedError:
            pass
        raise exc

    def _fail(self, run: _Run, order: int, stage: Stage, exc: EngineCfgError, t0: float,
              sweep: tuple[dict, StageContext, bool] | None) -> None:
        if exc.stage is None:
            exc.stage = stage.name
        if sweep is not None:
            before, ctx, plugin = sweep
            try:
                run.sweep(stage, before, ctx, full=plugin)
            except Exception:  # the record of a failing stage is best effort
                pass
        events.stage_finished.send(run.run_id, event=events.StageFinished(
            run_id=run.run_id, stage=stage.name, order=order, outcome="failed",
            duration_s=time.perf_counter() - t0, changes=0, error=str(exc), origin=stage.origin))
        self._publish_failure(run.run_id, exc, run.cfg, run.changes, run.messages, run.facts)
        raise exc

    def _publish_failure(self, run_id: str, exc: EngineCfgError, cfg: BaseEngineConfig | None,
                         changes: Sequence[Change] = (), messages: Sequence[Message] = (),
                         facts: dict[str, Any] | None = None, *, model: str | None = None,
                         engine_args: dict | None = None) -> dict[str, Any]:
        doc = document(run_id, exc.status, cfg, changes, messages, facts or {}, self.fact_names, exc,
                       model=model, engine_args=engine_args, vllm_version=self.vllm_version,
                       gpu=self.gpu.to_dict())
        exc.run_id = run_id
        exc.document = doc
        events.run_failed.send(run_id, event=events.RunFailed(
            run_id=run_id, finished_at=time.time(), status=exc.status, error=exc.to_dict(),
            stage=exc.stage, document=doc))
        return doc

    # -- load + run, with load failures recorded as failed runs ---------------------------
    def resolve(self, path: Any, revision: str | None = None, **engine_args: Any) -> RunResult:
        """``EngineConfig.from_pretrained(path, revision, **engine_args)`` then :meth:`run`.

        A config that cannot even be loaded is still a run: ``run_started`` and
        ``run_failed`` are published for it before the error propagates.
        """
        run_id = new_run_id()
        try:
            # engine-argument errors wait for the step where vLLM reports them (arg_order)
            cfg = self.rules.load(path, engine_args, revision, defer_argument_errors=True)
        except EngineCfgError as exc:
            self.record_failed_load(run_id, exc, _failed_model(path), engine_args)
            raise
        return self.run(cfg, run_id=run_id)

    def run_many(self, items: Iterable[Any], *, errors: str = "raise",
                 **engine_args: Any) -> list["RunResult | EngineCfgError"]:
        """Run each item in order: an :class:`EngineConfig` as :meth:`run`, a path as
        :meth:`resolve` (with *engine_args*).

        The transformers snapshots of all paths' configs are obtained in one request before
        the first run.  ``errors="raise"`` raises the first failure (after it was recorded, as
        in :meth:`resolve`); ``errors="return"`` puts the error in that item's place and
        carries on, so that one bad config in a sweep does not hide the others.
        """
        if errors not in ("raise", "return"):
            raise InvalidInputError.for_value("errors", errors, "'raise' or 'return'")
        if isinstance(items, (str, bytes, BaseEngineConfig)) or not hasattr(items, "__iter__"):
            raise InvalidInputError.for_value("items", items, "a list of EngineConfig objects or model paths")
        items = list(items)
        paths = [it for it in items if not isinstance(it, BaseEngineConfig)]
        if engine_args and len(paths) < len(items):
            raise InvalidInputError("run_many: engine arguments apply to paths only; an EngineConfig "
                                    "already carries its own", field="engine_args")
        if paths:
            check_names(engine_args)  # an unknown argument fails before any work
            self.rules.prefetch(paths)
        out: list[RunResult | EngineCfgError] = []
        for item in items:
            try:
                out.append(self.run(item) if isinstance(item, BaseEngineConfig)
                           else self.resolve(item, **engine_args))
            except EngineCfgError as exc:
                if errors == "raise":
                    raise
                out.append(exc)
        return out

    def record_failed_load(self, run_id: str, exc: EngineCfgError, model: str,
                           engine_args: dict[str, Any]) -> dict[str, Any]:
        if exc.stage is None:
            exc.stage = "loading"
        events.run_started.send(run_id, event=events.RunStarted(
            run_id=run_id, started_at=time.time(), model=model, architecture=None,
            engine_args=to_json(engine_args), input_config={}, input_fingerprint=fingerprint({}),
            stages=tuple(self.stage_names), vllm_version=self.vllm_version, gpu=self.gpu.to_dict(),
            origins=tuple(st.origin for st in self.stages)))
        return self._publish_failure(run_id, exc, None, model=model, engine_args=engine_args)


def _output_to_stderr(plugin: bool):
    """What a plugin's stage prints goes to stderr (:func:`.timelimit.stage_output`)."""
    return stage_output() if plugin else contextlib.nullcontext()


def _text_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose text cannot be made
        return repr(type(exc))


def _failed_model(path: Any) -> str:
    """The model of a run whose config did not load, as the record names it: a local path
    made absolute (the name typed means nothing read from another directory), a Hugging
    Face repo id as given."""
    import os

    from enginecfg.pipeline.hf import is_repo_id

    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else str(path)
    if not isinstance(text, str) or (not os.path.exists(text) and "/" in text and is_repo_id(text)):
        return str(text)
    return os.path.abspath(text)
