"""A run's facts as people read them: who ran it, where its model came from, its GPU
validation and its KV-cache capacity, as rows of (key, value); and times as people type
them (:func:`parse_time`).  ``enginecfg show`` prints
them as tables and the audit page renders them; both read a run as
:func:`enginecfg.store.queries.get_run` returns it."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any

from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["who_ran", "release_rows", "source_rows", "validation_rows", "capacity_rows", "startup_log_rows",
           "parse_time"]

_REL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(text: str, *, flag: str = "--since") -> float:
    """``2025-12-01``, ``2025-12-01T10:00[:00][+02:00]`` (naive = UTC) or ``30m``/``2h``/``7d`` ago."""
    m = _REL.match(text)
    if m:
        return _dt.datetime.now(_dt.timezone.utc).timestamp() - float(m[1]) * _UNIT_S[m[2]]
    try:
        when = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInputError.for_value(
            flag.lstrip("-"), text, "an ISO date or time (2025-12-01, 2025-12-01T10:00) or an "
            "age such as 30m, 2h, 7d", flag=flag) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return when.timestamp()


def who_ran(run: dict[str, Any]) -> str:
    """The actor of a run as people read it: ``ci-nightly (os user deploy)``, ``deploy``, or
    empty for a run recorded before actors were (revision 0007_actor)."""
    actor, user = run.get("actor"), run.get("os_user")
    if actor and user:
        return f"{actor} (os user {user})"
    return actor or user or ""


def release_rows(run: dict[str, Any]) -> list[list[Any]]:
    """The vLLM release whose rules decided a run, and the GPU the engine starts on: the
    card as the run document names it (device, memory, compute capability), else the
    store's ``gpu`` column, else not recorded (a run recorded before GPUs were)."""
    rows: list[list[Any]] = [["vLLM release", run.get("vllm_version")]]
    result = run.get("result") if isinstance(run.get("result"), dict) else {}
    card = result.get("gpu")
    if isinstance(card, dict) and card.get("name"):
        rows.append(["GPU", card.get("name")])
        if card.get("device_name"):
            rows.append(["device", card.get("device_name")])
        if isinstance(card.get("memory_bytes"), (int, float)):
            rows.append(["memory", f"{card['memory_bytes']:,} bytes "
                                   f"({card['memory_bytes'] / 1024 ** 3:,.2f} GiB)"])
        if card.get("capability"):
            rows.append(["compute capability", card.get("capability")])
    elif run.get("gpu"):
        rows.append(["GPU", run.get("gpu")])
    else:
        rows.append(["GPU", "(not recorded: a run recorded before the GPU was)"])
    return rows


def source_rows(run: dict[str, Any]) -> list[list[Any]]:
    """Where a run's model came from: the folder, or the repo and commit, and the config's
    sha256 (the other files read are in ``--json``)."""
    src = run.get("source")
    if not isinstance(src, dict):
        return [["model", run.get("model")],
                ["where", "not recorded (an in-memory config, a config that did not load, "
                          "or a run recorded before sources were)"]]
    rows: list[list[Any]] = [["kind", src.get("kind")]]
    if src.get("kind") == "hub":
        rows += [["repo", src.get("repo_id")], ["revision", src.get("revision") or "(default)"],
                 ["commit", src.get("commit")]]
        if src.get("offline"):
            rows.append(["offline", "yes (the cached snapshot)"])
    else:
        rows.append(["path", src.get("path")])
    files = {f.get("name"): f for f in src.get("files") or [] if isinstance(f, dict)}
    config = files.get("config.json")
    rows.append(["config.json sha256", config.get("sha256") if config else "(not read)"])
    others = sorted(n for n in files if n != "config.json")
    if others:
        rows.append(["other files read", ", ".join(others)])
    return rows


def validation_rows(run: dict[str, Any]) -> list[list[Any]]:
    """The GPU-validation outcome of a run (its checks follow in their own table)."""
    result = run.get("result") if isinstance(run.get("result"), dict) else {}
    val = result.get("validation")
    if not isinstance(val, dict):
        return [["status", "not reached (the run ended before GPU validation)"]]
    checks = run.get("validation_checks") or []
    passed = sum(1 for c in checks if c.get("passed"))
    rows = [["status", val.get("status")], ["mode", val.get("mode")],
            ["device", val.get("device") or "(none)"]]
    if val.get("reason"):
        rows.append(["reason", val.get("reason")])
    rows.append(["checks", f"{passed} of {len(checks)} passed" if checks else "none ran"])
    return rows


def capacity_rows(run: dict[str, Any]) -> list[list[Any]]:
    """The KV-cache figures of a run (the ``impact`` fact; ``enginecfg explain`` says why)."""
    result = run.get("result") if isinstance(run.get("result"), dict) else {}
    imp = result.get("impact")
    if not isinstance(imp, dict):
        return [["KV cache", "not computed (the run ended before the impact stage, or it was "
                             "skipped)"]]
    mem = imp.get("memory") if isinstance(imp.get("memory"), dict) else {}

    def num(v: Any, fmt: str = "{:,}") -> str:
        return "" if v is None else fmt.format(v) if isinstance(v, (int, float)) else str(v)

    rows = [["KV tokens", num(imp.get("kv_tokens"))], ["KV blocks", num(imp.get("num_blocks"))],
            ["max_model_len", num(imp.get("max_model_len"))],
            ["max concurrency", num(imp.get("max_concurrency"), "{:,.2f}x")
             + (f" at {num(imp.get('max_model_len'))} tokens a request"
                if imp.get("max_model_len") else "")],
            ["largest max_model_len that fits", num(imp.get("max_model_len_fits"))]]
    if mem.get("gpu"):
        rows.append(["GPU", str(mem.get("gpu"))])
    if "starts" in imp:
        rows.append(["starts", "yes" if imp.get("starts") else f"no: {imp.get('start_error')}"])
    if mem:
        gib = 1024 ** 3
        rows.append(["memory for the KV cache",
                     f"{mem.get('kv_cache_memory', 0) / gib:,.2f} GiB ({mem.get('source')}; "
                     f"{mem.get('gpu_memory_bytes', 0) / gib:,.2f} GiB GPU x "
                     f"{mem.get('gpu_memory_utilization')})"
                     if isinstance(mem.get("kv_cache_memory"), (int, float))
                     and isinstance(mem.get("gpu_memory_bytes"), (int, float)) else ""])
    return rows


def startup_log_rows(run: dict[str, Any]) -> list[list[Any]]:
    """A ``check-log`` run's observation (the ``startup_log`` fact): one row per logged line
    checked, ``[line, logged line, logged, enginecfg, verdict]``; none for another run."""
    result = run.get("result") if isinstance(run.get("result"), dict) else {}
    observed = result.get("startup_log")
    if not isinstance(observed, dict):
        return []

    def text(v: Any) -> str:
        if isinstance(v, dict) and "low" in v and "high" in v:
            return f"{text(v['low'])} to {text(v['high'])}"
        return "-" if v is None else f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    rows = []
    for c in observed.get("checks") or []:
        verdict = "not checked" if c.get("agrees") is None else (
            ("agrees" if c.get("agrees") else "differs") if c.get("exact", True)
            else ("within 5%" if c.get("agrees") else "estimate off"))
        rows.append([c.get("line"), c.get("name"), text(c.get("logged")), text(c.get("expected")), verdict])
    return rows
