"""Wall time of the gpu-validation stage on a real GPU, cold (kernels compiling) and warm.

    python bench/gpu_validation_bench.py [--models a,b,c]

For each fixture model: the first run in a fresh process compiles the Triton kernels for
its shapes (cold); the following runs find them in Triton's cache (warm).  Prints the
stage's own time (from the stage_finished event), the whole run, and every check.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "vllm-0.19.0" / "configs"
DEFAULT = "nemotron-3-nano-30b-a3b-bf16,qwen3.5-27b,gemma-4-26b-a4b"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--configs", default=str(CONFIGS))
    ap.add_argument("--warm-runs", type=int, default=5)
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()
    from enginecfg import EngineConfig, Pipeline
    from enginecfg.pipeline import events

    stage_time: list[float] = []

    def on_finished(sender, event=None, **_):
        if event.stage == "gpu-validation":
            stage_time.append(event.duration_s)
    events.stage_finished.connect(on_finished, weak=False)
    pipeline = Pipeline(gpu_validation="require-gpu")
    report = []
    for model in a.models.split(","):
        path = Path(a.configs) / model
        times = []
        for i in range(1 + a.warm_runs):
            t = time.perf_counter()
            result = pipeline.run(EngineConfig.from_pretrained(path))
            times.append((time.perf_counter() - t, stage_time[-1]))
        v = result.to_dict()["validation"]
        cold, warm = times[0][1], statistics.median(s for _, s in times[1:])
        print(f"{model}: validation {v['status']} on {v['device']}; stage cold {cold:.2f} s, warm {warm:.3f} s "
              f"(whole run warm {statistics.median(w for w, _ in times[1:]):.3f} s)")
        for c in v["checks"]:
            print(f"   {c['check']:34s} {c['dtype']:9s} err {c['max_error']!s:>22s} tol {c['tolerance']!s:>22s} "
                  f"{'ok' if c['passed'] else 'FAIL'} {c['seconds'] * 1e3:8.2f} ms")
        report.append({"model": model, "cold_s": cold, "warm_s": warm, "validation": v})
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
