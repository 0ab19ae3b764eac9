"""``run``: resolve models one after the other, each outcome as a value.

What ``enginecfg run PATH [PATH ...]`` does between parsing and printing: every model is
resolved by one pipeline (the transformers snapshots of all of them fetched in one request
when there are several), a failure is an outcome like a success (with the error and the run
document vLLM's failure leaves), and, with an audit store attached, each outcome says whether
the store recorded it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence

import attrs

from enginecfg.pipeline.errors import EngineCfgError
from enginecfg.pipeline.document import RunResult
from enginecfg.pipeline.run import Pipeline

__all__ = ["RunOutcome", "run"]


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class RunOutcome:
    """One model's run: the result (None when it failed), the error (None when it resolved),
    the run document (the failure's own when it failed; ``to_dict()`` is what ``run --json``
    prints), whether an attached audit store recorded the run, and why not when its write
    failed (``record_error``)."""

    model: str
    result: RunResult | None
    error: EngineCfgError | None
    document: Mapping[str, Any] = attrs.field(converter=_read_only)
    recorded: bool = False
    record_error: str | None = None

    @property
    def run_id(self) -> str | None:
        return self.document.get("run_id")

    @property
    def exit_code(self) -> int:
        """0 resolved, 1 refused by a verification step, 2 bad input (the audit aside)."""
        return self.error.exit_code if self.error is not None else 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.document)


def run(models: Sequence[Any], *, revision: str | None = None, pipeline: Pipeline | None = None,
        store: Any = None, **engine_args: Any) -> Iterator[RunOutcome]:
    """Resolve each of *models* (folders, ``config.json`` files, Hugging Face repo ids, at
    *revision*) with vLLM's engine arguments, in order, and yield each :class:`RunOutcome` as
    it is known.  vLLM's memory flags (``gpu_memory_utilization``, ``kv_cache_memory_bytes``,
    ``num_gpu_blocks_override``, and ``gpu``) go to the figures of the pipeline made here.  *store* is an :class:`~enginecfg.store.AuditStore` already attached to the
    bus (or None): the outcomes say whether it recorded each run."""
    from enginecfg.commands._memory import split_memory
    from enginecfg.pipeline.errors import InvalidInputError
    from enginecfg.pipeline.loading import prefetch_pretrained

    models = list(models)
    memory, engine_args = split_memory(engine_args)
    if memory and pipeline is not None:
        raise InvalidInputError(f"invalid run: memory flags {sorted(memory)} with a pipeline of your own; give "
                                f"them to the pipeline (Pipeline(impact=...))", field="impact")
    pipeline = pipeline if pipeline is not None else Pipeline(impact=memory or None)
    if len(models) > 1:
        prefetch_pretrained(models)  # every missing snapshot in one request
    for model in models:
        yield _one(pipeline, store, model, revision, engine_args)


def _one(pipeline: Pipeline, store: Any, model: Any, revision: str | None,
         engine_args: dict[str, Any]) -> RunOutcome:
    failed_before = store.write_failed if store is not None else 0
    result = error = None
    try:
        result = pipeline.resolve(model, revision=revision, **engine_args)
        doc = result.to_dict()
    except EngineCfgError as exc:
        error = exc
        doc = getattr(exc, "document", None) or {"status": exc.status, "error": exc.to_dict()}
    write_failed = store is not None and store.write_failed > failed_before
    recorded = store is not None and not write_failed and store.last_run_id == doc.get("run_id")
    return RunOutcome(str(model), result, error, doc, recorded,
                      store.record_error if write_failed else None)
