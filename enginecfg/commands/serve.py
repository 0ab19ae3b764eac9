"""The equivalent ``vllm serve`` command of a resolved run.

What it pins, and why:

- every decision a stage made (its change to an engine argument's field: prefix caching,
  chunked prefill, the attention backend, the Mamba cache mode, the SSM-state dtype, the
  aligned block size, ...), at the value it resolved to;
- every engine argument the caller gave that no stage changed, as given (``--max-model-len
  -1`` stays ``-1``: vLLM's start-up auto-fit, not the length it resolved to);
- the model's own facts vLLM derives (``--dtype``, ``--max-model-len``);
- the pooling a pooling model resolved (``--runner pooling``, ``--pooler-config``);
- vLLM's memory flags the caller gave (``--gpu-memory-utilization``,
  ``--kv-cache-memory-bytes``, ``--num-gpu-blocks-override``, ``--enforce-eager``), and every other ``vllm serve``
  option of a pasted command line, as it was given.

What it leaves out: a value vLLM would decide again differently when given as a flag.  A
block size no stage changed and the caller did not give is vLLM's default, which the start-up
step may replace by the attention backend's preference and the hybrid alignment grows; pinned,
it would read as the caller's choice (after ``--skip-stage hybrid-alignment`` vLLM would grow
it again all the same).  The same holds for every field a stage decides when the stage did not
run.  Mamba settings appear only for models with Mamba layers, ``--mamba-block-size`` only
when given (vLLM refuses it without prefix caching), and switches left at their default
(``--no-calculate-kv-scales``) not at all.

The command is the run's release's (``result.vllm_version``, a
:class:`~enginecfg.pipeline.releases.Release`), and never holds a flag that release's ``vllm
serve`` does not take:

- for a release that decides at engine start (rule C8), the block size the engine start
  decides (:class:`~enginecfg.pipeline.models.startup.Startup`) is pinned where a start-up
  decision changed it (a hybrid's alignment to the backend's kernel block, a backend's
  preferred size): given as ``--block-size``, it is what the engine start would choose again;
  the config-time default is not pinned;
- an engine argument the release takes without effect (:attr:`Release.ignored_arguments`:
  ``--mamba-cache-mode`` once rule C7f deprecates it) is never printed;
- the flags the release's parser no longer has (:attr:`Release.sets_aside`, the difference of
  the first release's option table and its own) are left out, the caller's pasted ones
  included (:func:`not_taken` lists those dropped).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from enginecfg.pipeline import releases
from enginecfg.pipeline.document import RunResult
from enginecfg.pipeline.engine_args import ENGINE_ARGS, to_flags

__all__ = ["serve_flags", "serve_command", "not_taken", "MEMORY_FLAGS"]

#: the impact options that are ``vllm serve`` flags, by option name
MEMORY_FLAGS = {"gpu_memory_utilization": "--gpu-memory-utilization",
                "kv_cache_memory": "--kv-cache-memory-bytes",
                "num_gpu_blocks_override": "--num-gpu-blocks-override"}
#: the model facts vLLM derives, pinned at their resolved value
_DERIVED = ("dtype", "max_model_len")
#: engine arguments about the Mamba state (only for models that keep one)
_MAMBA = ("mamba_cache_mode", "mamba_block_size", "mamba_ssm_cache_dtype", "mamba_cache_dtype")
#: switches whose False is vLLM's default: never pinned off
_OFF_BY_DEFAULT = ("calculate_kv_scales", "disable_sliding_window")


def _release(result: RunResult) -> releases.Release:
    name = result.vllm_version
    return releases.get(name) if releases.known(name) else releases.first()


def _resolved(config: Mapping[str, Any], field: str) -> Any:
    section, name = field.split(".")
    return (config.get(section) or {}).get(name)


def serve_flags(result: RunResult, *, memory: Mapping[str, Any] | None = None,
                extra: Sequence[str] = ()) -> list[str]:
    """The ``vllm serve`` flags that pin *result* (see the module doc): engine arguments,
    pooling, the memory flags in *memory* (impact option name -> value, those the caller
    gave) and *extra*, the caller's other ``vllm serve`` tokens, in that order."""
    doc_config = result.to_dict().get("config") or {}
    cfg = result.config
    release = _release(result)
    given = dict(cfg.engine_args)
    changed = {c.field for c in result.changes}
    start_block = _start_block(result)
    info = cfg.model_config.arch_info
    has_mamba = bool(info is not None and info.has_mamba_state)
    args: dict[str, Any] = {}
    for name, arg in ENGINE_ARGS.items():
        if not arg.config_field:  # read by the loader (--hf-overrides, --trust-remote-code): as given
            if given.get(name) not in (None, False):
                args[name] = given[name]
            continue
        if name == "runner":  # said below, with the pooler it runs
            continue
        if name == "block_size" and start_block is not None:
            args[name] = start_block
            continue
        value = _resolved(doc_config, arg.config_field)
        if arg.config_field in changed:
            pick = value
        elif name in given:
            pick = given[name]
        elif name in _DERIVED:
            pick = value
        else:
            continue
        if pick is None or (name in _OFF_BY_DEFAULT and pick is False):
            continue
        if name in _MAMBA and not has_mamba and name not in given:
            continue
        if name == "mamba_block_size" and name not in given:
            continue
        if name in release.ignored_arguments:
            continue
        args[name] = pick
    flags = [f for f in to_flags(args) if f not in release.sets_aside]
    if cfg.model_config.runner_type == "pooling":
        flags += ["--runner", "pooling"]
        pooler = {k: v for k, v in (doc_config.get("pooler_config") or {}).items() if v is not None}
        if pooler:
            flags += ["--pooler-config", json.dumps(pooler, separators=(",", ":"))]
    elif cfg.model_config.runner_type == "draft" or given.get("runner") == "generate":
        # a generative runner named: kept (a checkpoint that would otherwise pool stays generative)
        flags += ["--runner", cfg.model_config.runner_type]
    for option, flag in MEMORY_FLAGS.items():
        value = (memory or {}).get(option)
        if value is None and option == "kv_cache_memory":
            value = (memory or {}).get("kv_cache_memory_bytes")
        if value is not None:
            flags += [flag, str(value)]
    if (memory or {}).get("enforce_eager"):
        flags.append("--enforce-eager")
    return flags + _keep(extra, release.sets_aside)


