"""Ask the real vLLM 0.19.0 about every case of ``typed_cases.py`` and write ``expected.json``.

    python tests/typed_oracle/make_expected.py --oracle ORACLE_DIR

ORACLE_DIR holds ``run_oracle.py``, its venv (``venv19``) and the transformers 5.23 overlay
(``tf523-overlay``); see its README (``$ENGINECFG_ORACLE`` works too).  The folders are built
in a temp dir.  Per case ``expected.json`` keeps what the fixtures keep: the error (type at the
root, message, where, the fields whose own type check failed) or the resolved fields, the
page facts of the hybrid alignment and the config module's log lines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from typed_cases import BASE, all_cases, build  # noqa: E402

MODEL = ("architecture", "dtype", "max_model_len", "is_hybrid", "is_attention_free", "use_mla",
         "head_size", "num_kv_heads", "total_num_kv_heads", "num_attention_heads",
         "supports_mamba_prefix_caching", "mamba_chunk_size", "quantization")
CACHE = ("block_size", "cache_dtype", "enable_prefix_caching", "mamba_cache_mode",
         "mamba_block_size", "mamba_page_size_padded", "mamba_ssm_cache_dtype", "mamba_cache_dtype")
PAGES = ("attn_page_size_1_token", "kernel_block_alignment_size", "mamba_page_size",
         "mamba_state_shapes", "mamba_state_dtypes")


def _plain(value):
    return value.removeprefix("torch.") if isinstance(value, str) else value


def _entry(r: dict) -> dict:
    err = r["error"]
    if err:
        bad = [e["loc"][0] for e in err.get("validation_errors") or []
               if not e.get("original_type") and e.get("loc")]
        return {"status": "error", "type": err.get("root_type") or err["type"],
                "message": err.get("root_message") or err["message"], "stage": err.get("stage"),
                "invalid_fields": bad}
    cfg = r["after_verify"] or {}
    mc, cc = cfg.get("model_config") or {}, cfg.get("cache_config") or {}
    pages = r.get("page_sizes") or {}
    return {"status": "resolved",
            "model_config": {k: _plain(mc.get(k)) for k in MODEL},
            "cache_config": {k: _plain(cc.get(k)) for k in CACHE},
            "enable_chunked_prefill": (cfg.get("scheduler_config") or {}).get("enable_chunked_prefill"),
            "pages": {k: _plain(pages[k]) if not isinstance(pages[k], list) else
                      [_plain(v) for v in pages[k]] for k in PAGES if k in pages},
            "messages": [[m["level"], m["message"]] for m in r.get("logs") or []]}


def dump(doc: dict) -> str:
    """The document with one case per line (diffs stay readable, the file small)."""
    lines = [f" {json.dumps(name)}: {json.dumps(entry, sort_keys=True)}"
             for name, entry in sorted(doc["results"].items())]
    return ("{\"produced_by\": " + json.dumps(doc["produced_by"], sort_keys=True) + ",\n"
            "\"results\": {\n" + ",\n".join(lines) + "\n}}\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", default=os.environ.get("ENGINECFG_ORACLE"),
                    required="ENGINECFG_ORACLE" not in os.environ)
    ap.add_argument("--python", help="the oracle venv's python (default ORACLE/venv19/bin/python)")
    ap.add_argument("--limit", type=int, help="only the first N cases (a trial run; nothing written)")
    ns = ap.parse_args()
    oracle = Path(ns.oracle).resolve()
    python = ns.python or str(oracle / "venv19" / "bin" / "python")
    todo = all_cases()[:ns.limit] if ns.limit else all_cases()
    with tempfile.TemporaryDirectory() as td:
        root = Path(td)
        paths = build(root / "models")
        listed = [{"name": name, "config_dir": str(paths[name]), "args": {}} for name, _ in todo]
        (root / "cases.json").write_text(json.dumps(listed))
        out = root / "results.json"
        # a neutral working directory: vLLM's model-inspection subprocess runs `python -m`
        subprocess.run([python, str(oracle / "run_oracle.py"), str(root / "cases.json"), "-o",
                        str(out), "--extra-path", str(oracle / "tf523-overlay"),
                        "--cache-dir", str(root / "oracle-cache")], check=True, cwd=root)
        raw = json.loads(out.read_text())
    results = {}
    for (name, _), r in zip(todo, raw["results"]):
        assert r["name"] == name
        results[name] = _entry(r)
    if ns.limit:
        print(json.dumps(results, indent=1))
        return 0
    doc = {"produced_by": {"vllm": raw["vllm_version"], "transformers": raw["transformers_version"],
                           "platform": raw["platform"], "base": BASE},
           "results": results}
    (HERE / "expected.json").write_text(dump(doc))
    print(f"wrote {len(results)} results to {HERE / 'expected.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
