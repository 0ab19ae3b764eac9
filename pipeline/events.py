"""The signal bus: every thing a run does is published here, and only here.

The audit store, the structlog logger and any plugin listen to these signals; the pipeline
and the stages never call a listener directly.  Payloads are immutable attrs value objects
that hold plain JSON-able data, never a live config object, so a listener can keep them.

Each signal is sent with the run id as *sender* and the payload as the keyword ``event``::

    from enginecfg.pipeline import events

    @events.config_changed.connect
    def on_change(run_id, event):
        print(event.field, event.old, "->", event.new, "because", event.reason)
"""

from __future__ import annotations

from typing import Any

import attrs
from blinker import Namespace

__all__ = [
    "bus",
    "run_started",
    "stage_started",
    "config_changed",
    "warning_issued",
    "stage_finished",
    "validation_checked",
    "run_finished",
    "run_failed",
    "RunStarted",
    "StageStarted",
    "ConfigChanged",
    "WarningIssued",
    "StageFinished",
    "ValidationChecked",
    "RunFinished",
    "RunFailed",
    "ALL_SIGNALS",
]

bus = Namespace()

run_started = bus.signal("run_started", doc="A run began; payload RunStarted.")
stage_started = bus.signal("stage_started", doc="A stage that applies is about to run; StageStarted.")
config_changed = bus.signal("config_changed", doc="A field changed; ConfigChanged.")
warning_issued = bus.signal("warning_issued", doc="A stage logged a message; WarningIssued.")
stage_finished = bus.signal("stage_finished", doc="A stage ended (or was skipped); StageFinished.")
validation_checked = bus.signal("validation_checked", doc="A GPU validation check ran; ValidationChecked.")
run_finished = bus.signal("run_finished", doc="A run resolved and froze its config; RunFinished.")
run_failed = bus.signal("run_failed", doc="A run was rejected or invalid; RunFailed.")

ALL_SIGNALS = (run_started, stage_started, config_changed, warning_issued, stage_finished,
               validation_checked, run_finished, run_failed)

_frozen = attrs.frozen(kw_only=True)


@_frozen
class RunStarted:
    run_id: str
    started_at: float                 # time.time()
    model: str                        # the model path (or "<dict>") as the caller gave it;
                                      # a local path that failed to load: made absolute
    architecture: str | None
    engine_args: dict[str, Any]       # vLLM EngineArgs names, as given
    input_config: dict[str, Any]      # the config document before any stage ran
    input_fingerprint: str
    stages: tuple[str, ...]           # the ordered stage names of this run
    #: where the model's files came from and each file's sha256 (repo id + commit, or the
    #: folder); None for an in-memory config or one that failed to load
    source: dict[str, Any] | None = None
    #: the vLLM release whose rules decide the run, and the GPU it assumes (``Gpu.to_dict()``);
    #: None from an emitter that does not say (a run that never ends is recorded with them)
    vllm_version: str | None = None
    gpu: dict[str, Any] | None = None
    #: each stage's origin, in ``stages``' order ("built-in" or "<distribution> <version>");
    #: None from an emitter that does not say
    origins: tuple[str, ...] | None = None


@_frozen
class StageStarted:
    run_id: str
    stage: str
    order: int                        # position in the run's stage order, from 0
    origin: str                       # "built-in" or "<distribution> <version>"


@_frozen
class ConfigChanged:
    run_id: str
    seq: int                          # 1-based, in the order changes happened in the run
    stage: str
    field: str                        # dotted path, e.g. "cache_config.block_size"
    old: Any
    new: Any
    reason: str
    level: str = "INFO"               # "INFO" | "WARNING"
    via: str = "context"              # "context" (ctx.set) | "direct" (found by snapshot diff)
    explanation: str | None = None    # the rule and numbers behind the new value, in words


@_frozen
class WarningIssued:
    run_id: str
    seq: int                          # 1-based, message order within the run
    stage: str
    level: str                        # "INFO" | "WARNING"
    message: str


@_frozen
class StageFinished:
    run_id: str
    stage: str
    order: int
    outcome: str                      # "changed" | "unchanged" | "skipped" | "failed"
    duration_s: float
    changes: int = 0
    error: str | None = None
    #: "built-in" or "<distribution> <version>", as in StageStarted (a skipped stage has
    #: no StageStarted: its origin comes here; None from an emitter that does not say)
    origin: str | None = None


@_frozen
class ValidationChecked:
    run_id: str
    check: str
    kernel: str
    shapes: dict[str, Any]
    dtype: str
    max_error: float | None
    tolerance: float | None
    passed: bool
    device: str
    seconds: float
    detail: str | None = None


@_frozen
class RunFinished:
    run_id: str
    finished_at: float
    status: str                       # "resolved"
    document: dict[str, Any]          # the whole run document (result.to_dict())
    fingerprint: str


@_frozen
class RunFailed:
    run_id: str
    finished_at: float
    status: str                       # "rejected" | "invalid" | "interrupted"
    error: dict[str, Any]             # {"type", "message", "field"}
    stage: str | None
    document: dict[str, Any]          # the run document as far as it got
