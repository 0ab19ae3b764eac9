"""A kit for testing stages and listeners: capture the events of a run, run one stage as the
pipeline would, publish synthetic runs.

For plugin authors::

    from enginecfg.testing import capture_events, run_stage

    result = run_stage(MyStage(), "path/to/model", enable_prefix_caching=True)
    [c.reason for c in result.changes_for("model_config.max_model_len")]

    with capture_events() as got:
        Pipeline().run(cfg)
    got["config_changed"]            # the payloads, in the order they were published

For listeners (an audit sink, a metrics exporter), :func:`emit_run` publishes a complete,
well-formed run on the bus without loading a model, and :func:`write_runs` records many into
an audit database (a ``multiprocessing`` target).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from enginecfg._synthetic import base_config, emit_run, write_runs
from enginecfg.pipeline import events
from enginecfg.pipeline.document import RunResult
from enginecfg.pipeline.loading import EngineConfig
from enginecfg.pipeline.ordering import order_stages
from enginecfg.pipeline.plugins import builtin_stages
from enginecfg.pipeline.run import Pipeline
from enginecfg.pipeline.stage import Stage

__all__ = ["capture_events", "CapturedEvents", "run_stage", "emit_run", "write_runs", "base_config"]


class CapturedEvents(dict):
    """``{signal name: [payload, ...]}``, plus ``order``: the signal names in publication order."""

    def __init__(self, names: Any):
        super().__init__((name, []) for name in names)
        self.order: list[str] = []


@contextlib.contextmanager
def capture_events(*signals: Any) -> Iterator[CapturedEvents]:
    """Collect the payloads of *signals* (default: every signal of the bus) during a block;
    receivers are held strongly and removed on exit."""
    chosen = signals or events.ALL_SIGNALS
    got = CapturedEvents(sig.name for sig in chosen)
    receivers = []
    for sig in chosen:
        def receive(sender: Any, event: Any = None, _name: str = sig.name, **_: Any) -> None:
            got[_name].append(event)
            got.order.append(_name)
        sig.connect(receive, weak=False)
        receivers.append((sig, receive))
    try:
        yield got
    finally:
        for sig, receive in receivers:
            sig.disconnect(receive)


def run_stage(stage: Stage | type[Stage], config: Any, *, gpu_validation: str = "off",
              vllm_version: str | None = None, gpu: Any = None, **engine_args: Any) -> RunResult:
    """Run *stage* as the pipeline would: after every built-in stage it is ordered after,
    with the stages ordered after it left out.

    *config* is an :class:`~enginecfg.EngineConfig` or a model path (then *engine_args* are
    the engine arguments it is loaded with, by the release's loader). A built-in stage is
    taken from the built-ins of *vllm_version* (default: the default release); any other is
    added to them. *gpu* is the GPU the engine starts on. GPU validation is off unless asked
    for.
    """
    from enginecfg.pipeline import rulepacks

    stage = stage() if isinstance(stage, type) else stage
    release = rulepacks.get(vllm_version).release
    cfg = config if isinstance(config, EngineConfig) else rulepacks.get(release).load(
        config, engine_args, defer_argument_errors=True)  # as from_pretrained: errors at vLLM's step
    builtins = builtin_stages(release)
    same = [st for st in builtins if st.name == stage.name]
    if same:  # a built-in (or a stand-in for one) takes its place in the release's order
        stage.after, stage.before = same[0].after, same[0].before
    stages = [st for st in builtins if st.name != stage.name] + [stage]
    ordered = order_stages(stages)
    upto = [st.name for st in ordered[: ordered.index(stage) + 1]]
    return Pipeline(stages=stages, only=upto, gpu_validation=gpu_validation, vllm_version=release,
                    gpu=gpu).run(cfg)
