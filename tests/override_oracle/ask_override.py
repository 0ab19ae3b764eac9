#!/usr/bin/env python3
"""Ask vLLM 0.34.0's own KV planning what ``--num-gpu-blocks-override`` does.

Run with the 0.34 oracle venv's python, from the repository root::

    $REF/venv34/bin/python tests/override_oracle/ask_override.py \
        tests/override_oracle/cases.json -o tests/override_oracle/answers-034.json

Each case is a fixture config with ``num_gpu_blocks_override`` among its engine arguments.
The unmodified oracle ``shared/oracle34/run_oracle34.py`` runs them (its README: the emulated
H200, the real model class built on the meta device, then ``get_kv_cache_configs``,
``generate_scheduler_kv_cache_config`` and ``get_kv_cache_capacity`` at explicit KV budgets),
here at 2, 17 and 64 GiB; this script keeps what the tests compare (per budget: the block
count, "GPU KV cache size", concurrency, the not-enough-memory text; the bytes per block;
vLLM's "Overriding num_gpu_blocks" log lines).  Tests read the answers, never this script.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ORACLE34 = REPO.parent / "shared" / "oracle34" / "run_oracle34.py"
KEEP = ("budget_gib", "available_memory", "error", "num_blocks", "engine_block_size", "kv_tokens",
        "max_concurrency", "max_concurrency_at")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--budgets-gib", default="2,17,64")
    ns = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="override-oracle-") as tmp:
        raw = Path(tmp) / "raw.json"
        subprocess.run([sys.executable, str(ORACLE34), str(Path(ns.cases).resolve()), "-o", str(raw),
                        "--budgets-gib", ns.budgets_gib, "--cache-dir", str(Path(tmp) / "cache")],
                       check=True, stdout=sys.stderr,
                       # vLLM inspects model classes in a `python -m` subprocess, whose first
                       # import path is the working directory: this repository's kernels/
                       # would shadow the `kernels` package vLLM looks for
                       cwd=ORACLE34.parent)
        doc = json.loads(raw.read_text())
    out = []
    for res in doc["results"]:
        kv = res.get("kv") or {}
        out.append({
            "name": res["name"], "config_dir": res["config_dir"], "args": res["args"],
            "built": (res.get("post_load") or {}).get("real_class_built"),
            "block_size": ((res.get("post_load") or {}).get("after") or {}).get("block_size"),
            "bytes_per_block": kv.get("bytes_per_block"),
            "groups": len(kv.get("groups") or []),
            "budgets": [{k: row.get(k) for k in KEEP} for row in kv.get("budgets") or []],
            "override_logs": [line for line in kv.get("logs") or [] if "Overriding num_gpu_blocks" in str(line)],
            "error": res.get("error"),
        })
    Path(ns.output).write_text(json.dumps({"vllm": doc.get("vllm_version") or doc.get("vllm"),
                                           "cases": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
