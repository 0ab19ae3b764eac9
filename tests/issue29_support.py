"""The real vLLM 0.19.0's answers on issue 29's questions (``tests/issue29_oracle``: RULES.md says
the rule each item shows; the JSON files are the answers, ``cases.py`` and the ``ask_*.py``
scripts beside them asked for them), and how enginecfg's answer is held against one.

A case is run through an entry point of enginecfg's (``resolve``: ``Pipeline().resolve(path,
**args)``; ``run``: ``Pipeline().run(EngineConfig.from_pretrained(path, **args))``) and
compared with :func:`check`:

- where vLLM raised, enginecfg raises the same error: vLLM's own refusal (its root
  exception's text, its type) as a :class:`ConfigRejectedError` carrying that text; a field
  vLLM's own type check refused (pydantic's ``loc``) as an :class:`InvalidInputError` naming
  the engine argument behind it; a crash of vLLM's (``ZeroDivisionError``) as an
  :class:`InvalidInputError` naming the argument that causes it;
- where vLLM resolved, enginecfg resolves with the same values in every field both have, or
  refuses deliberately (a nonpositive block size or max_model_len, :data:`DELIBERATE`) as an
  :class:`InvalidInputError` naming that argument, raised after every check of vLLM's: the
  failed run's document then holds the config as vLLM made it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from support import REPO

HERE = REPO / "tests" / "issue29_oracle"


def _load(name: str) -> dict[str, Any]:
    return json.loads((HERE / name).read_text())


CONFIG_TIME = _load("config_time.json")["results"]
CLI = _load("cli.json")["results"]
HUB = _load("hub.json")["results"]

#: engine arguments of the oracle's cases that enginecfg does not take (``vllm serve`` options
#: a pasted line sets aside): cases that give one are not run here
NOT_TAKEN = frozenset({"runner", "pooler_config", "quantization", "gpu_memory_utilization",
                       "prefix_caching_hash_algo", "max_num_partial_prefills", "kv_events_config",
                       "skip_tokenizer_init", "generation_config"})

#: config sections both vLLM's answers and enginecfg's run document have
SECTIONS = ("model_config", "cache_config", "attention_config", "scheduler_config", "parallel_config",
            "pooler_config")

#: what vLLM's pydantic check of a field refused -> the engine arguments that can be behind it
#: (the scheduler's defaults are derived from max_model_len and max_num_seqs)
ARG_OF_FIELD = {"cache_dtype": {"kv_cache_dtype"},
                "max_num_batched_tokens": {"max_num_batched_tokens", "max_num_seqs", "max_model_len"},
                "max_num_seqs": {"max_num_seqs", "max_num_batched_tokens", "max_model_len"}}


def cases(prefix: str, table: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The cases whose name starts with *prefix* that enginecfg can be given."""
    return [c for c in (CONFIG_TIME if table is None else table)
            if c["name"].startswith(prefix) and not set(c["args"]) & NOT_TAKEN]


def case_path(case: dict[str, Any]) -> str:
    return str((HERE / case["config_dir"]).resolve())


def deliberate(case: dict[str, Any]) -> str | None:
    """The engine argument enginecfg refuses where vLLM accepts it while building its config
    (and fails, or serves nonsense, once the engine starts): a nonpositive block size, a
    max_model_len of 0 or below (-1 means "the model's own")."""
    args = case["args"]
    if isinstance(args.get("block_size"), int) and args["block_size"] <= 0:
        return "block_size"
    if isinstance(args.get("max_model_len"), int) and args["max_model_len"] <= 0 and args["max_model_len"] != -1:
        return "max_model_len"
    return None


class Env:
    """The case's environment variables, set for a block."""

    def __init__(self, case: dict[str, Any]):
        self.env = case.get("env") or {}

    def __enter__(self) -> None:
        self.old = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc: Any) -> None:
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_case(case: dict[str, Any], entry: str):
    """The case through one entry point: a RunResult, or the EngineCfgError it raised."""
    from enginecfg import EngineCfgError, EngineConfig, Pipeline
    from enginecfg.pipeline.plugins import builtin_stages

    path = case_path(case)
    pipeline = Pipeline(stages=builtin_stages(), gpu_validation="off")
    with Env(case):
        try:
            if entry == "resolve":
                return pipeline.resolve(path, **case["args"])
            if entry == "run":
                return pipeline.run(EngineConfig.from_pretrained(path, **case["args"]))
            if entry == "run_many":
                return pipeline.run_many([path], errors="return", **case["args"])[0]
            if entry == "from_pretrained_many":
                (cfg,) = EngineConfig.from_pretrained_many([path], **case["args"])
                return pipeline.run(cfg)
            raise ValueError(entry)
        except EngineCfgError as exc:
            return exc


