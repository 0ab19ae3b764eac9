"""The run document: what a run produced, as values and as the JSON the record keeps.

:class:`RunResult` holds the frozen config, every :class:`Change` (with the stage, the
reason and, where the stage gives one, the rule and numbers behind it), every
:class:`Message`, the facts the stages recorded and the error of a failed run.
:func:`document` writes all of it as the run document, the JSON shape that
``RunResult.to_dict()``, ``enginecfg run --json``, the events and the audit store share (a
contract: keys are added, never renamed).
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs

from enginecfg.pipeline.config import BaseEngineConfig
from enginecfg.pipeline.errors import EngineCfgError
from enginecfg.pipeline.jsonvalue import fingerprint, to_json
from enginecfg.pipeline import releases

__all__ = ["Change", "Message", "RunResult", "document"]


@attrs.frozen
class Change:
    seq: int
    stage: str
    field: str
    old: Any
    new: Any
    reason: str
    level: str = "INFO"
    via: str = "context"
    #: the rule and the numbers behind the new value, in words (None: the reason says it all)
    explanation: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "stage": self.stage, "field": self.field, "old": to_json(self.old),
                "new": to_json(self.new), "reason": self.reason, "level": self.level, "via": self.via,
                "explanation": self.explanation}


@attrs.frozen
class Message:
    stage: str
    level: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "level": self.level, "message": self.message}


@attrs.define
class RunResult:
    """What a run produced: the frozen config and the record of how it got there."""

    run_id: str
    status: str
    config: BaseEngineConfig
    changes: list[Change]
    messages: list[Message]
    facts: dict[str, Any]
    stages: list[str]
    error: EngineCfgError | None = None
    #: the facts the pipeline's stages declare (``Stage.facts``), in stage order
    fact_names: tuple[str, ...] = ()
    #: the vLLM release the run speaks for, and the GPU it assumes (``Gpu.to_dict()``)
    vllm_version: str | None = None
    gpu: dict[str, Any] | None = None
    _doc: dict[str, Any] | None = attrs.field(default=None, init=False, repr=False)

    @property
    def fingerprint(self) -> str:
        """sha256 of the resolved config's canonical JSON (computed once; the config is frozen)."""
        return self._document()["fingerprint"]

    def __getattr__(self, name: str) -> Any:
        # a declared fact reads as an attribute (``result.pages``), None when not recorded
        if name != "fact_names" and name in self.fact_names:
            return self.facts.get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def changes_for(self, field: str) -> list[Change]:
        return [c for c in self.changes if c.field == field]

    def _document(self) -> dict[str, Any]:
        if self._doc is None:
            self._doc = document(self.run_id, self.status, self.config, self.changes, self.messages,
                                 self.facts, self.fact_names, self.error, vllm_version=self.vllm_version,
                                 gpu=self.gpu)
        return self._doc

    def to_dict(self) -> dict[str, Any]:
        """The run document (a fresh copy each call)."""
        return to_json(self._document())


def document(run_id: str, status: str, cfg: BaseEngineConfig | None, changes: Sequence[Change],
             messages: Sequence[Message], facts: dict[str, Any], fact_names: Sequence[str],
             error: EngineCfgError | None, *, model: str | None = None,
             engine_args: dict | None = None, vllm_version: str | None = None,
             gpu: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run document of a run as far as it got (*cfg* None: it did not load; then *model*
    and *engine_args* say what was asked for).  ``vllm_version`` and ``gpu`` say which vLLM
    release's rules decided and which GPU the start-up step and the figures assume;
    ``vllm_release`` whether that release is exact, and the dated rules it still lacks where it
    is not (its answers may differ from vLLM's there; None for a pack under no release's name).  Each
    declared fact is a key (None when not recorded), in *fact_names*' order, then any other
    fact recorded."""
    config = to_json(cfg.to_config_dict()) if cfg is not None else None
    doc = {
        "status": status,
        "run_id": run_id,
        "model": cfg.model if cfg is not None else model,
        "vllm_version": vllm_version,
        "vllm_release": _release_note(vllm_version),
        "gpu": to_json(gpu),
        "engine_args": to_json(cfg.engine_args if cfg is not None else (engine_args or {})),
        "source": to_json(cfg.source) if cfg is not None else None,
        "config": config,
        "changes": [c.to_dict() for c in changes],
        "messages": [m.to_dict() for m in messages],
    }
    for name in (*fact_names, *(n for n in facts if n not in fact_names)):
        doc[name] = to_json(facts.get(name))
    doc["error"] = error.to_dict() if error is not None else None
    doc["fingerprint"] = fingerprint(config) if config is not None else None
    return doc


def _release_note(name: str | None) -> dict[str, Any] | None:
    if not isinstance(name, str) or not releases.known(name):
        return None
    release = releases.get(name)
    return {"exact": release.exact, "reference": release.reference.name, "unwired": list(release.unwired)}
