#!/usr/bin/env python3
"""Ask the real vLLM 0.19.0 again about every fixture case and rewrite ``cases.json`` and
``vllm-crashes.json`` in this folder.

A development tool, never a test dependency (see README.md).  It needs the vLLM 0.19.0
oracle: ``run_oracle.py`` and its venv as ``ORACLE/README.md`` builds them (``venv19``, the
transformers 5.23.0 overlay ``tf523-overlay`` and the 5.5.0 overlay ``tf5-overlay``)::

    python tests/data/vllm-0.19.0/make_cases.py --oracle ORACLE
    python tests/data/vllm-0.19.0/make_cases.py --oracle ORACLE --python REF/venv19/bin/python \\
        --overlay REF/tf523-overlay --gemma-overlay REF/tf5-overlay
    python tests/data/vllm-0.19.0/make_cases.py --from-results A.json B.json   # convert only

(``ORACLE`` defaults to ``$ENGINECFG_ORACLE``; the venv and overlays default to folders of
that name inside it.)  Any Python 3.11 runs this script; only the oracle runs in its venv.

What it does:

1. The case list is the one the two files already hold (``cases.json`` first, then
   ``vllm-crashes.json``), in their order: a case's name, config folder and engine arguments.
2. It writes them as oracle cases (``config_dir`` an absolute path into ``configs/``) and runs
   ``run_oracle.py`` twice on vLLM's CUDA platform with the emulated H200 (the oracle's
   defaults: capability 9.0, 143771 MiB, 8 GPUs, usage context ``OPENAI_API_SERVER``): the
   Gemma 4 configs (``model_type`` ``gemma4*``) with transformers 5.5.0 in front, every other
   config with transformers 5.23.0 in front.
3. Each result becomes a case: the fields of the snapshot taken right after
   ``VllmConfig.try_verify_and_update_config`` that the fixtures keep (``FIELDS``), the page
   facts for hybrid models, the records of vLLM's config module with the model path written
   ``{model}``, or the error at the root (pydantic's wrapper removed) and where it was raised.
   A crash inside vLLM's own code (``CRASHES``) goes to ``vllm-crashes.json`` instead.
4. It writes both files (``json.dumps(..., indent=1)`` and a newline, as they are) and says
   which cases changed.  A changed ``cases.json`` has a new sha256: update ``CASES_SHA256`` in
   ``tests/test_self_contained.py`` in the same commit, with the reason.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases.json"
CRASH_FILE = HERE / "vllm-crashes.json"

#: the fields of the oracle's snapshot each case keeps, per section, in this order
FIELDS: dict[str, tuple[str, ...]] = {
    "model_config": ("architecture", "dtype", "max_model_len", "is_hybrid", "is_attention_free",
                     "use_mla", "head_size", "num_kv_heads", "total_num_kv_heads",
                     "supports_mamba_prefix_caching", "mamba_chunk_size"),
    "cache_config": ("block_size", "user_specified_block_size", "cache_dtype",
                     "calculate_kv_scales", "enable_prefix_caching", "mamba_cache_mode",
                     "mamba_block_size", "mamba_page_size_padded", "mamba_ssm_cache_dtype",
                     "mamba_cache_dtype"),
    "attention_config": ("backend",),
    "scheduler_config": ("enable_chunked_prefill",),
    "parallel_config": ("tensor_parallel_size",),
}
#: the pooler's fields kept (``pooler_config`` is null for a model that does not pool)
POOLER_FIELDS = ("seq_pooling_type", "tok_pooling_type")
#: the page facts of a hybrid model (``pages`` is null for every other model)
PAGE_FIELDS = ("attn_page_size_1_token", "kernel_block_alignment_size", "mamba_page_size",
               "mamba_state_shapes", "mamba_state_dtypes")
#: exceptions that are vLLM failing inside its own code, not an answer
CRASHES = frozenset({"AttributeError", "TypeError", "KeyError", "IndexError",
                     "ZeroDivisionError"})
#: the logger whose records are a case's ``messages``
CONFIG_LOGGER = "vllm.model_executor.models.config"
#: the engine argument behind a field of vLLM's config classes, where the names differ
ARG_OF_FIELD = {"cache_dtype": "kv_cache_dtype"}
PLATFORM = "CUDA, {name}, compute capability {major}.{minor} (device queries emulated)"


class OracleOutputError(ValueError):
    """An oracle result this script cannot turn into a case (say which, and why)."""


def needs_gemma_overlay(config_dir: Path) -> bool:
    """Gemma 4 configs are read with transformers 5.5.0: vLLM 0.19.0's own code cannot read
    what 5.23 makes of them (``head_dim`` became a per-layer attribute)."""
    model_type = json.loads((config_dir / "config.json").read_text()).get("model_type")
    return isinstance(model_type, str) and model_type.startswith("gemma4")


def load_case_list() -> list[dict[str, Any]]:
    """``[{"name", "config", "engine_args"}]``: cases.json's cases, then the crashes."""
    cases = json.loads(CASES.read_text())["cases"]
    crashes = json.loads(CRASH_FILE.read_text()) if CRASH_FILE.exists() else []
    return [{"name": c["name"], "config": c["config"], "engine_args": c["engine_args"]}
            for c in [*cases, *crashes]]


