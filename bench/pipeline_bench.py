"""Pipeline speed, measured side by side in one run.

    python bench/pipeline_bench.py [--repeat N] [--startup-runs K]

1. Per fixture config, warm and in-process: ``EngineConfig.from_pretrained`` +
   ``Pipeline.run`` (GPU validation off), beside a bare ``transformers.AutoConfig
   .from_pretrained`` of the same folder (the floor vLLM pays before any of its own work).
2. All 578 fixture cases through the pipeline: median per run without and with the audit
   store attached (a fresh SQLite file).
3. Process start-up: ``enginecfg run PATH --no-audit --json`` beside
   ``python -c "import transformers"``.
4. The releases: per fixture config, warm, a run under vLLM 0.34.0's rules beside one under
   0.19.0's (the default), same process, same loads.
Medians and ratios are printed; bench/NOTES.md keeps them with date and machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "data" / "vllm-0.19.0"


def _median_time(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def bench_configs(repeat: int) -> list[tuple[str, float, float]]:
    from enginecfg import EngineCfgError, EngineConfig, Pipeline

    pipeline = Pipeline(gpu_validation="off")
    folders = sorted(d for d in (FIXTURES / "configs").iterdir() if (d / "config.json").exists())

    def ours(folder):
        try:
            pipeline.run(EngineConfig.from_pretrained(folder))
        except EngineCfgError:
            pass

    for f in folders:  # warm: snapshots built and cached
        ours(f)
    mine = {f.name: _median_time(lambda f=f: ours(f), repeat) for f in folders}
    from transformers import AutoConfig  # imported only now, after our figures

    def theirs(folder):
        try:
            AutoConfig.from_pretrained(folder)
        except Exception:
            pass
    for f in folders:
        theirs(f)
    bare = {f.name: _median_time(lambda f=f: theirs(f), max(5, repeat // 4)) for f in folders}
    return [(name, mine[name], bare[name]) for name in mine]


def bench_cases(repeat: int) -> tuple[float, float]:
    from enginecfg import EngineCfgError, EngineConfig, Pipeline
    from enginecfg.store import AuditStore

    cases = json.loads((FIXTURES / "cases.json").read_text())["cases"]
    pipeline = Pipeline(gpu_validation="off")

    def one(case):
        try:
            pipeline.run(EngineConfig.from_pretrained(FIXTURES / case["config"], **case["engine_args"]))
        except EngineCfgError:
            pass

    def per_run(n_rounds: int) -> float:
        samples = []
        for _ in range(n_rounds):
            for case in cases:
                t = time.perf_counter()
                one(case)
                samples.append(time.perf_counter() - t)
        return statistics.median(samples)

    per_run(1)
    without = per_run(repeat)
    tmp = tempfile.mkdtemp()
    with AuditStore(f"sqlite:///{tmp}/bench.db").attach():
        per_run(1)
        with_store = per_run(1)
    return without, with_store


def bench_releases(repeat: int) -> list[tuple[str, float, float]]:
    from enginecfg import EngineCfgError, Pipeline

    folders = sorted(d for d in (FIXTURES / "configs").iterdir() if (d / "config.json").exists())
    pipelines = {v: Pipeline(gpu_validation="off", vllm_version=v) for v in ("0.19.0", "0.34.0")}

    def one(version, folder):
        try:
            pipelines[version].resolve(folder)
        except EngineCfgError:
            pass

    for f in folders:  # warm, both
        one("0.19.0", f), one("0.34.0", f)
    return [(f.name, _median_time(lambda f=f: one("0.19.0", f), repeat),
             _median_time(lambda f=f: one("0.34.0", f), repeat)) for f in folders]


def bench_startup(runs: int) -> tuple[float, float]:
    path = str(FIXTURES / "configs" / "qwen3.5-27b")
    cwd = tempfile.gettempdir()

    def proc(args):
        t = time.perf_counter()
        subprocess.run(args, cwd=cwd, capture_output=True, check=False)
        return time.perf_counter() - t
    ours = [sys.executable, "-P", "-m", "enginecfg", "run", path, "--no-audit", "--json", "--gpu-validation", "off"]
    floor = [sys.executable, "-P", "-c", "import transformers"]
    proc(ours), proc(floor)
    a = statistics.median(proc(ours) for _ in range(runs))
    b = statistics.median(proc(floor) for _ in range(runs))
    return a, b


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--startup-runs", type=int, default=7)
    a = ap.parse_args()
    print(f"# pipeline bench, {time.strftime('%Y-%m-%d %H:%M')}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cpus, Python {platform.python_version()}")
    rows = bench_configs(a.repeat)
    print(f"{'config':40s} {'enginecfg ms':>12s} {'AutoConfig ms':>13s} {'ratio':>7s}")
    for name, mine, bare in rows:
        print(f"{name:40s} {mine * 1e3:12.3f} {bare * 1e3:13.3f} {bare / mine:7.1f}x")
    med_mine = statistics.median(r[1] for r in rows)
    med_bare = statistics.median(r[2] for r in rows)
    print(f"{'median':40s} {med_mine * 1e3:12.3f} {med_bare * 1e3:13.3f} {med_bare / med_mine:7.1f}x")
    without, with_store = bench_cases(max(1, a.repeat // 20))
    print(f"all fixture cases, median per run: {without * 1e3:.3f} ms without audit, "
          f"{with_store * 1e3:.3f} ms with the SQLite audit store ({with_store / without:.1f}x)")
    ours, floor = bench_startup(a.startup_runs)
    print(f"process start-up: enginecfg run {ours * 1e3:.0f} ms, python -c 'import transformers' "
          f"{floor * 1e3:.0f} ms (ratio {ours / floor:.2f})")
    rel = bench_releases(a.repeat)
    old_ms = statistics.median(r[1] for r in rel)
    new_ms = statistics.median(r[2] for r in rel)
    ratios = sorted(r[2] / r[1] for r in rel)
    print(f"releases, warm resolve, median over the configs: 0.19.0 {old_ms * 1e3:.3f} ms, 0.34.0 "
          f"{new_ms * 1e3:.3f} ms (0.34.0 / 0.19.0 per config: {ratios[0]:.2f}x to {ratios[-1]:.2f}x, "
          f"median {statistics.median(ratios):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
