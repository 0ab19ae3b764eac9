"""``explain``: what one setting costs in KV cache, and why, before anything is loaded.

vLLM prints "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per request"
only after it has loaded the weights.  :func:`explain` resolves the model as ``run`` does
(same sources, same stages; GPU validation off) and returns the run's ``impact`` figures with
the findings behind them as one :class:`Explanation`.  It speaks for one vLLM release
(``vllm_version=``, else ``$ENGINECFG_VLLM_VERSION``, else 0.19.0): that release's stages,
start-up step and KV planning make the figures, and only the findings that hold for it are given.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

import attrs

from enginecfg.commands._memory import (MemoryLike, curve, figures_pipeline, memory_options, release_of, split_memory,
                                       used_memory, utilization_given)
from enginecfg.commands.findings import Finding, findings
from enginecfg.pipeline import releases
from enginecfg.pipeline.models.capacity import Impact, ImpactOptions, ImpactUnavailable
from enginecfg.pipeline.document import Change, RunResult

__all__ = ["Explanation", "explain"]


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class Explanation:
    """One setting explained: the model as given, the caller's engine arguments, the memory
    the figures assume, the run (its config, changes and facts), its ``impact`` and the
    findings, and the vLLM release all of it speaks for.  ``to_dict()`` is ``enginecfg explain
    --json``."""

    model: str
    engine_args: Mapping[str, Any] = attrs.field(converter=_read_only)
    memory: ImpactOptions
    result: RunResult
    findings: tuple[Finding, ...] = attrs.field(converter=tuple)
    vllm_version: str = attrs.field(factory=lambda: releases.first().name)

    @property
    def run_id(self) -> str:
        return self.result.run_id

    @property
    def impact(self) -> Impact | ImpactUnavailable | None:
        return self.result.facts.get("impact")

    @property
    def changes(self) -> list[Change]:
        return self.result.changes

    @property
    def starts(self) -> bool | None:
        """Whether the release's vLLM would start with this setting (None: not worked out)."""
        return getattr(self.impact, "starts", None)

    @property
    def start_error(self) -> str | None:
        """The error vLLM would stop with at start-up (None: it starts, or not worked out)."""
        return getattr(self.impact, "start_error", None)

    def curve(self, contexts=None) -> tuple[tuple[int, float, int], ...]:
        """``(context, requests that fit, KV-cache blocks one request takes)`` from 128 tokens
        to max_model_len (or at *contexts*): what ``explain --plot`` draws."""
        return curve(self.result, self.memory, contexts)

    def to_dict(self) -> dict[str, Any]:
        imp = self.impact
        return {"model": self.model, "vllm_version": self.vllm_version, "gpu": self.result.gpu,
                "engine_args": dict(self.engine_args), "run_id": self.run_id,
                "impact": imp.to_dict() if imp is not None else None,
                "findings": [f.to_dict() for f in self.findings],
                "changes": [{"stage": c.stage, "field": c.field, "old": c.old, "new": c.new}
                            for c in self.changes]}


def explain(model: Any, *, memory: MemoryLike = None, revision: str | None = None,
            vllm_version: str | None = None, **engine_args: Any) -> Explanation:
    """Resolve *model* (a folder, a ``config.json`` or a Hugging Face repo id, at *revision*)
    with vLLM's engine arguments, as ``Pipeline().resolve`` takes them, and explain what the
    result costs on the GPU *memory* describes (an
    :class:`~enginecfg.pipeline.models.capacity.ImpactOptions` or a mapping of its fields;
    default an H200 at utilization 0.9).  vLLM's memory flags may also be given beside the
    engine arguments, by vLLM's names (``gpu_memory_utilization=0.5``,
    ``kv_cache_memory_bytes=...``, ``num_gpu_blocks_override=...``, and ``gpu="H100"``).
    *vllm_version*: the release whose rules decide (default ``$ENGINECFG_VLLM_VERSION``, else
    0.19.0); without a utilization the figures take that release's default (0.34.0: 1.0).

    Raises :class:`~enginecfg.InvalidInputError` for bad input and
    :class:`~enginecfg.ConfigRejectedError` where vLLM itself refuses the setting.
    """
    release = release_of(vllm_version)
    flags, args = split_memory(engine_args)
    options = memory_options(memory, **flags)
    given = utilization_given(memory, flags)
    result = figures_pipeline(options, release, utilization=given).resolve(model, revision=revision, **args)
    return Explanation(str(model), args, used_memory(options, result), result, findings(result), release)

