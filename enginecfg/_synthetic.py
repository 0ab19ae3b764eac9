"""Synthetic runs published on the signal bus, for store tests and benchmarks (see
:mod:`enginecfg.testing`, which re-exports them).

They follow the pipeline's contract (run_started, per stage stage_started /
config_changed / warning_issued / validation_checked / stage_finished, then run_finished or
run_failed) with a run document of the pipeline's shape, so the store can be exercised in
processes that do not load models.  Importable by name, so that ``multiprocessing`` with
the ``spawn`` start method can run :func:`write_runs` in a child.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable

from enginecfg.pipeline import events
from enginecfg.pipeline.jsonvalue import fingerprint, to_json

__all__ = ["base_config", "emit_run", "write_runs"]

#: built-in stages, in their order: the three that change something and three around them
_STAGES = ("pooling", "engine-defaults", "ssm-dtype", "mamba-cache-mode", "hybrid-alignment",
           "vllm-checks")


def base_config(block_size: int | None = None) -> dict[str, Any]:
    """A config section of the run document, before any stage ran."""
    return {
        "model_config": {"architecture": "Qwen3NextForCausalLM", "dtype": "bfloat16",
                         "max_model_len": 262144, "head_size": 256, "use_mla": False,
                         "is_hybrid": True, "rope_scaling": {"factor": float("inf")}},
        "cache_config": {"block_size": block_size, "cache_dtype": "auto",
                         "enable_prefix_caching": None, "mamba_cache_mode": "none",
                         "mamba_block_size": None},
        "attention_config": {"backend": None},
        "scheduler_config": {"enable_chunked_prefill": None},
        "parallel_config": {"tensor_parallel_size": 1},
        "pooler_config": None,
        "hf_config": {"is_causal": True, "patch_size": None, "llm_config": None},
    }


def _set(cfg: dict[str, Any], field: str, value: Any) -> Any:
    section, name = field.split(".", 1)
    old = cfg[section][name]
    cfg[section][name] = value
    return old


def emit_run(*, run_id: str | None = None, model: str = "/models/Qwen3-Next-80B-A3B",
             architecture: str | None = "Qwen3NextForCausalLM", block_size: int | None = None,
             final_block_size: int = 1056, fail: str | None = None, extra_changes: int = 0,
             checks: int = 0, stop_after_changes: bool = False,
             between: Callable[[], None] | None = None) -> str:
    """Publish one run; returns its id.

    ``fail``: None (resolved), ``"rejected"`` or ``"invalid"``.  ``extra_changes`` adds
    changes to ``compilation.level_N`` style fields (for volume).  ``stop_after_changes``
    publishes run_started and the changes of the first stages and then returns without
    finishing the run (a process killed mid-run).  ``between`` is called at that point.
    """
    run_id = run_id or uuid.uuid4().hex
    engine_args = {"block_size": block_size} if block_size is not None else {}
    cfg = base_config(block_size)
    input_config = to_json(cfg)  # as the pipeline copies its input document
    events.run_started.send(run_id, event=events.RunStarted(
        run_id=run_id, started_at=time.time(), model=model, architecture=architecture,
        engine_args=engine_args, input_config=input_config,
        input_fingerprint=fingerprint(input_config), stages=_STAGES))
    seq = msg_seq = 0
    plan: dict[str, list[tuple[str, Any, str, str]]] = {
        "engine-defaults": [("scheduler_config.enable_chunked_prefill", True,
                      "chunked prefill is on by default for generative models", "INFO"),
                     ("cache_config.enable_prefix_caching", True,
                      "prefix caching is on by default", "INFO"),
                     ("cache_config.block_size", 16, "default block size", "INFO")],
        "mamba-cache-mode": [("cache_config.mamba_cache_mode", "align",
                              "prefix caching on a hybrid model needs align mode", "WARNING")],
        "hybrid-alignment": [("cache_config.block_size", final_block_size,
                              f"Setting attention block size to {final_block_size} tokens to "
                              "ensure that attention page size is >= mamba page size.",
                              "INFO")],
    }
    if extra_changes:
        cfg["compilation_config"] = {}
        plan["vllm-checks"] = [(f"compilation_config.option_{i}", i, f"synthetic change {i}",
                                "INFO") for i in range(extra_changes)]
    for order, stage in enumerate(_STAGES):
        if stop_after_changes and order == 3:
            if between is not None:
                between()
            return run_id
        events.stage_started.send(run_id, event=events.StageStarted(
            run_id=run_id, stage=stage, order=order, origin="built-in"))
        t0 = time.perf_counter()
        n = 0
        for field, value, reason, level in plan.get(stage, []):
            if field.startswith("compilation_config."):
                old = cfg["compilation_config"].get(field.split(".", 1)[1])
                cfg["compilation_config"][field.split(".", 1)[1]] = value
            else:
                old = _set(cfg, field, value)
            seq += 1
            n += 1
            events.config_changed.send(run_id, event=events.ConfigChanged(
                run_id=run_id, seq=seq, stage=stage, field=field, old=old, new=value,
                reason=reason, level=level))
            if level == "WARNING":
                msg_seq += 1
                events.warning_issued.send(run_id, event=events.WarningIssued(
                    run_id=run_id, seq=msg_seq, stage=stage, level=level, message=reason))
        if stage == "vllm-checks":
            for i in range(checks):
                events.validation_checked.send(run_id, event=events.ValidationChecked(
                    run_id=run_id, check=f"paged-attention-{i}", kernel="paged_attention",
                    shapes={"q": [4, 16, 256], "blocks": [64, final_block_size]},
                    dtype="bfloat16", max_error=1.5e-3, tolerance=2e-2, passed=True,
                    device="cpu", seconds=0.01))
            if not fail:
                msg_seq += 1
                events.warning_issued.send(run_id, event=events.WarningIssued(
                    run_id=run_id, seq=msg_seq, stage=stage, level="INFO",
                    message="config checks passed"))
        outcome = "changed" if n else "unchanged"
        failing = fail and stage == "vllm-checks"
        events.stage_finished.send(run_id, event=events.StageFinished(
            run_id=run_id, stage=stage, order=order, outcome="failed" if failing else outcome,
            duration_s=time.perf_counter() - t0, changes=n,
            error="mamba_block_size needs prefix caching" if failing else None))
    doc = {"status": fail or "resolved", "run_id": run_id, "model": model,
           "engine_args": engine_args, "config": cfg, "changes": [], "messages": [],
           "pages": None, "error": None, "fingerprint": fingerprint(cfg)}
    if fail:
        err = {"type": "ConfigRejectedError" if fail == "rejected" else "InvalidInputError",
               "message": "--mamba-block-size is only supported with prefix caching enabled",
               "field": "cache_config.mamba_block_size"}
        doc["error"] = err
        events.run_failed.send(run_id, event=events.RunFailed(
            run_id=run_id, finished_at=time.time(), status=fail, error=err,
            stage="vllm-checks", document=doc))
    else:
        events.run_finished.send(run_id, event=events.RunFinished(
            run_id=run_id, finished_at=time.time(), status="resolved", document=doc,
            fingerprint=doc["fingerprint"]))
    return run_id


def write_runs(url: str, n: int, tag: str = "") -> dict[str, Any]:
    """Record ``n`` synthetic runs into ``url`` from this process (a multiprocessing target).

    Returns the ids recorded and the failures, so the parent can check for loss.
    """
    from enginecfg.store import AuditStore

    store = AuditStore(url)
    ids = []
    with store:
        for i in range(n):
            ids.append(emit_run(model=f"/models/m{tag or 'x'}", block_size=16 if i % 2 else None))
    store.close()
    return {"ids": ids, "recorded": store.recorded, "failed": store.write_failed,
            "errors": [f.error for f in store.write_failures]}
