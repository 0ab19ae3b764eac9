"""Speed at scale, side by side in one run.

    python -P bench/scale_bench.py [--sizes 1,10,100,1000] [--cli-runs 3] [--store-runs 300]
                                   [--store-rounds 3] [--writers 8] [--skip-store]

1. N distinct configs in one process (N = 1, 10, 100, 1,000; each a Qwen3.5-27B config with
   one extra key, never seen by any cache): enginecfg (``EngineConfig.from_pretrained`` +
   ``Pipeline().run`` per config, a fresh pipeline each call as the README shows; and
   ``Pipeline().run_many`` over all N) beside bare ``AutoConfig.from_pretrained`` of the same
   folders in a process of its own.  Each side runs in a fresh interpreter with an empty
   snapshot cache, so the first config pays every import; "per config" is the mean over the
   configs after the first.
2. ``enginecfg run NEW_PATH --json`` (a config no cache has seen) beside ``python -c "import
   transformers"`` and beside a process that builds the same config with ``AutoConfig``;
   median of ``--cli-runs``.
3. Audit-store throughput: 1 and ``--writers`` writer processes on one SQLite file, and on
   PostgreSQL when ``ENGINECFG_TEST_PG_URL`` is set, alternating round by round (see
   bench/store_bench.py).
4. ``Pipeline()`` per call beside one reused pipeline (warm config).

This checkout's enginecfg is measured (its root goes first on ``sys.path``), whatever else
is installed.  Figures and their context are kept in bench/NOTES.md.
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
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CONFIGS = ROOT / "tests" / "data" / "vllm-0.19.0" / "configs"
BASE = CONFIGS / "qwen3.5-27b" / "config.json"

#: ``python -c`` prelude: this checkout's enginecfg
_PRELUDE = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"

_OURS = _PRELUDE + """
import json, os, time
t0 = time.perf_counter()
from enginecfg import EngineConfig, Pipeline
dirs = json.loads(os.environ["BENCH_DIRS"])
t_import = time.perf_counter() - t0
times = []
if os.environ["BENCH_MODE"] == "many":
    if not hasattr(Pipeline, "run_many"):  # an enginecfg from before the batch entry points
        print(json.dumps({"import": t_import, "times": [float("nan")]}))
        raise SystemExit(0)
    t = time.perf_counter()
    out = Pipeline(gpu_validation="off").run_many(dirs)
    times.append(time.perf_counter() - t)
    assert all(r.status == "resolved" for r in out)
else:
    for d in dirs:
        t = time.perf_counter()
        r = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(d))
        times.append(time.perf_counter() - t)
        assert r.status == "resolved"
print(json.dumps({"import": t_import, "times": times}))
"""

_BARE = """
import json, os, time
t0 = time.perf_counter()
from transformers import AutoConfig
dirs = json.loads(os.environ["BENCH_DIRS"])
t_import = time.perf_counter() - t0
times = []
for d in dirs:
    t = time.perf_counter()
    AutoConfig.from_pretrained(d)
    times.append(time.perf_counter() - t)
