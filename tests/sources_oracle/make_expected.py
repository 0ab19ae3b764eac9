"""Run the real vLLM 0.19.0 on the model folders of ``cases.py`` and write ``expected.json``.

    python tests/sources_oracle/make_expected.py --oracle ORACLE_DIR [--python VENV_PYTHON]

ORACLE_DIR holds ``run_oracle.py`` and its venv (``venv19``) and transformers overlay
(``tf523-overlay``); see its README.  The folders are built in a temp dir; ``expected.json``
keeps, per case, vLLM's config, its messages (every vLLM log record: the dtype and
max-model-len lines live outside the config module) and its error.
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
from cases import CASES, HUB_COMMIT, HUB_REPO, build  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", default=os.environ.get("ENGINECFG_ORACLE"), required="ENGINECFG_ORACLE" not in os.environ)
    ap.add_argument("--python", help="the oracle venv's python (default ORACLE/venv19/bin/python)")
    ap.add_argument("--keep", help="build the folders here instead of a temp dir")
    ns = ap.parse_args()
    oracle = Path(ns.oracle).resolve()
    python = ns.python or str(oracle / "venv19" / "bin" / "python")
    with tempfile.TemporaryDirectory() as td:
        root = Path(ns.keep or td)
        paths = build(root)
        cases = [{"name": name, "config_dir": str(paths[folder]), "args": args} for name, folder, args in CASES]
        (root / "cases.json").write_text(json.dumps(cases))
        out = root / "results.json"
        subprocess.run([python, str(oracle / "run_oracle.py"), str(root / "cases.json"), "-o", str(out),
                        "--extra-path", str(oracle / "tf523-overlay"), "--all-logs",
                        "--cache-dir", str(root / "oracle-cache")],
                       # a neutral working directory: vLLM's model-inspection subprocess runs
                       # `python -m`, which would put a checkout's top-level folders on its path
                       check=True, cwd=root)
        raw = json.loads(out.read_text())
    results = []
    for (name, folder, args), r in zip(CASES, raw["results"]):
        assert r["name"] == name
        results.append({
            "name": name, "folder": folder, "engine_args": args,
            "error": r["error"] and {k: r["error"].get(k) for k in ("type", "message", "root_type", "root_message")},
            "logs": [m for m in r.get("all_logs", [])
                     if m["logger"].startswith("vllm.config") or m["logger"] == "vllm.model_executor.models.config"
                     or m["logger"].startswith("vllm.transformers_utils")],
            "after_verify": r.get("after_verify"), "page_sizes": r.get("page_sizes"),
        })
    doc = {"produced_by": {"vllm": raw["vllm_version"], "transformers": raw["transformers_version"],
                           "platform": raw["platform"], "hub_repo": HUB_REPO, "hub_commit": HUB_COMMIT},
           "results": results}
    (HERE / "expected.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(results)} results to {HERE / 'expected.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