def _start_block(result: RunResult) -> int | None:
    """The block size a start-up decision of the run's release set (None: none did, or the
    release decides the block size at config time)."""
    from enginecfg.commands.findings import start_decision

    startup = start_decision(result)
    if startup is None:
        return None
    if not any(d.field == "block_size" and d.old != d.new for d in startup.decisions):
        return None
    return startup.block_size


def _keep(tokens: Sequence[str], drop: frozenset[str]) -> list[str]:
    """*tokens* without the options in *drop* and the values that follow them."""
    out: list[str] = []
    skipping = False
    for tok in tokens:
        if tok.startswith("-"):
            skipping = tok.split("=", 1)[0] in drop
        if not skipping:
            out.append(tok)
    return out


def not_taken(result: RunResult, extra: Sequence[str] = ()) -> list[str]:
    """The options of *extra* (a pasted command's other ``vllm serve`` tokens) that the run's
    release does not take, which :func:`serve_flags` leaves out."""
    drop = _release(result).sets_aside
    return [t.split("=", 1)[0] for t in extra if t.startswith("-") and t.split("=", 1)[0] in drop]


def serve_command(result: RunResult, *, memory: Mapping[str, Any] | None = None,
                  extra: Sequence[str] = ()) -> list[str]:
    """``vllm serve MODEL [--revision COMMIT] FLAGS...`` as tokens (a repo id is pinned at the
    commit it was read at)."""
    source = result.config.source or {}
    pin = ["--revision", source["commit"]] if source.get("kind") == "hub" and source.get("commit") else []
    return ["vllm", "serve", str(result.config.model), *pin, *serve_flags(result, memory=memory, extra=extra)]
