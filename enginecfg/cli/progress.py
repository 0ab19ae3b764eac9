"""Progress lines on stderr for the slow parts of a run, so a long wait is never silent.

Two steps take seconds: building a config's transformers snapshot the first time (a worker
process imports transformers) and GPU validation (Triton kernels; many seconds in
``interpret`` mode).  The first is announced through :data:`enginecfg.pipeline.hf.cache.progress`;
the second from the signal bus: a line when the ``gpu-validation`` stage has been running for
half a second, and one per finished check.  stdout (the run document) is never touched.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from enginecfg.pipeline import events
from enginecfg.pipeline.hf import cache as hfcache

__all__ = ["attach", "Progress"]

_DELAY_S = 0.5


def _say(line: str) -> None:
    sys.stderr.write(f"enginecfg: {line}\n")
    sys.stderr.flush()


class Progress:
    def __init__(self, mode: str):
        self.mode = mode
        self._timer: threading.Timer | None = None
        self._pairs = [(events.stage_started, self._started), (events.stage_finished, self._finished),
                       (events.validation_checked, self._checked)]

    def attach(self) -> "Progress":
        hfcache.progress = _say
        for sig, fn in self._pairs:
            sig.connect(fn, weak=False)
        return self

    def detach(self) -> None:
        hfcache.progress = None
        for sig, fn in self._pairs:
            sig.disconnect(fn)
        self._cancel()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _started(self, sender: Any, event: Any = None, **_: Any) -> None:
        if event.stage == "gpu-validation" and self.mode != "off":
            how = "with Triton's interpreter on the CPU; this takes a while" if self.mode == "interpret" \
                else "with Triton kernels"
            self._timer = threading.Timer(_DELAY_S, _say, (f"gpu-validation: checking the config {how}...",))
            self._timer.daemon = True
            self._timer.start()

    def _finished(self, sender: Any, event: Any = None, **_: Any) -> None:
        if event.stage == "gpu-validation":
            self._cancel()

    def _checked(self, sender: Any, event: Any = None, **_: Any) -> None:
        _say(f"gpu-validation: {event.check} {'passed' if event.passed else 'FAILED'} "
             f"({event.kernel}, {event.dtype}, {event.seconds:.1f} s)")


def attach(mode: str) -> Progress:
    return Progress(mode).attach()