def _words(text: str) -> str:
    return " ".join(text.split())


def vllm_text(error: dict[str, Any]) -> str:
    """What vLLM's refusal says, without pydantic's wrapping."""
    return _words(error.get("root_message") or error["message"])


def vllm_type(error: dict[str, Any]) -> str:
    return error.get("root_type") or error["type"]


def field_errors(error: dict[str, Any]) -> list[str]:
    """The fields vLLM's own type check refused (pydantic's ``loc``), in its order."""
    return [v["loc"][0] for v in error.get("validation_errors") or () if v.get("loc")]


def check(case: dict[str, Any], got: Any) -> None:
    """enginecfg's answer *got* (a RunResult or an EngineCfgError) is vLLM's answer to *case*."""
    from enginecfg import ConfigRejectedError, EngineCfgError, InvalidInputError
    from enginecfg.pipeline.errors import StageError

    name = case["name"]
    if case["status"] == "error":
        error = case["error"]
        assert isinstance(got, EngineCfgError), f"{name}: vLLM refused ({vllm_text(error)[:120]}), enginecfg resolved"
        assert not isinstance(got, StageError), f"{name}: a stage crashed: {got}"
        text = _words(str(got))
        fields = field_errors(error)
        if fields:
            assert isinstance(got, InvalidInputError), f"{name}: {text}"
            assert got.field in ARG_OF_FIELD.get(fields[0], {fields[0]}), f"{name}: {got.field} for {fields}: {text}"
        elif vllm_type(error) == "ZeroDivisionError":
            assert isinstance(got, InvalidInputError) and got.field in case["args"], f"{name}: {text}"
        elif error["type"] == "ValueError" and "Unknown attention backend" in error["message"]:
            assert isinstance(got, InvalidInputError) and got.field == "attention_backend", f"{name}: {text}"
            assert _words(error["message"]).split(". ")[0] in text
        else:
            want = vllm_text(error)
            if error["type"] == "StrictDataclassClassValidationError":  # transformers' validator
                want = want.split("ValueError: ", 1)[-1]
            assert isinstance(got, ConfigRejectedError), f"{name}: want {want[:120]!r}, got {type(got).__name__}: {text}"
            assert want in text, f"{name}: want {want!r}, got {text!r}"
            assert got.vllm_type == vllm_type(error), f"{name}: {got.vllm_type}"
        return
    refused = deliberate(case)
    if refused is not None:
        assert isinstance(got, InvalidInputError) and got.field == refused, f"{name}: {got!r}"
        assert got.stage == "engine-args"
        doc = got.document                      # the run went through every step of vLLM's
        assert doc["status"] == "invalid" and doc["config"] is not None
    else:
        assert not isinstance(got, EngineCfgError), f"{name}: vLLM resolved, enginecfg: {got!r}"
        doc = got.to_dict()
        assert doc["status"] == "resolved"
    compare_fields(case, doc["config"], got)


def compare_fields(case: dict[str, Any], config: dict[str, Any], got: Any) -> None:
    """Every field of vLLM's final config that enginecfg's run document has holds vLLM's value.

    The scheduler's token budget and sequence limit are left unset in enginecfg's config
    (vLLM's defaults for them are worked out where they are needed): the defaults enginecfg
    works out are compared instead."""
    from enginecfg.pipeline.models.engine_defaults import max_num_batched_tokens, max_num_seqs

    name = case["name"]
    for section in SECTIONS:
        want = case["final"].get(section)
        have = config.get(section)
        if want is None or have is None:
            assert (want is None) == (have is None), f"{name}: {section}: vLLM {want!r}, enginecfg {have!r}"
            continue
        for field, value in want.items():
            if field not in have:
                continue
            if section == "scheduler_config" and field in ("max_num_batched_tokens", "max_num_seqs") \
                    and have[field] is None:
                if not isinstance(got, Exception):
                    fn = max_num_batched_tokens if field == "max_num_batched_tokens" else max_num_seqs
                    assert fn(got.config) == value, f"{name}: default {field}"
                continue
            assert have[field] == value, f"{name}: {section}.{field}: vLLM {value!r}, enginecfg {have[field]!r}"
