"""structlog output of pipeline events: a listener on the bus, attached on request.

The library never configures logging by itself (an engine embedding it owns its logs);
the CLI attaches this listener with ``--log-format console|json``.  Every line carries the
run id and, where there is one, the stage; times are ISO 8601 in UTC (``timestamp``,
``started_at``, ``finished_at``), as in every other command.
"""

from __future__ import annotations

import sys
from typing import Any

import attrs

from enginecfg.pipeline import events

__all__ = ["attach", "detach", "quiet"]

_receivers: list[Any] = []


def _iso(seconds: float) -> str:
    """Seconds since the epoch as ISO 8601 in UTC, as every other command writes times."""
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat()


def _receiver(name: str, log):
    def receive(sender: Any, event: Any = None, **_: Any) -> None:
        data = attrs.asdict(event) if event is not None else {}
        for key, value in data.items():
            if key.endswith("_at") and isinstance(value, (int, float)) and not isinstance(value, bool):
                data[key] = _iso(value)  # started_at, finished_at: times, not epoch floats
        data.pop("document", None)
        data.pop("input_config", None)
        run_id = data.pop("run_id", sender)
        bound = log.bind(run_id=run_id, stage=data.pop("stage", None))
        level = data.get("level", "INFO")
        (bound.warning if level == "WARNING" or name == "run_failed" else bound.info)(name, **data)
    return receive


def quiet() -> None:
    """No library log lines at all (the CLI's own one-line messages say everything)."""
    import logging

    log = logging.getLogger("enginecfg")
    log.addHandler(logging.NullHandler())
    log.propagate = False


def attach(fmt: str = "console", stream: Any = None) -> None:
    import structlog

    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    log = structlog.wrap_logger(
        structlog.PrintLogger(stream or sys.stderr),
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), renderer])
    detach()
    for sig in events.ALL_SIGNALS:
        fn = _receiver(sig.name, log)
        sig.connect(fn, weak=False)
        _receivers.append((sig, fn))


def detach() -> None:
    while _receivers:
        sig, fn = _receivers.pop()
        sig.disconnect(fn)
