"""enginecfg's exception hierarchy.

Every error enginecfg raises on purpose is an :class:`EngineCfgError`.  The CLI maps the
three families onto exit codes: :class:`InvalidInputError` (2, the caller gave something
that is not allowed), :class:`ConfigRejectedError` (1, a verification step refused the
config where vLLM 0.19.0 itself raises; the message carries vLLM's text) and
:class:`FrozenConfigError` (a programming error: something tried to change a frozen
config).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "EngineCfgError",
    "InvalidInputError",
    "ConfigRejectedError",
    "FrozenConfigError",
    "StageError",
    "StageTimeoutError",
    "StageOrderError",
    "RunInterruptedError",
]


class EngineCfgError(Exception):
    """Base class of every error enginecfg raises on purpose.

    ``field`` names the dotted config field (or engine argument) the error is about, when
    there is one; ``stage`` the stage that raised it.
    """

    exit_code = 1
    status = "rejected"

    def __init__(self, message: str, *, field: str | None = None, stage: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        self.stage = stage

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """The error as the run document, the audit store and ``--json`` output carry it."""
        d = {"type": type(self).__name__, "message": self.message, "field": self.field}
        if self.stage:
            d["stage"] = self.stage
        return d


class InvalidInputError(EngineCfgError, ValueError):
    """The caller's input is malformed or out of range (exit code 2).

    The message always names the field, the value given and what is allowed.
    """

    exit_code = 2
    status = "invalid"

    @classmethod
    def for_value(
        cls, field: str, given: Any, allowed: str, *, flag: str | None = None, stage: str | None = None
    ) -> "InvalidInputError":
        where = f"{field} ({flag})" if flag else field
        return cls(f"invalid {where}: got {given!r}; allowed: {allowed}", field=field, stage=stage)


class ConfigRejectedError(EngineCfgError):
    """A verification step refused the config where vLLM 0.19.0 raises (exit code 1).

    The message contains vLLM's own text.  ``vllm_type`` is the exception type vLLM
    raised (``ValueError``, ``AssertionError``, ...).
    """

    def __init__(self, message: str, *, field: str | None = None, stage: str | None = None,
                 vllm_type: str = "ValueError"):
        super().__init__(message, field=field, stage=stage)
        self.vllm_type = vllm_type

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["vllm_type"] = self.vllm_type
        return d


class StageError(ConfigRejectedError):
    """A stage raised an exception that is not enginecfg's own (a bug, often in a plugin).

    The run fails cleanly; ``origin`` says where the stage comes from (``built-in`` or a
    distribution name and version) and ``__cause__`` keeps the original exception.
    """

    def __init__(self, message: str, *, stage: str, origin: str = "built-in", field: str | None = None):
        super().__init__(message, field=field, stage=stage, vllm_type="StageError")
        self.origin = origin


class StageTimeoutError(StageError):
    """A plugin's stage ran past the pipeline's time limit (``Pipeline(stage_timeout=...)``,
    ``--stage-timeout``, ``$ENGINECFG_STAGE_TIMEOUT``): the run is refused, naming the stage
    and the limit.  ``timeout`` is the limit in seconds."""

    def __init__(self, message: str, *, stage: str, origin: str = "built-in", timeout: float):
        super().__init__(message, stage=stage, origin=origin, field="stage_timeout")
        self.vllm_type = "StageTimeoutError"
        self.timeout = timeout


class StageOrderError(InvalidInputError):
    """The stage set cannot be ordered: a cycle, an unknown name, or two stages of one name."""


class RunInterruptedError(EngineCfgError):
    """A run that ended before it could finish: interrupted (Ctrl-C, ``KeyboardInterrupt``
    raised by a stage), or its process gone while a stage ran (``os._exit``, a signal, a
    crash; the audit store records such a run from its journal).  Exit code 130, as for an
    interrupted command."""

    exit_code = 130
    status = "interrupted"


class FrozenConfigError(EngineCfgError, AttributeError):
    """Something tried to change a config after the pipeline froze it."""

    status = "rejected"
