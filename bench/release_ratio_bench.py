"""The cost of a warm resolve under each release, measured side by side in one run.

    python -P bench/release_ratio_bench.py [--rounds N] [--per-round K]

Per fixture config (``tests/data/vllm-0.19.0/configs``): ``Pipeline.resolve`` under vLLM
0.19.0's rules and under 0.34.0's, GPU validation off, both pipelines warmed first (the
snapshots built, the figures memoised). The two releases alternate call by call within each
round, so a busy machine slows both alike; each config's time is the median over all its
calls. Printed: the per-config medians, their median, and the 0.34.0 / 0.19.0 ratio (the
median of the per-config ratios and their range). Also the process CPU time of every call
summed per release (``time.process_time``), less sensitive to other jobs on the machine.
The code measured is the checkout this file lives in.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data" / "vllm-0.19.0" / "configs"
RELEASES = ("0.19.0", "0.34.0")


def configs() -> list[Path]:
    return sorted(d for d in FIXTURES.iterdir() if (d / "config.json").exists())


def measure(rounds: int, per_round: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    if str(ROOT) not in sys.path:  # the checkout this file lives in
        sys.path.insert(0, str(ROOT))
    from enginecfg import EngineCfgError, Pipeline

    pipelines = {v: Pipeline(gpu_validation="off", vllm_version=v) for v in RELEASES}
    folders = configs()

    def one(version: str, folder: Path) -> None:
        try:
            pipelines[version].resolve(folder)
        except EngineCfgError:  # a fixture vLLM refuses: refused the same way each time
            pass

    for folder in folders:  # warm both
        for v in RELEASES:
            one(v, folder), one(v, folder)
    wall: dict[str, dict[str, list[float]]] = {v: {f.name: [] for f in folders} for v in RELEASES}
    cpu = {v: 0.0 for v in RELEASES}
    for r in range(rounds):
        order = RELEASES if r % 2 == 0 else RELEASES[::-1]
        for folder in folders:
            for _ in range(per_round):
                for v in order:
                    c, t = time.process_time(), time.perf_counter()
                    one(v, folder)
                    wall[v][folder.name].append(time.perf_counter() - t)
                    cpu[v] += time.process_time() - c
    medians = {v: {name: statistics.median(s) for name, s in per.items()} for v, per in wall.items()}
    return medians, cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=3)
    a = ap.parse_args()
    print(f"# release ratio bench, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, "
          f"{platform.machine()}, {os.cpu_count()} cpus, Python {platform.python_version()}")
    medians, cpu = measure(a.rounds, a.per_round)
    old, new = medians["0.19.0"], medians["0.34.0"]
    print(f"{'config':44s} {'0.19.0 ms':>10s} {'0.34.0 ms':>10s} {'ratio':>7s}")
    ratios = {}
    for name in old:
        ratios[name] = new[name] / old[name]
        print(f"{name:44s} {old[name] * 1e3:10.3f} {new[name] * 1e3:10.3f} {ratios[name]:7.2f}")
    lo, hi = min(ratios.values()), max(ratios.values())
    print(f"{'median':44s} {statistics.median(old.values()) * 1e3:10.3f} "
          f"{statistics.median(new.values()) * 1e3:10.3f} {statistics.median(ratios.values()):7.2f}")
    print(f"0.34.0 / 0.19.0 warm resolve: median ratio {statistics.median(ratios.values()):.2f} "
          f"(per config {lo:.2f} to {hi:.2f}); CPU time of all calls {cpu['0.34.0']:.2f} s / "
          f"{cpu['0.19.0']:.2f} s = {cpu['0.34.0'] / cpu['0.19.0']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
