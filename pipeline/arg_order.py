"""When vLLM 0.19.0 checks each engine argument, so that enginecfg reports the same error first.

vLLM does not validate its engine arguments up front.  ``create_engine_config`` first builds
the model config (its own fields, ``dtype`` among them, are checked before anything is read;
then the model's config is loaded, derived, and the model-level hook runs), then fills in the
chunked-prefill / prefix-caching defaults, then builds the cache, scheduler and attention
configs (whose construction checks their arguments), and only then the whole config with the
vllm-level hooks and the checks after them.  So with two things wrong, a config the model
config refuses wins over a bad ``--mamba-ssm-cache-dtype``, and a bad
``--pipeline-parallel-size`` loses to an error of the hooks.  (Measured with the oracle:
``tests/order_oracle/``.)

enginecfg checks every argument at load time but keeps each error for the moment vLLM would
raise it: :data:`MODEL` errors are raised at once, :data:`ENGINE` errors by the pipeline
before the first stage that is not part of the model config (see ``Stage.vllm_step``),
:data:`POST` errors before the first of vLLM's post-checks.  A deferred argument is left at
its default meanwhile, so the stages before that moment run on a valid config.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, Callable

from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["MODEL", "ENGINE", "POST", "FINAL", "STEP_ORDER", "phase_of", "split_engine_args"]

MODEL, ENGINE, POST, FINAL = "model", "engine", "post", "final"
#: the stage steps in vLLM's order (``Stage.vllm_step``), and FINAL: after every stage, for
#: what vLLM does not refuse while it builds the config but enginecfg does
STEP_ORDER = (MODEL, ENGINE, POST, FINAL)

#: arguments vLLM checks after the model config exists, in the order it reports them: the
#: cache config's fields, the scheduler's, the attention backend
_ENGINE_ORDER = (
    "kv_cache_dtype", "enable_prefix_caching", "calculate_kv_scales",
    "mamba_block_size", "mamba_cache_dtype", "mamba_ssm_cache_dtype", "mamba_cache_mode",
    "max_num_batched_tokens", "max_model_len", "enable_chunked_prefill",
    "attention_backend",
)
#: after the vllm-level hooks: a tensor-parallel size of 0 is no error to vLLM but a
#: division by zero inside the hooks (a hook's own refusal comes first), then the
#: pipeline-parallel size, checked while the whole config is built
_POST_ORDER = ("tensor_parallel_size", "pipeline_parallel_size")
#: vLLM accepts a block size of 0 while building the config (it fails only when the engine
#: starts); enginecfg refuses it, after everything vLLM would have reported
_FINAL_ORDER = ("block_size",)


def phase_of(name: str, value: Any) -> str:
    """When vLLM reports a bad value of engine argument ``name``."""
    if name == "dtype":
        return MODEL
    if name == "max_model_len" and (isinstance(value, bool) or not isinstance(value, int)):
        return MODEL  # the model config's own field type; its range is the scheduler's
    if name in _FINAL_ORDER:
        return FINAL
    return POST if name in _POST_ORDER else ENGINE


def _rank(name: str) -> int:
    order = _ENGINE_ORDER + _POST_ORDER + _FINAL_ORDER
    return order.index(name) if name in order else len(order)


def split_engine_args(engine_args: dict[str, Any], parse_one: Callable[[str, Any], Any],
                      known: Container[str]
                      ) -> tuple[dict[str, Any], list[tuple[str, InvalidInputError]]]:
    """Check every argument with ``parse_one(name, value)`` (returns the normalised value or
    raises :class:`InvalidInputError`).  An unknown name or a :data:`MODEL` error is raised
    now; the others are returned as ``(phase, error)`` in vLLM's order, their arguments left
    out of the returned dict (so they take their defaults)."""
    good: dict[str, Any] = {}
    deferred: list[tuple[str, str, InvalidInputError]] = []
    for name, value in engine_args.items():
        try:
            good[name] = parse_one(name, value)
        except InvalidInputError as exc:
            phase = phase_of(name, value)
            if phase == MODEL or name not in known:  # vLLM: EngineArgs refuses the name
                raise
            deferred.append((phase, name, exc))
    deferred.sort(key=lambda d: (STEP_ORDER.index(d[0]), _rank(d[1])))
    return good, [(phase, exc) for phase, _, exc in deferred]
