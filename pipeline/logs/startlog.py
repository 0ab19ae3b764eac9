"""A start-up log read back: the starts it holds, what each logged, and the command it ran.

:func:`read` takes the text as pasted and returns a :class:`StartupLog`: one :class:`Start`
per engine start the text holds (people paste several: a failed start and the one after it),
each with the lines that state a decision or a figure (:class:`~.facts.Logged`), in order,
every rank's copy kept.  A new start begins where a line that opens one (the banner, the
non-default arguments, the engine's config line, the weights loaded) comes again from the same
process after a line that closes one (the KV-cache size, the concurrency, a start-up error): a
paste that puts the figures before the arguments, or every rank's copy of a line, is one start.  The command line that started
vLLM (``vllm serve ...``, ``python -m vllm.entrypoints.openai.api_server ...``, ``docker run
... vllm/vllm-openai ...``), wrapped over lines with ``\\`` or not, is read as its words
(:class:`Command`).
"""

from __future__ import annotations

import re
import shlex
from types import MappingProxyType
from typing import Any, Mapping

import attrs

from enginecfg.pipeline.logs.facts import Logged, recognise
from enginecfg.pipeline.logs.lines import logical_lines

__all__ = ["Command", "Start", "StartupLog", "read"]

_OPENS = frozenset({"engine_args", "engine_config", "model_loading"})
_CLOSES = frozenset({"kv_cache_size", "max_concurrency", "start_error", "gpu_blocks"})
#: where vLLM's own words start on a command line
_ENTRY = re.compile(r"(?:^|\s)(?:vllm\s+serve|-m\s+vllm\.entrypoints\.openai\.api_server|"
                    r"vllm/vllm-openai(?::\S*)?)(?=\s|$)")


@attrs.frozen
class Command:
    """The command that started vLLM, as pasted: ``line`` (from 1), its ``words`` after the
    entry point (``vllm serve``, the API server module, the container image), the ``model``
    it names (the first positional word or ``--model``; None if none)."""

    line: int
    words: tuple[str, ...] = attrs.field(converter=tuple)
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "words": list(self.words), "model": self.model}


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class Start:
    """One engine start: the lines it spans (``first_line``..``last_line``) and what they
    logged, in order (``logged``)."""

    index: int
    first_line: int
    last_line: int
    logged: tuple[Logged, ...] = attrs.field(converter=tuple)

    def all(self, kind: str) -> tuple[Logged, ...]:
        """Every line of *kind*, every rank's copy, in order."""
        return tuple(f for f in self.logged if f.kind == kind)

    def first(self, kind: str) -> Logged | None:
        """The first line of *kind* (None: not logged)."""
        return next((f for f in self.logged if f.kind == kind), None)

    @property
    def release(self) -> str | None:
        """The release the start names: the engine's config line first, then the banner."""
        found = self.all("release")
        engine = [f for f in found if f.parts.get("from") == "engine"]
        chosen = (engine or found)
        return chosen[0].value if chosen else None

    @property
    def model(self) -> str | None:
        found = [f for f in self.all("model") if isinstance(f.value, str)]
        order = {"non-default args": 0, "engine": 1, "banner": 2}
        found.sort(key=lambda f: order.get(f.parts.get("from"), 3))
        return found[0].value if found else None

    @property
    def engine_args(self) -> Mapping[str, Any]:
        """The non-default arguments the start logged (empty when it logged none)."""
        f = self.first("engine_args")
        return _read_only(f.value) if f is not None else _read_only({})

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "first_line": self.first_line, "last_line": self.last_line,
                "release": self.release, "model": self.model,
                "logged": [f.to_dict() for f in self.logged]}


@attrs.frozen
class StartupLog:
    """A pasted start-up log read back: its physical line count, the starts it holds and the
    command that started vLLM, where one was pasted with it."""

    lines: int
    starts: tuple[Start, ...] = attrs.field(converter=tuple)
    command: Command | None = None

    @property
    def last(self) -> Start | None:
        """The last start of the text (the one a user asks about)."""
        return self.starts[-1] if self.starts else None

    @property
    def logged(self) -> tuple[Logged, ...]:
        return tuple(f for s in self.starts for f in s.logged)

    def to_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "command": self.command.to_dict() if self.command is not None else None,
                "starts": [s.to_dict() for s in self.starts]}


def _opens(f: Logged) -> bool:
    return f.kind in _OPENS or (f.kind == "release" and f.parts.get("from") == "banner")


def _command(text: str) -> Command | None:
    raw = text.splitlines()
    found: Command | None = None
    i = 0
    while i < len(raw):
        line = raw[i].strip().strip("`")
        m = _ENTRY.search(line)
        if m is None:
            i += 1
            continue
        number = i + 1
        joined = line
        while joined.endswith("\\") and i + 1 < len(raw):
            i += 1
            joined = joined[:-1] + " " + raw[i].strip().strip("`")
        rest = joined[m.end():]
        try:
            words = shlex.split(rest)
        except ValueError:
            words = rest.split()
        model = None
        for j, w in enumerate(words):
            if w == "--model" and j + 1 < len(words):
                model = words[j + 1]
                break
            if w.startswith("--model="):
                model = w.split("=", 1)[1]
                break
        if model is None and words and not words[0].startswith("-"):
            model = words[0]
        found = Command(number, words, model)
        i += 1
    return found


def read(text: str) -> StartupLog:
    """Read *text*, a vLLM start-up log as pasted (see the module doc).  Never raises on the
    text: what it does not recognise it leaves out (a text with nothing recognisable has no
    start)."""
    if not isinstance(text, str):
        raise TypeError(f"a start-up log is text, not {type(text).__name__}")
    starts: list[Start] = []
    current: list[Logged] = []
    first = last = 0
    closed = False
    count = 0
    for line in logical_lines(text):
        count = line.number + line.physical - 1
        found = recognise(line)
        if not found:
            continue
        if closed and any(_opens(f) and any(_opens(g) and g.kind == f.kind and g.process == f.process
                                            and g.rank == f.rank for g in current) for f in found):
            starts.append(Start(len(starts), first, last, current))
            current, closed = [], False
        if not current:
            first = line.number
        current.extend(found)
        last = line.number + line.physical - 1
        closed = closed or any(f.kind in _CLOSES for f in found)
    if current:
        starts.append(Start(len(starts), first, last, current))
    return StartupLog(max(count, len(text.splitlines())), starts, _command(text))
