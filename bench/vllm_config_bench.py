"""enginecfg beside vLLM 0.19.0's own ``create_engine_config``, case by case, in one run.

    python -P bench/vllm_config_bench.py --oracle ORACLE_DIR [--python VENV/bin/python]
        [--overlay TF523_OVERLAY] [--repeat 30] [--rounds 3]

ORACLE_DIR holds the real vLLM 0.19.0 as the oracle's ``README.md`` builds it
(``run_oracle.py``, its ``venv19`` and the ``tf523-overlay``); nothing of it is imported
here: it runs in its own process, and reports the median of ``--repeat`` in-process calls of
``EngineArgs(model=DIR, **args).create_engine_config()`` per case (its first call, which
pays the imports, is not counted), ``--rounds`` times, alternating with enginecfg.
enginecfg is timed warm, a fresh pipeline each call, under every release it speaks for
(0.19.0 to 0.34.0, patch releases included): ``Pipeline(gpu_validation="off",
vllm_version=V).resolve(DIR, **args)``, the median of ``--repeat`` calls in a row after one
warm-up, as vLLM's side is timed (one case's calls in a row in one process: an engine runs
one release); the releases take turns block by block, in an order that rotates from case
to case and round to round.  Both sides read the same config folders (the fixture configs).  The ratio is vLLM 0.19.0's time over enginecfg's; the table
gives it case by case for the first and the last release, and one line per release gives
its geometric mean and its lowest case.  ``--releases`` times only the releases named; ``--plugins none`` the built-in stages alone.
Figures go to bench/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CONFIGS = ROOT / "tests" / "data" / "vllm-0.19.0" / "configs"

#: hybrid attention/Mamba, pure Mamba and pooling models, each under engine arguments
#: that exercise the stages (the issue's eight cases)
CASES = [
    ("qwen3.5-27b", "qwen3.5-27b", {}),
    ("qwen3.5-27b prefix caching", "qwen3.5-27b", {"enable_prefix_caching": True}),
    ("nemotron-3-nano bf16", "nemotron-3-nano-30b-a3b-bf16", {}),
    ("nemotron-h-56b", "nemotron-h-56b-base-8k", {}),
    ("falcon-h1", "falcon-h1-default", {}),
    ("jamba-1.5-mini", "jamba-1.5-mini", {}),
    ("mamba-codestral-7b", "mamba-codestral-7b-v0.1", {}),
    ("nemotron-vl-embed (pooling)", "nemotron-vl-embed-avg", {}),
]


def all_releases() -> tuple[str, ...]:
    """Every release enginecfg speaks for, oldest first."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from enginecfg.pipeline import releases

    return releases.names()


def vllm_times(oracle: Path, python: str | None, overlay: str | None, repeat: int) -> dict[str, float]:
    python = python or str(oracle / "venv19" / "bin" / "python")
    with tempfile.TemporaryDirectory() as td:
        cases = [{"name": name, "config_dir": str(CONFIGS / folder), "args": args}
                 for name, folder, args in CASES]
        (Path(td) / "cases.json").write_text(json.dumps(cases))
        out = Path(td) / "results.json"
        subprocess.run([python, str(oracle / "run_oracle.py"), str(Path(td) / "cases.json"), "-o", str(out),
                        "--extra-path", overlay or str(oracle / "tf523-overlay"), "--repeat", str(repeat)],
                       check=True, stdout=subprocess.DEVNULL)
        results = json.loads(out.read_text())["results"]
    return {r["name"]: r["timing_median_s"]["create_engine_config"] for r in results}