print(json.dumps({"import": t_import, "times": times}))
"""


def _fresh_dirs(root: Path, n: int) -> list[str]:
    base = json.loads(BASE.read_text())
    salt = uuid.uuid4().hex
    out = []
    for i in range(n):
        d = root / f"cfg-{salt[:8]}-{i}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(dict(base, enginecfg_bench_variant=f"{salt}-{i}")))
        out.append(str(d))
    return out


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    env.update(extra)
    return env


def _python(code: str, env: dict[str, str], *args: str) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-P", "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=tempfile.gettempdir(), timeout=3600)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark process failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, proc.stdout


def bench_distinct(sizes: list[int], tmp: Path) -> list[dict]:
    rows = []
    for n in sizes:
        row: dict = {"n": n}
        for label, code, mode in (("ours", _OURS, "each"), ("ours_many", _OURS, "many"), ("bare", _BARE, "")):
            dirs = _fresh_dirs(tmp, n)
            cache = tmp / f"cache-{uuid.uuid4().hex[:8]}"
            wall, out = _python(code, _env(BENCH_DIRS=json.dumps(dirs), BENCH_MODE=mode,
                                           ENGINECFG_CACHE_DIR=str(cache)))
            res = json.loads(out.strip().splitlines()[-1])
            t = res["times"]
            row[label] = {"wall": wall, "import": res["import"], "first": t[0], "total": sum(t),
                          "rest_mean": statistics.mean(t[1:]) if len(t) > 1 else None}
        rows.append(row)
        o, b, m = row["ours"], row["bare"], row["ours_many"]
        per = (f"{o['rest_mean'] * 1e3:7.2f} ms vs {b['rest_mean'] * 1e3:7.2f} ms  "
               f"(x{o['rest_mean'] / b['rest_mean']:.2f})" if n > 1 else "      -")
        print(f"N={n:5d}  enginecfg {o['import'] + o['total']:7.2f} s (first {o['first']:.2f} s)  "
              f"run_many {m['import'] + m['total']:7.2f} s  |  AutoConfig {b['import'] + b['total']:7.2f} s "
              f"(import {b['import']:.2f} s)  |  per config after the first: {per}", flush=True)
    return rows


_CLI = _PRELUDE + "from enginecfg.cli import main; sys.exit(main())\n"
_IMPORT_TF = "import transformers\n"
_AUTOCONFIG = "import sys\nfrom transformers import AutoConfig\nAutoConfig.from_pretrained(sys.argv[1])\n"


def bench_cli(runs: int, tmp: Path) -> dict:
    samples: dict[str, list[float]] = {"cli": [], "cli_audit": [], "import": [], "autoconfig": []}
    for _ in range(runs):
        for label in samples:
            d = _fresh_dirs(tmp, 1)[0]
            env = _env(ENGINECFG_CACHE_DIR=str(tmp / f"cache-{uuid.uuid4().hex[:8]}"))
            if label == "cli":
                wall, _ = _python(_CLI, env, "run", d, "--json", "--no-audit", "--gpu-validation", "off")
            elif label == "cli_audit":
                db = f"sqlite:///{tmp / ('cli-' + uuid.uuid4().hex[:8] + '.db')}"
                wall, _ = _python(_CLI, env, "run", d, "--json", "--db", db, "--gpu-validation", "off")
            elif label == "import":
                wall, _ = _python(_IMPORT_TF, env)
            else:
                wall, _ = _python(_AUTOCONFIG, env, d)
            samples[label].append(wall)
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"CLI on a new config: enginecfg run --no-audit {med['cli']:.2f} s, with the SQLite audit store "
          f"{med['cli_audit']:.2f} s  |  python -c 'import transformers' {med['import']:.2f} s  |  "
          f"AutoConfig.from_pretrained in a new process {med['autoconfig']:.2f} s  |  "
          f"ratio to import transformers x{med['cli'] / med['import']:.2f} "
          f"(median of {runs})", flush=True)
    return med


def bench_store(runs: int, writers: int, tmp: Path, rounds: int = 3) -> dict:
    sys.path.insert(0, str(BENCH))
    import store_bench

    out = {}
    backends: list[tuple[str, object]] = [("sqlite", None)]
    pg = os.environ.get("ENGINECFG_TEST_PG_URL")
    if pg:
        backends.append(("postgresql", store_bench._PgSchemas(pg)))
    for name, schemas in backends:
        def fresh(tag: str) -> str:
            if schemas is None:
                return f"sqlite:///{tmp / f'{tag}-{uuid.uuid4().hex[:6]}.db'}"
            return schemas.new()

        got = store_bench.alternating(fresh, writers, runs, rounds)
        out[name] = got
        print("store " + store_bench.summary(name, writers, runs, got).replace("\n", "\nstore "), flush=True)
        if schemas is not None:
            schemas.close()
    return out


def bench_pipeline_reuse(runs: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from enginecfg import EngineConfig, Pipeline

    path = BASE.parent
    Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(path))
    reused = Pipeline(gpu_validation="off")
    fresh, same = [], []
    for _ in range(runs):
        t = time.perf_counter()
        Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(path))
        fresh.append(time.perf_counter() - t)
        t = time.perf_counter()
        reused.run(EngineConfig.from_pretrained(path))
        same.append(time.perf_counter() - t)
    f, s = statistics.median(fresh), statistics.median(same)
    print(f"Pipeline() per call {f * 1e3:.3f} ms  |  one reused pipeline {s * 1e3:.3f} ms  (x{f / s:.2f}, "
          f"median of {runs}, warm Qwen3.5-27B)", flush=True)
    return {"fresh": f, "reused": s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,10,100,1000")
    ap.add_argument("--cli-runs", type=int, default=3)
    ap.add_argument("--store-runs", type=int, default=300)
    ap.add_argument("--store-rounds", type=int, default=3)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--reuse-runs", type=int, default=300)
    ap.add_argument("--skip-store", action="store_true")
    ap.add_argument("--only", choices=("distinct", "cli", "store", "reuse"), action="append")
    args = ap.parse_args(argv)
    only = set(args.only or ("distinct", "cli", "store", "reuse"))
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} · {platform.node()} · {platform.machine()} · "
          f"{os.cpu_count()} CPUs · load {os.getloadavg()[0]:.1f} · Python {platform.python_version()}",
          flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "distinct" in only:
            bench_distinct([int(x) for x in args.sizes.split(",")], tmp)
        if "cli" in only:
            bench_cli(args.cli_runs, tmp)
        if "store" in only and not args.skip_store:
            bench_store(args.store_runs, args.writers, tmp, args.store_rounds)
        if "reuse" in only:
            bench_pipeline_reuse(args.reuse_runs)
    print(f"# done, load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
