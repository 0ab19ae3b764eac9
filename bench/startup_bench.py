"""Process start-up of ``enginecfg run``, side by side with ``python -c "import transformers"``.

    python -P bench/startup_bench.py [--runs N] [--checkout DIR ...]

Warm: the config's snapshot is cached before timing.  The commands are run interleaved
(one of each per round), so load on the machine hits them alike; the medians and the ratio
to ``import transformers`` are printed.  Each ``--checkout DIR`` adds the same enginecfg
commands with ``PYTHONPATH=DIR`` (another checkout, e.g. main, to compare with).  Also
prints which of structlog / alembic / transformers / torch each enginecfg command imported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "data" / "vllm-0.19.0"
PROBE = ("import sys, runpy; sys.argv = ['enginecfg'] + sys.argv[1:]\n"
         "try:\n    runpy.run_module('enginecfg', run_name='__main__')\n"
         "except SystemExit:\n    pass\n"
         "sys.stderr.write('MODULES ' + ','.join(sorted(m for m in ('structlog', 'alembic', "
         "'transformers', 'torch') if m in sys.modules)) + '\\n')")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--checkout", action="append", default=[],
                    help="another checkout to time with PYTHONPATH=DIR")
    a = ap.parse_args()
    path = str(FIXTURES / "configs" / "qwen3.5-27b")
    tmp = Path(tempfile.mkdtemp(prefix="enginecfg-startup-"))
    base_env = dict(os.environ, ENGINECFG_PLUGINS="none")
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c 'import transformers'": ([sys.executable, "-P", "-c", "import transformers"], base_env),
    }
    targets = [("this", base_env)] + [(c, dict(base_env, PYTHONPATH=c)) for c in a.checkout]
    for label, env in targets:
        db = f"sqlite:///{tmp / (str(abs(hash(label))) + '.db')}"
        run = ["run", path, "--json", "--gpu-validation", "off"]
        commands[f"[{label}] enginecfg run --json --no-audit"] = (
            [sys.executable, "-P", "-m", "enginecfg", *run, "--no-audit"], env)
        commands[f"[{label}] enginecfg run --json (audited, SQLite)"] = (
            [sys.executable, "-P", "-m", "enginecfg", *run, "--db", db], env)
        commands[f"[{label}] python -c 'import enginecfg'"] = (
            [sys.executable, "-P", "-c", "import enginecfg"], env)
        probe = subprocess.run([sys.executable, "-P", "-c", PROBE, *run, "--no-audit"], env=env, cwd=tmp,
                               capture_output=True, text=True)
        mods = [line for line in probe.stderr.splitlines() if line.startswith("MODULES")]
        print(f"[{label}] run --json --no-audit imported: {mods[-1][8:] if mods else '?'} (of structlog, "
              f"alembic, transformers, torch)")
    times: dict[str, list[float]] = {k: [] for k in commands}
    for argv, env in commands.values():  # warm-up: snapshot cache, database schema, page cache
        subprocess.run(argv, env=env, cwd=tmp, capture_output=True)
    for _ in range(a.runs):
        for name, (argv, env) in commands.items():
            t = time.perf_counter()
            subprocess.run(argv, env=env, cwd=tmp, capture_output=True)
            times[name].append(time.perf_counter() - t)
    floor = statistics.median(times["python -c 'import transformers'"])
    print(f"{'command':58} {'median':>9} {'min':>9} {'max':>9} {'/ transformers':>15}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:58} {med * 1000:7.0f}ms {min(ts) * 1000:7.0f}ms {max(ts) * 1000:7.0f}ms {med / floor:14.2f}x")


if __name__ == "__main__":
    main()