def enginecfg_times(repeat: int, releases: tuple[str, ...], turn: int = 0,
                    plugins: str | None = None) -> dict[str, dict[str, float]]:
    """``{release: {case: median seconds}}``: each release's calls of a case in a row, the
    releases taking turns in an order rotated by *turn* and by the case."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from enginecfg import Pipeline

    out: dict[str, dict[str, float]] = {v: {} for v in releases}
    for n, (name, folder, args) in enumerate(CASES):
        path = CONFIGS / folder
        start = (turn + n) % len(releases)
        for v in releases[start:] + releases[:start]:
            Pipeline(gpu_validation="off", vllm_version=v, plugins=plugins).resolve(path, **args)  # warm-up
            samples = []
            for _ in range(repeat):
                t = time.perf_counter()
                Pipeline(gpu_validation="off", vllm_version=v, plugins=plugins).resolve(path, **args)
                samples.append(time.perf_counter() - t)
            out[v][name] = statistics.median(samples)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oracle", default=os.environ.get("ENGINECFG_ORACLE"),
                    required="ENGINECFG_ORACLE" not in os.environ)
    ap.add_argument("--python", help="the oracle venv's python (default ORACLE/venv19/bin/python)")
    ap.add_argument("--overlay", help="the transformers 5.23.0 overlay (default ORACLE/tf523-overlay)")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate the two sides this many times (a load spike then hits both); "
                         "each side's figure is the median of its per-round medians")
    ap.add_argument("--releases", help="comma-separated releases to time (default: every one)")
    ap.add_argument("--plugins", help="the plugin policy of enginecfg's pipelines (default: $ENGINECFG_PLUGINS, "
                                      "else every installed plugin); 'none' times the built-in stages alone")
    ns = ap.parse_args()
    known = all_releases()
    chosen = tuple(v.strip() for v in ns.releases.split(",")) if ns.releases else known
    unknown = [v for v in chosen if v not in known]
    if unknown:
        ap.error(f"--releases: {', '.join(unknown)} not among {', '.join(known)}")
    shown = tuple(dict.fromkeys((chosen[0], chosen[-1])))  # the table's columns
    print(f"# {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC · {platform.machine()} · "
          f"{os.cpu_count()} CPUs · load {os.getloadavg()[0]:.1f} · Python {platform.python_version()}")
    rounds_ours, rounds_theirs = [], []
    for turn in range(max(1, ns.rounds)):
        rounds_ours.append(enginecfg_times(ns.repeat, chosen, turn * 7, ns.plugins))
        rounds_theirs.append(vllm_times(Path(ns.oracle).resolve(), ns.python, ns.overlay, ns.repeat))
    theirs = {name: statistics.median(r[name] for r in rounds_theirs) for name, _, _ in CASES}
    ours = {v: {name: statistics.median(r[v][name] for r in rounds_ours) for name, _, _ in CASES}
            for v in chosen}
    head = "".join(f" {'enginecfg ' + v + ' ms':>19} {'ratio':>7}" for v in shown)
    print(f"{'case':<30} {'vLLM 0.19.0 ms':>15}{head}  per round ({'; '.join(shown)})")
    for name, _, _ in CASES:
        cells, each = "", []
        for v in shown:
            cells += f" {ours[v][name] * 1e3:19.3f} {theirs[name] / ours[v][name]:6.1f}x"
            each.append(" ".join(f"{t[name] / o[v][name]:.1f}" for o, t in zip(rounds_ours, rounds_theirs)))
        print(f"{name:<30} {theirs[name] * 1e3:15.2f}{cells}  {'; '.join(each)}")
    print(f"vLLM 0.19.0's create_engine_config time / enginecfg's, {len(rounds_ours)} rounds, "
          f"load {os.getloadavg()[0]:.1f}:")
    for v in chosen:
        ratios = {name: theirs[name] / ours[v][name] for name, _, _ in CASES}
        geo = math.exp(sum(map(math.log, ratios.values())) / len(ratios))
        low = min(ratios, key=ratios.get)
        print(f"  enginecfg under {v}'s rules: geomean {geo:.1f}x, min {ratios[low]:.1f}x ({low}, "
              f"{ours[v][low] * 1e3:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
