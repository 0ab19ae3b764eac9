"""``enginecfg plan`` speed: a 4 x 2 grid (TP 1, 2, 4, 8; KV dtype auto, fp8) on hybrid configs.

    python bench/plan_bench.py [--repeat N] [--startup-runs K]

1. In-process, after start-up: ``plan()`` over the grid plus rendering its table, first call
   (config read from disk, snapshot from the on-disk cache) and the median of warm calls;
   beside it, in the same run, the baseline: the way ``plan`` loaded before it went through
   the sources (``config.json`` parsed once, ``EngineConfig.from_hf_config`` per setting, no
   safetensors headers or sentence-transformers files), and the ratio of the two warm medians.
2. Whole process: ``python -m enginecfg plan PATH --tp 1,2,4,8 --kv-cache-dtype auto,fp8``,
   median wall time, beside ``python -m enginecfg --help`` (the start-up floor).
3. One ``impact`` computation alone (what the stage adds to every run).
bench/NOTES.md keeps the figures with date and machine.
"""

from __future__ import annotations

import argparse
import io
import platform
import statistics
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data" / "vllm-0.19.0"
# measure this checkout's code, whatever else is installed
sys.path.insert(0, str(ROOT))
MODELS = ("qwen3.5-27b", "nemotron-3-nano-30b-a3b-bf16", "qwen3.5-397b-a17b")
GRID = {"tensor_parallel_size": [1, 2, 4, 8], "kv_cache_dtype": ["auto", "fp8"]}
OPTS = {"gpu_memory_gib": 141.0, "gpu_memory_utilization": 0.9, "kv_cache_memory": None}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def in_process(folder: Path, repeat: int) -> tuple[float, float, float]:
    """(first call, warm median, the baseline's warm median): the two warm sides alternate
    call by call, so that both see the same load on a shared machine."""
    from enginecfg.cli.explain import print_plan
    from enginecfg.commands import plan

    def once():
        p = plan(folder, GRID, memory=OPTS, context=8192)
        with redirect_stdout(io.StringIO()):
            print_plan(p)

    first = _timed(once)
    base = baseline(folder)
    base()
    warm, warm_base = [], []
    for _ in range(repeat):
        warm.append(_timed(once))
        warm_base.append(_timed(base))
    return first, statistics.median(warm), statistics.median(warm_base)


def baseline(folder: Path):
    """The grid as ``plan`` ran it before it loaded through the sources: the parsed
    ``config.json`` handed to ``from_hf_config`` for every setting, one pipeline, the findings
    (the table is printed from the same figures, so it is left out on both sides' behalf)."""
    import itertools
    import json

    from enginecfg import EngineConfig, Pipeline
    from enginecfg.cli.explain import print_plan
    from enginecfg.commands import findings, plan

    shown = plan(folder, GRID, memory=OPTS, context=8192)

    def once():
        raw = json.loads((folder / "config.json").read_text())
        pipeline = Pipeline(gpu_validation="off", impact=dict(OPTS, contexts=(1024, 8192, 32768, 8192)))
        for values in itertools.product(*GRID.values()):
            result = pipeline.run(EngineConfig.from_hf_config(raw, **dict(zip(GRID, values))))
            findings(result)
        with redirect_stdout(io.StringIO()):
            print_plan(shown)

    return once


def processes(folder: Path, runs: int) -> tuple[float, float]:
    plan_cmd = [sys.executable, "-m", "enginecfg", "plan", str(folder), "--tp", "1,2,4,8",
                "--kv-cache-dtype", "auto,fp8"]
    help_cmd = [sys.executable, "-m", "enginecfg", "--help"]

    def run(cmd):
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"{cmd} failed: {proc.stderr}")

    return (statistics.median(_timed(lambda: run(plan_cmd)) for _ in range(runs)),
            statistics.median(_timed(lambda: run(help_cmd)) for _ in range(runs)))


def impact_alone(folder: Path, repeat: int) -> float:
    from enginecfg import EngineConfig, Pipeline
    from enginecfg.pipeline.models.capacity import impact

    cfg = Pipeline(gpu_validation="off", disable=["impact"]).run(EngineConfig.from_pretrained(folder)).config
    return statistics.median(_timed(lambda: impact(cfg)) for _ in range(repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--startup-runs", type=int, default=5)
    ns = ap.parse_args()
    print(f"# {platform.machine()} {platform.python_version()} {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| model | plan() + table, first call | warm median | baseline (from_hf_config) warm | ratio | "
          "`enginecfg plan` process | `enginecfg --help` process | one impact |")
    print("|---|---|---|---|---|---|---|---|")
    for name in MODELS:
        folder = FIXTURES / "configs" / name
        first, warm, base = in_process(folder, ns.repeat)
        proc, floor = processes(folder, ns.startup_runs)
        one = impact_alone(folder, ns.repeat)
        print(f"| {name} | {first * 1e3:.1f} ms | {warm * 1e3:.1f} ms | {base * 1e3:.1f} ms | "
              f"{warm / base:.2f} | {proc * 1e3:.0f} ms | {floor * 1e3:.0f} ms | {one * 1e3:.2f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
