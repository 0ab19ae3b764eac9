"""The time limit of a plugin's stage.

A plugin's stage is code enginecfg did not write: it may sleep, wait on the network or loop.
:func:`call_with_limit` runs it in a worker thread and stops waiting when the limit passes;
the run is then refused as a :class:`~enginecfg.pipeline.errors.StageTimeoutError` naming the
stage.

Python cannot stop a thread from outside, so the stage's thread is abandoned, not killed: it
is a daemon thread, it keeps running until the stage returns (or the process ends, which does
not wait for it), and what it does afterwards is not recorded: the run is closed (its record
takes no more changes or messages, :meth:`close` of the run) and the config it held is frozen,
so an assignment it makes later raises in that thread alone; what it prints then still goes
to stderr (:func:`stage_output`), never onto the report or run document on stdout.  A stage
that never returns costs a thread and what it holds until the process exits.

The limit: ``Pipeline(stage_timeout=seconds)``, the CLI's ``--stage-timeout``, else
``$ENGINECFG_STAGE_TIMEOUT``, else :data:`DEFAULT_STAGE_TIMEOUT` seconds.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import sys
import threading
from typing import Any, Callable

from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["DEFAULT_STAGE_TIMEOUT", "STAGE_TIMEOUT_ENV", "stage_timeout", "call_with_limit", "TimedOut", "stage_output"]

#: seconds a plugin's stage may take when nothing else is said
DEFAULT_STAGE_TIMEOUT = 10.0
#: the environment variable that sets the limit when the caller does not
STAGE_TIMEOUT_ENV = "ENGINECFG_STAGE_TIMEOUT"
#: the longest wait a thread can be given (``threading.TIMEOUT_MAX``, about 292 years here)
_LONGEST = threading.TIMEOUT_MAX
_ALLOWED = f"a positive number of seconds, at most {_LONGEST:.6g}"


def _seconds(value: Any, flag: str | None) -> float:
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise InvalidInputError.for_value("stage_timeout", value, _ALLOWED, flag=flag) from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise InvalidInputError.for_value("stage_timeout", value, _ALLOWED, flag=flag)
    if not math.isfinite(number) or number <= 0 or number > _LONGEST:
        raise InvalidInputError.for_value("stage_timeout", value, _ALLOWED, flag=flag)
    return number


def stage_timeout(value: Any = None) -> float:
    """The limit in seconds: *value* (a number, or its text), else ``$ENGINECFG_STAGE_TIMEOUT``
    (empty: unset), else the default.  Anything but a positive finite number is refused,
    naming where it came from."""
    if value is not None:
        return _seconds(value, "--stage-timeout" if isinstance(value, str) else None)
    env = os.environ.get(STAGE_TIMEOUT_ENV, "").strip()
    if env:
        return _seconds(env, STAGE_TIMEOUT_ENV)
    return DEFAULT_STAGE_TIMEOUT


_THREAD = "enginecfg-stage"


class _StageOutput:
    """``sys.stdout`` while plugin stages may print: a write goes to stderr while a stage runs
    (from any thread) and, afterwards, from a stage's own worker thread (one abandoned past its
    limit included); any other write goes to the stdout this replaced."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.running = 0

    def _sink(self) -> Any:
        if self.running or threading.current_thread().name.startswith(_THREAD):
            return sys.stderr
        return self.target

    def write(self, text: str) -> int:
        return self._sink().write(text)

    def flush(self) -> None:
        self._sink().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


_ABANDONED: list[str] = []


@contextlib.contextmanager
def stage_output():
    """While a plugin's stage runs, what it prints to stdout goes to stderr (``print`` in a
    stage is a diagnostic; stdout carries the report or the run document).  Once a stage's
    worker has been abandoned the routing stays in place, so that worker never reaches stdout."""
    proxy = sys.stdout if isinstance(sys.stdout, _StageOutput) else _StageOutput(sys.stdout)
    sys.stdout = proxy
    proxy.running += 1
    try:
        yield
    finally:
        proxy.running -= 1
        if not proxy.running and not _ABANDONED and sys.stdout is proxy:
            sys.stdout = proxy.target


class TimedOut(Exception):
    """The call did not return within the limit (its thread was abandoned)."""


