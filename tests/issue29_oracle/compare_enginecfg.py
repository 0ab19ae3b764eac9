#!/usr/bin/env python3
"""Where enginecfg (this checkout) and vLLM 0.19.0's engine start disagree, case by case.

Runs with the project's own Python (not the oracle venv), after ``cases.py startup``::

    python tests/issue29_oracle/compare_enginecfg.py [-o enginecfg_today.json]

For every case of ``startup.json`` that vLLM started, ``Pipeline(impact={"kv_cache_memory":
BUDGET}).resolve(folder, **args)`` at each budget, and the impact's KV figures (smallest group
block size, blocks, tokens) beside vLLM's. For every case vLLM refused at config time, built
but could not start, or could not build, what enginecfg answered. A snapshot of the state
before issue 29 is implemented; it says which numbers are expected to move.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GiB = 2**30


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", default=str(HERE / "enginecfg_today.json"))
    ap.add_argument("--only")
    ns = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from enginecfg import Pipeline

    doc = json.loads((HERE / "startup.json").read_text())
    cases = {c["name"]: c for c in json.loads((HERE / "cases-startup.json").read_text())}
    budgets = doc["budgets_gib"]
    pipes = {gib: Pipeline(impact={"kv_cache_memory": int(gib * GiB)}) for gib in budgets}
    rows: list[dict[str, Any]] = []
    for r in doc["results"]:
        if ns.only and ns.only not in r["name"]:
            continue
        case = cases[r["name"]]
        folder = str((HERE / case["config_dir"]).resolve())
        row: dict[str, Any] = {"name": r["name"], "vllm_status": r.get("status")}
        figures = []
        for i, gib in enumerate(budgets):
            try:
                res = pipes[gib].resolve(folder, **case["args"])
                d = res.to_dict()
            except Exception as e:  # noqa: BLE001 - enginecfg's answer, recorded
                row["enginecfg"] = f"{type(e).__name__}: {e}"[:400]
                break
            if d.get("status") != "resolved" and d.get("error"):
                row["enginecfg"] = f"{d['status']}: {str(d['error'])[:400]}"
                break
            imp = d.get("impact") or {}
            groups = imp.get("groups") or []
            mine = {"block_size": min((g["block_size"] for g in groups), default=None),
                    "num_blocks": imp.get("num_blocks"), "kv_tokens": imp.get("kv_tokens")}
            vk = (r.get("kv") or [{}] * len(budgets))[i]
            theirs = {"block_size": vk.get("engine_block_size"), "num_blocks": vk.get("num_blocks"),
                      "kv_tokens": vk.get("kv_tokens")}
            figures.append({"budget_gib": gib, "enginecfg": mine, "vllm": theirs,
                            "same": mine == theirs})
        row["figures"] = figures
        if r.get("status") == "started":
            row["same"] = bool(figures) and all(f["same"] for f in figures)
        rows.append(row)
        print(f"[compare] {r['name']}: {row.get('same', row.get('enginecfg', '-'))}",
              file=sys.stderr, flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    Path(ns.output).write_text(json.dumps({"enginecfg_commit": commit, "budgets_gib": budgets,
                                           "results": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