def oracle_cases(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The oracle's case format, with absolute config folders (so ``{model}`` is known)."""
    return [{"name": c["name"], "config_dir": str(HERE / c["config"]), "args": c["engine_args"]}
            for c in cases]


def _value(name: str, where: str, value: Any) -> Any:
    if isinstance(value, dict) and "__error__" in value:
        raise OracleOutputError(f"{name}: {where} could not be read: {value['__error__']}")
    return value


def _pick(name: str, section: str, source: dict[str, Any], fields: tuple[str, ...]) -> dict:
    missing = [f for f in fields if f not in source]
    if missing:
        raise OracleOutputError(f"{name}: {section} has no {', '.join(missing)}")
    return {f: _value(name, f"{section}.{f}", source[f]) for f in fields}


def messages_of(result: dict[str, Any], model: str) -> list[dict[str, str]]:
    """The config module's records, with the model path as ``{model}``."""
    return [{"level": r["level"], "message": r["message"].replace(model, "{model}")}
            for r in result.get("logs") or []
            if r.get("logger", CONFIG_LOGGER) == CONFIG_LOGGER]


def _root(err: dict[str, Any]) -> dict[str, Any]:
    """The exception at the root: the one a pydantic wrapper holds (its message may be
    empty, as a bare ``assert``'s is), else the one raised."""
    if err.get("root_type"):
        return {"type": err["root_type"], "message": err.get("root_message") or ""}
    return {"type": err["type"], "message": err["message"]}


def error_of(result: dict[str, Any], engine_args: dict[str, Any]) -> dict[str, Any]:
    """vLLM's error at the root: the exception a pydantic ``ValidationError`` wraps, or the one
    raised.  A pydantic type check of an engine argument (no exception inside) is
    ``invalid-input`` with the ``field``: the engine argument behind the refused field."""
    err = result["error"]
    inner = err.get("validation_errors") or []
    if err["type"] == "ValidationError" and inner and not any(e.get("original_type") for e in inner):
        loc = inner[0].get("loc") or [None]
        field = loc[0] if loc[0] in engine_args else ARG_OF_FIELD.get(loc[0], loc[0])
        return {"type": "invalid-input", "message": err["message"], "field": field,
                "stage": err.get("stage")}
    return {**_root(err), "stage": err.get("stage")}


def expected_of(result: dict[str, Any], model: str) -> dict[str, Any]:
    """A case's ``expected`` from one oracle result (``model``: the path vLLM was given)."""
    name = result["name"]
    out: dict[str, Any] = {"messages": messages_of(result, model)}
    if result.get("error"):
        out["status"] = "error"
        out["error"] = error_of(result, result.get("args") or {})
        return out
    snap = result.get("after_verify")
    if not isinstance(snap, dict) or "__error__" in snap or "model_config" not in snap:
        raise OracleOutputError(f"{name}: no snapshot after try_verify_and_update_config: {snap!r}")
    config = {section: _pick(name, section, snap[section], fields)
              for section, fields in FIELDS.items()}
    pooler = snap.get("pooler_config")
    config["pooler_config"] = None if pooler is None else _pick(name, "pooler_config", pooler,
                                                                  POOLER_FIELDS)
    config["hf_config"] = snap.get("hf_config") or {}
    pages = None
    if config["model_config"]["is_hybrid"]:
        facts = result.get("page_sizes") or {}
        for key in ("__error__", "attn_error", "mamba_error"):
            if key in facts:
                raise OracleOutputError(f"{name}: page facts: {facts[key]}")
        pages = _pick(name, "page_sizes", facts, PAGE_FIELDS)
    out.update(status="resolved", config=config, pages=pages)
    return out


def is_crash(result: dict[str, Any]) -> bool:
    err = result.get("error")
    return bool(err) and (err.get("root_type") or err["type"]) in CRASHES


def crash_of(case: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    err = result["error"]
    return {**case, "vllm_error": {**_root(err), "raised_at": err.get("raised_at")}}


def produced_by(main: dict[str, Any], gemma: dict[str, Any] | None) -> dict[str, Any]:
    platform = main["platform"]
    major, minor = platform["device_capability"]
    out = {"vllm": main["vllm_version"], "transformers": main["transformers_version"],
           "platform": PLATFORM.format(name=platform["device_name"], major=major, minor=minor),
           "usage_context": main["usage_context"]}
    if gemma is not None:
        out["transformers_gemma4"] = gemma["transformers_version"]
    return out


def build(cases: list[dict[str, Any]], main: dict[str, Any], gemma: dict[str, Any] | None
          ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(cases.json, vllm-crashes.json)`` from the case list and the oracle's two outputs."""
    by_name: dict[str, tuple[dict, dict]] = {}
    for run in (main, gemma):
        for res in (run or {}).get("results", []):
            by_name[res["name"]] = (res, run)
    fixtures, crashes = [], []
    for case in cases:
        if case["name"] not in by_name:
            raise OracleOutputError(f"{case['name']}: the oracle gave no result")
        res, run = by_name[case["name"]]
        config_dir = HERE / case["config"]
        if is_crash(res):
            crashes.append(crash_of(case, res))
            continue
        entry = {**case, "constructed": (config_dir / "SOURCE.txt").exists(),
                 "expected": expected_of(res, str(config_dir))}
        if run is gemma:
            entry["transformers"] = run["transformers_version"]
        fixtures.append(entry)
    return {"produced_by": produced_by(main, gemma), "cases": fixtures}, crashes


def dump(data: Any) -> str:
    return json.dumps(data, indent=1) + "\n"


def run_oracle(ns: argparse.Namespace, cases: list[dict[str, Any]], overlay: Path, work: Path,
               tag: str) -> dict[str, Any] | None:
    if not cases:
        return None
    cases_file, out = work / f"cases-{tag}.json", work / f"results-{tag}.json"
    cases_file.write_text(dump(oracle_cases(cases)))
    cmd = [str(ns.python), str(ns.oracle / "run_oracle.py"), str(cases_file), "-o", str(out),
           "--extra-path", str(overlay), "--cache-dir", str(ns.cache_dir or work / "cache")]
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--oracle", type=Path, default=os.environ.get("ENGINECFG_ORACLE"),
                    help="the oracle's folder, holding run_oracle.py (default: $ENGINECFG_ORACLE)")
    ap.add_argument("--python", type=Path, help="the oracle venv's python "
                    "(default: ORACLE/venv19/bin/python)")
    ap.add_argument("--overlay", type=Path, help="transformers 5.23.0 overlay "
                    "(default: ORACLE/tf523-overlay)")
    ap.add_argument("--gemma-overlay", type=Path, help="transformers 5.5.0 overlay for Gemma 4 "
                    "(default: ORACLE/tf5-overlay)")
    ap.add_argument("--cache-dir", type=Path, help="the oracle's HF/vLLM caches (default: a "
                    "temporary folder)")
    ap.add_argument("--from-results", type=Path, nargs="+", metavar="JSON",
                    help="convert these run_oracle.py outputs (the main run, then the Gemma 4 "
                         "run) instead of running the oracle")
    ap.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    ns = ap.parse_args(argv)

    cases = load_case_list()
    if ns.from_results:
        outputs = [json.loads(p.read_text()) for p in ns.from_results]
        main_out, gemma_out = outputs[0], (outputs[1] if len(outputs) > 1 else None)
    else:
        if ns.oracle is None:
            ap.error("--oracle DIR (or ENGINECFG_ORACLE) is required")
        ns.oracle = ns.oracle.resolve()
        ns.python = ns.python or ns.oracle / "venv19" / "bin" / "python"
        overlay = ns.overlay or ns.oracle / "tf523-overlay"
        gemma_overlay = ns.gemma_overlay or ns.oracle / "tf5-overlay"
        gemma_cases = [c for c in cases if needs_gemma_overlay(HERE / c["config"])]
        other_cases = [c for c in cases if c not in gemma_cases]
        with tempfile.TemporaryDirectory(prefix="enginecfg-fixtures-") as tmp:
            main_out = run_oracle(ns, other_cases, overlay, Path(tmp), "main")
            gemma_out = run_oracle(ns, gemma_cases, gemma_overlay, Path(tmp), "gemma4")

    fixtures, crashes = build(cases, main_out, gemma_out)
    old = {c["name"]: c for c in json.loads(CASES.read_text())["cases"]}
    changed = [c["name"] for c in fixtures if old.get(c["name"]) != c]
    moved = [c["name"] for c in crashes if c["name"] in old]
    text = dump(fixtures)
    print(f"{len(fixtures['cases'])} cases ({len(changed)} changed), {len(crashes)} crashes "
          f"({len(moved)} were cases)", file=sys.stderr)
    for name in changed[:50]:
        print(f"  changed: {name}", file=sys.stderr)
    print(f"cases.json sha256 {hashlib.sha256(text.encode()).hexdigest()}", file=sys.stderr)
    if not ns.dry_run:
        CASES.write_text(text)
        CRASH_FILE.write_text(dump(crashes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
