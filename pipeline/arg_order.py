"""When vLLM 0.19.0 checks each engine argument, so that enginecfg reports the same error first.

vLLM does not validate its engine arguments up front.  ``create_engine_config`` builds its
configs one after another, each checking its own fields as it is built, and the first
failure is the answer (measured with the oracle: ``tests/order_oracle/``,
``tests/issue29_oracle/``):

1. the model config: its own fields (``dtype``) before anything is read, then the model's
   config is loaded and derived (max_model_len among it), and the model-level hook runs;
2. the chunked-prefill / prefix-caching defaults;
3. the cache config, the parallel config and the scheduler config, from the arguments:
   every field of the cache config (in the class's field order), then the scheduler's fields,
   then the scheduler's own checks (its token budget against max_model_len);
4. the attention backend's name;
5. the whole config: the vllm-level hooks, then the checks after them.

enginecfg checks every argument at load time but keeps each error for the moment vLLM would
raise it: :data:`MODEL` errors are raised at once; the others wait in the config
(``pending_errors``) and the pipeline raises each before the first stage of a later step
(``Stage.vllm_step``): :data:`CONFIGS` errors before the scheduler's checks (step 3),
:data:`ENGINE` errors before the vllm-level hooks, :data:`POST` errors before vLLM's
post-checks.  A deferred argument is left at its default meanwhile, so the stages before
that moment run on a valid config.

:data:`FINAL` holds enginecfg's own refusals of values vLLM accepts while it builds its
config (a nonpositive block size): those values are kept, so that every check of vLLM's
runs on them and the stages record what vLLM makes of them, and they are refused after
the last of vLLM's steps, before enginecfg's own (GPU validation).
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, Callable

from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError

__all__ = ["MODEL", "CONFIGS", "ENGINE", "POST", "FINAL", "STEP_ORDER", "phase_of", "split_engine_args",
           "add_pending"]

MODEL, CONFIGS, ENGINE, POST, FINAL = "model", "configs", "engine", "post", "final"
#: the stage steps in vLLM's order (``Stage.vllm_step``), and FINAL: after every step of
#: vLLM's, for what vLLM does not refuse while it builds the config but enginecfg does
STEP_ORDER = (MODEL, CONFIGS, ENGINE, POST, FINAL)

#: arguments of the model config: checked when it is built, before the model's config is read
_MODEL_ARGS = ("dtype", "disable_sliding_window", "hf_overrides", "trust_remote_code", "runner")
#: arguments of the cache and scheduler configs, in the order vLLM reports their errors (each
#: config's fields in its class's order; the cache config is built first)
_CONFIGS_ORDER = (
    "block_size", "kv_cache_dtype", "enable_prefix_caching", "calculate_kv_scales",
    "mamba_block_size", "mamba_cache_dtype", "mamba_ssm_cache_dtype", "mamba_cache_mode",
    # (a release whose parallel config checks its sizes while it is built: between the cache
    # and the scheduler configs, in the class's field order; 0.19.0 reports them later)
    "pipeline_parallel_size", "tensor_parallel_size",
    "max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "disable_hybrid_kv_cache_manager",
)
#: the attention backend's name, checked after the scheduler config
_ENGINE_ORDER = ("attention_backend",)
#: after the vllm-level hooks: a tensor-parallel size of 0 is no error to vLLM but a
#: division by zero inside the hooks (a hook's own refusal comes first), then the
#: pipeline-parallel size, checked while the whole config is built
_POST_ORDER = ("tensor_parallel_size", "pipeline_parallel_size")
#: enginecfg's own refusals, after everything vLLM would have reported
_FINAL_ORDER = ("block_size", "max_model_len")


def phase_of(name: str, value: Any) -> str:
    """When vLLM reports a bad value of engine argument ``name``."""
    if name in _MODEL_ARGS:
        return MODEL
    if name == "max_model_len" and (isinstance(value, bool) or not isinstance(value, int)):
        return MODEL  # the model config's own field type
    if name in _FINAL_ORDER:
        return FINAL  # a block size of the wrong type: vLLM does not check the field at all
    if name in _POST_ORDER:
        return POST
    return ENGINE if name in _ENGINE_ORDER else CONFIGS


def _rank(name: str, phase: str) -> int:
    """The place of *name*'s error among the errors of its step."""
    order = {CONFIGS: _CONFIGS_ORDER, ENGINE: _ENGINE_ORDER, POST: _POST_ORDER, FINAL: _FINAL_ORDER}.get(phase, ())
    return order.index(name) if name in order else len(order)


def _sorted(deferred: list[tuple[str, str, EngineCfgError]]) -> list[tuple[str, EngineCfgError]]:
    deferred = sorted(deferred, key=lambda d: (STEP_ORDER.index(d[0]), _rank(d[1], d[0])))
    return [(phase, exc) for phase, _, exc in deferred]


def split_engine_args(engine_args: dict[str, Any], parse_one: Callable[[str, Any], Any],
                      known: Container[str],
                      refusal: Callable[[str, Any], InvalidInputError | None] = lambda name, value: None,
                      phases: dict[str, str] | None = None,
                      ) -> tuple[dict[str, Any], list[tuple[str, EngineCfgError]]]:
    """Check every argument with ``parse_one(name, value)`` (returns the normalised value or
    raises :class:`InvalidInputError`).  An unknown name or a :data:`MODEL` error is raised
    now; the others are returned as ``(phase, error)`` in vLLM's order, their arguments left
    out of the returned dict (so they take their defaults).  ``refusal(name, value)`` names
    a value that passed but that enginecfg refuses after vLLM's checks: the value is kept,
    its error is returned as :data:`FINAL`.  *phases*: a later release's own step for an
    argument's error (its config class checks the value while it is built)."""
    good: dict[str, Any] = {}
    deferred: list[tuple[str, str, EngineCfgError]] = []
    for name, value in engine_args.items():
        try:
            good[name] = parse_one(name, value)
        except InvalidInputError as exc:
            phase = (phases or {}).get(name) or phase_of(name, value)
            if phase == MODEL or name not in known:  # vLLM: EngineArgs refuses the name
                raise
            deferred.append((phase, name, exc))
            continue
        refused = refusal(name, good[name])
        if refused is not None:
            deferred.append((FINAL, name, refused))
    return good, _sorted(deferred)


def add_pending(pending: list[tuple[str, EngineCfgError]], phase: str,
                error: EngineCfgError) -> list[tuple[str, EngineCfgError]]:
    """*pending* with *error* added after every error of its phase and the phases before."""
    at = next((i for i, (p, _) in enumerate(pending) if STEP_ORDER.index(p) > STEP_ORDER.index(phase)),
              len(pending))
    return pending[:at] + [(phase, error)] + pending[at:]
