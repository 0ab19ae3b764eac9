"""The memory budget's error on real starts: the available KV-cache memory predicted from the
config, the flags and the GPU alone, against the "Available KV cache memory" vLLM logged, for
every measured log of ``tests/data/logs/memory_inputs.json``, with the error per release and
GPU.  Not a timing: it prints a table (Markdown with ``--markdown``; ``--json`` for machines).

    python bench/memory_budget_bench.py [--markdown | --json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

GIB = 2**30


def measure() -> list[dict]:
    from enginecfg import Pipeline

    logs = REPO / "tests" / "data" / "logs"
    inputs = json.loads((logs / "memory_inputs.json").read_text())
    rows = []
    for e in inputs["measured"]:
        text = (logs / e["slug"] / "start.log").read_text()
        available = float(re.search(r"Available KV cache memory: ([\d.]+) GiB", text).group(1)) * GIB
        loaded = re.search(r"Model loading took ([\d.]+) GiB", text)
        r = Pipeline(vllm_version=e["release"], gpu=e["gpu"], gpu_validation="off",
                     impact=e["memory"] or None).resolve(REPO / e["config"], **e["engine_args"])
        mem = r.impact.memory
        rows.append({
            "slug": e["slug"], "logged_release": e["logged_release"], "arithmetic": e["release"], "gpu": e["gpu"],
            "tp": e["engine_args"].get("tensor_parallel_size", 1), "held_to_5_percent": e["held_to_5_percent"],
            "logged_gib": round(available / GIB, 2),
            "predicted_gib": round(mem.available_kv_cache_memory / GIB, 2),
            "low_gib": round(mem.available_kv_cache_memory_low / GIB, 2),
            "high_gib": round(mem.available_kv_cache_memory_high / GIB, 2),
            "error_percent": round(100 * (mem.available_kv_cache_memory / available - 1), 1),
            "inside_range": mem.available_kv_cache_memory_low <= available <= mem.available_kv_cache_memory_high,
            "weights_logged_gib": float(loaded.group(1)) if loaded else None,
            "weights_predicted_gib": round(mem.weights.bytes_per_gpu / GIB, 2),
            "parts": {p.name: round(p.bytes / GIB, 2) for p in mem.parts if p.subtracted},
        })
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    rows = measure()
    if ns.json:
        print(json.dumps(rows, indent=1))
        return 0
    head = ["log", "logged release (arithmetic)", "GPU x TP", "logged GiB", "predicted GiB (range)", "error",
            "in range", "weights logged / predicted GiB"]
    lines = [head] + [[r["slug"], f"{r['logged_release']} ({r['arithmetic']})", f"{r['gpu']} x {r['tp']}",
                       f"{r['logged_gib']:.2f}", f"{r['predicted_gib']:.2f} ({r['low_gib']:.2f}-{r['high_gib']:.2f})",
                       f"{r['error_percent']:+.1f}%", "yes" if r["inside_range"] else "no",
                       f"{r['weights_logged_gib']} / {r['weights_predicted_gib']}"] for r in rows]
    if ns.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for line in lines[1:]:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
        for line in lines:
            print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