class _Worker:
    """A daemon thread that runs one call at a time, woken through a pipe.

    Starting a thread for every call of a plugin's stage cost more than most stages take;
    an idle worker waits for the next call instead.  A worker whose call ran past its limit
    is abandoned (never handed another call), as a fresh thread was.

    Waking a thread that sleeps on another CPU costs far more than the hand-over itself where
    that CPU idles (a virtual machine halts an idle CPU: 60-90 us a round trip, against 6-8 us
    on one CPU).  The caller only waits while the call runs, so the worker is woken where the
    caller runs (:func:`_wake_here`) and, once awake, takes back the CPUs it may run on before
    the call starts: the call, and any thread it starts, runs where it would have.  The caller
    waits on that same CPU and takes its own CPUs back once the call has returned, so waking it
    is not a second trip to an idle CPU either.

    The worker sleeps in a read of its pipe and the caller wakes it with a write: a write lets
    go of the interpreter lock before it wakes the worker, so the worker runs at once (a
    queue wakes it while the caller still holds the lock, and the two take turns on it
    before the call starts)."""

    def __init__(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        _PIPES.append((self._wake_r, self._wake_w))
        #: the call handed over, read by the worker once woken
        self.call: "tuple[Callable[[], None], threading.Lock, bool] | None" = None
        self.thread = threading.Thread(target=self._loop, name=_THREAD, daemon=True)
        #: the CPUs the worker may run on (the creating thread's, which it inherits)
        self.cpus = _cpus()
        self.thread.start()

    def hand(self, call: "tuple[Callable[[], None], threading.Lock, bool]") -> None:
        """Give the idle worker *call* and wake it."""
        self.call = call
        os.write(self._wake_w, b"\0")

    def _loop(self) -> None:
        while True:
            os.read(self._wake_r, 1)
            body, done, woken_here = self.call
            self.call = None
            try:
                if woken_here:  # the call runs on the CPUs the worker was given, not one
                    _set_cpus(0, self.cpus)
                body()
            finally:
                done.release()


def _cpus() -> "set[int] | None":
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return None


def _set_cpus(tid: int, cpus: "set[int]") -> bool:
    try:
        os.sched_setaffinity(tid, cpus)
    except (AttributeError, OSError, ValueError):
        return False
    return True


_GETCPU: list[Any] = []


def _current_cpu() -> "int | None":
    """The CPU the calling thread runs on (glibc's ``sched_getcpu``), None where it cannot be
    asked."""
    if not _GETCPU:
        try:
            import ctypes

            fn = ctypes.CDLL(None).sched_getcpu
            fn.restype = ctypes.c_int
            fn.argtypes = ()
        except (ImportError, OSError, AttributeError):
            fn = None
        _GETCPU.append(fn)
    fn = _GETCPU[0]
    if fn is None:
        return None
    cpu = fn()
    return cpu if cpu >= 0 else None


def _wake_here(worker: "_Worker") -> "set[int] | None":
    """Let *worker* wake only on the CPU the caller runs on (it takes its own CPUs back once
    awake), and the caller wait there too: the caller's own CPUs, to be given back to it when
    the wait ends; None where that cannot be done (both then wake wherever they wake)."""
    if worker.cpus is None or len(worker.cpus) < 2:
        return None
    cpu = _current_cpu()
    if cpu is None or cpu not in worker.cpus:
        return None
    own = _cpus()
    if own is None or cpu not in own or not _set_cpus(worker.thread.native_id, {cpu}):
        return None
    if len(own) > 1:
        _set_cpus(0, {cpu})
    return own


#: workers waiting for a call (taken and given back whole: list.pop and append are atomic)
_IDLE: list[_Worker] = []
#: the wake-up pipes of every worker started (idle or abandoned)
_PIPES: list[tuple[int, int]] = []


def _forget_workers() -> None:
    """In a forked child: it has none of its parent's threads, so none of their pipes either."""
    _IDLE.clear()
    for pair in _PIPES:
        for fd in pair:
            try:
                os.close(fd)
            except OSError:
                pass
    _PIPES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def call_with_limit(fn: Callable[[], Any], seconds: float, name: str) -> Any:
    """``fn()`` run in a daemon thread named after *name*; its result, or what it raised
    (any exception, ``KeyboardInterrupt`` and ``SystemExit`` included) raised here.  Raises
    :class:`TimedOut` when it has not returned after *seconds*; the thread goes on alone.

    A Ctrl-C while waiting reaches this (the main) thread, as it would reach the stage."""
    outcome: list[tuple[bool, Any]] = []

    def body() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # carried over to the waiting thread, raised there
            outcome.append((False, exc))

    try:
        worker = _IDLE.pop()
    except IndexError:
        worker = _Worker()
    worker.thread.name = f"{_THREAD}-{name}"
    done = threading.Lock()
    done.acquire()
    # the caller's context variables go with it, as if it ran in the calling thread
    own = _wake_here(worker)
    worker.hand((functools.partial(contextvars.copy_context().run, body), done, own is not None))
    try:
        finished = done.acquire(timeout=seconds)
    except BaseException:  # a Ctrl-C while waiting leaves the worker to the call too
        _ABANDONED.append(name)
        raise
    finally:
        if own is not None and len(own) > 1:  # the caller runs where it ran before
            _set_cpus(0, own)
    if not finished or not outcome:
        _ABANDONED.append(name)
        raise TimedOut(name)  # the worker is left to the call
    _IDLE.append(worker)
    ok, value = outcome[0]
    if ok:
        return value
    raise value
