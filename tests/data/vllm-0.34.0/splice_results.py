#!/usr/bin/env python3
"""Replace some cases of an oracle results file by the same cases from a later run.

    python splice_results.py BASE.json PATCH.json --why "TEXT"

Every result of PATCH replaces the result of the same name in BASE (order kept); BASE's top
level gains `spliced: [{from, cases, why}]` so the file says which answers came from which run.
Used once for results/public-b200.json: its first run predates stand-in 4 of
make_results_device.py, and the ten deepseek-v2-lite-like cases were the only ones it changed
(they failed on the CUTLASS MLA import, a CUDA allocation; every other case made none).
"""

import argparse
import json
import os


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("patch")
    ap.add_argument("--why", required=True)
    ns = ap.parse_args()
    with open(ns.base) as f:
        base = json.load(f)
    with open(ns.patch) as f:
        patch = {c["name"]: c for c in json.load(f)["results"]}
    names = [c["name"] for c in base["results"]]
    missing = sorted(set(patch) - set(names))
    if missing:
        raise SystemExit(f"not in {ns.base}: {missing}")
    base["results"] = [patch.get(c["name"], c) for c in base["results"]]
    base.setdefault("spliced", []).append(
        {"from": os.path.basename(ns.patch), "cases": sorted(patch), "why": ns.why})
    tmp = ns.base + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(base, indent=1, default=str) + "\n")
    os.replace(tmp, ns.base)
    print(f"{len(patch)} cases replaced in {ns.base}")


if __name__ == "__main__":
    main()
