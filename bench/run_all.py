#!/usr/bin/env python3
"""Every enginecfg benchmark in one command, with the ratios side by side.

    python bench/run_all.py [--quick] [--only NAME ...] [--out DIR]

Runs, each in its own process (so one's imports and caches never flatter another):

* ``pipeline``: bench/pipeline_bench.py — ``Pipeline.run`` per fixture beside transformers'
  ``AutoConfig``, all fixture cases without and with the audit store, ``enginecfg run``
  start-up beside ``python -c "import transformers"``;
* ``release-ratio``: bench/release_ratio_bench.py — a warm ``Pipeline.resolve`` under vLLM
  0.34.0's rules beside one under 0.19.0's, per fixture config, interleaved;
* ``store``: bench/store_bench.py (when present) — audit writes per second (one writer, 8
  writers; PostgreSQL too when ``ENGINECFG_TEST_PG_URL`` is set) and the history query at
  scale;
* ``plan``: bench/plan_bench.py — ``enginecfg plan`` over TP 1, 2, 4, 8 x two KV dtypes after
  start-up and as a whole process, and one ``impact`` computation;
* ``ui``: bench/ui_load.py — the audit page's latency with slow and idle clients held open,
  beside none held;
* ``memory-budget``: bench/memory_budget_bench.py — the memory budget's error against every
  measured start-up log (not a timing);
* ``gpu-kernels`` and ``gpu-validation``: bench/gpu_kernels.py and
  bench/gpu_validation_bench.py, only when a CUDA device is present.

Each benchmark's own output is streamed as it runs; a summary of the ratios follows.
``--quick`` shrinks every benchmark (fewer repeats, a smaller history store) for a smoke
run: its figures are noisier and are not the ones kept in bench/NOTES.md.  The exit status
is 1 if any benchmark failed.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

#: name -> (script, full arguments, --quick arguments, needs CUDA)
SUITE: dict[str, tuple[str, list[str], list[str], bool]] = {
    "pipeline": ("pipeline_bench.py", [], ["--repeat", "5", "--startup-runs", "3"], False),
    "release-ratio": ("release_ratio_bench.py", [], ["--rounds", "2", "--per-round", "2"], False),
    "store": ("store_bench.py", [], ["--runs", "50", "--repeat", "1", "--changes", "20000"], False),
    "plan": ("plan_bench.py", [], ["--repeat", "3", "--startup-runs", "2"], False),
    "ui": ("ui_load.py", [], ["--requests", "10", "--runs", "50"], False),
    "memory-budget": ("memory_budget_bench.py", [], [], False),
    "gpu-kernels": ("gpu_kernels.py", [], ["--steps", "50"], True),
    "gpu-validation": ("gpu_validation_bench.py", [], ["--warm-runs", "2"], True),
}


def _cuda_available() -> bool:
    """Asked in a child process: this one never imports torch."""
    try:
        proc = subprocess.run([sys.executable, "-P", "-c", "import torch; print(torch.cuda.is_available())"],
                              capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.stdout.strip().endswith("True")


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        mem_s = f", {mem:.0f} GiB RAM"
    except (ValueError, OSError, AttributeError):
        mem_s = ""
    return f"{platform.node()} · {cpu} · {os.cpu_count()} CPUs{mem_s} · {platform.system()} {platform.release()}"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out or "unknown"


def _run(name: str, argv: list[str], out_dir: Path) -> tuple[int, str, float]:
    """Run one benchmark, streaming its output; returns (status, output, seconds)."""
    env = dict(os.environ, OUT=str(out_dir), PYTHONUNBUFFERED="1")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(f"  {line}")
        sys.stdout.flush()
        lines.append(line)
    code = proc.wait()
    return code, "".join(lines), time.perf_counter() - t0


def _num(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text, re.M)
    return float(m.group(1)) if m else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "n/a"


def summarise(name: str, out: str) -> list[str]:
    """The ratios of one benchmark's output, as lines for the summary."""
    rows: list[str] = []
    if name == "pipeline":
        m = re.search(r"^median\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x", out, re.M)
        if m:
            rows.append(f"Pipeline.run per fixture (warm): {m[1]} ms vs AutoConfig {m[2]} ms -> "
                        f"AutoConfig / enginecfg = {m[3]}x")
        a = _num(r"([\d.]+) ms without audit", out)
        b = _num(r"([\d.]+) ms with the SQLite audit store", out)
        if a is not None:
            rows.append(f"fixture cases per run: {a} ms without audit, {b} ms with -> with / without = "
                        f"{_ratio(b, a)}")
        s = _num(r"enginecfg run (\d+) ms", out)
        f = _num(r"import transformers' (\d+) ms", out)
        if s is not None:
            rows.append(f"process start-up: enginecfg run {s:.0f} ms vs import transformers {f:.0f} ms -> "
                        f"{_ratio(s, f)}")
    elif name == "release-ratio":
        m = re.search(r"median ratio ([\d.]+) \(per config ([\d.]+) to ([\d.]+)\)", out)
        if m:
            rows.append(f"warm resolve 0.34.0 / 0.19.0: median {m[1]} (per config {m[2]} to {m[3]})")
    elif name == "store":
        for backend in ("sqlite", "postgresql"):
            one = _num(rf"^{backend}\s+1 writer\s*:\s*([\d.]+) runs/s", out)
            many = re.search(rf"^{backend}\s+(\d+) writers:\s*([\d.]+) runs/s", out, re.M)
            if one is not None and many:
                rows.append(f"{backend}: 1 writer {one:.0f} runs/s, {many[1]} writers {float(many[2]):.0f} "
                            f"runs/s aggregate -> {_ratio(float(many[2]), one)}")
        sq = _num(r"^sqlite\s+1 writer\s*:\s*([\d.]+)", out)
        pg = _num(r"^postgresql\s+1 writer\s*:\s*([\d.]+)", out)
        if sq is not None and pg is not None:
            rows.append(f"one writer, PostgreSQL / SQLite = {_ratio(pg, sq)}")
        for label, pat in (("default", r"field_history\(limit=50\)\s+:\s*([\d.]+) ms"),
                           ("changed_only", r"changed_only\)\s+:\s*([\d.]+) ms"),
                           ("model filter", r"model='m7', limit=50\)\s+:\s*([\d.]+) ms")):
            v = _num(pat, out)
            if v is not None:
                rows.append(f"history query ({label}): {v} ms")
        m = re.search(r"^history\s+([\d,]+) changes", out, re.M)
        if m:
            rows.append(f"history store size: {m[1]} changes")
    else:
        rows += [line.strip() for line in out.splitlines()
                 if re.search(r"\bx[\d.]+|[\d.]+x\b|ratio|cold|warm|bandwidth|failed:", line)][:40]
    return rows or ["(no figures recognised in the output)"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short runs of every benchmark (a smoke test)")
    ap.add_argument("--only", action="append", choices=sorted(SUITE), metavar="NAME",
                    help=f"run only this benchmark (repeatable): {', '.join(SUITE)}")
    ap.add_argument("--out", default=None, help="folder for files the benchmarks write (default: a temp dir)")
    args = ap.parse_args(argv)
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="enginecfg-bench-"))
    out_dir.mkdir(parents=True, exist_ok=True)

    print(f"# enginecfg benchmark suite{' (--quick)' if args.quick else ''}")
    print(f"# date     {time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"# machine  {_machine()}")
    print(f"# software Python {platform.python_version()} · commit {_commit()}")
    wanted = args.only or list(SUITE)
    cuda = None
    results: dict[str, tuple[str, list[str]]] = {}
    for name in wanted:
        script, full, quick, needs_cuda = SUITE[name]
        path = BENCH / script
        if not path.exists():
            results[name] = ("absent", [f"{script} is not in bench/"])
            continue
        if needs_cuda:
            if cuda is None:
                cuda = _cuda_available()
            if not cuda:
                results[name] = ("skipped", ["no CUDA device"])
                continue
        argv_b = [str(path), *(quick if args.quick else full)]
        print(f"\n## {name}: python {' '.join(Path(a).name if a == str(path) else a for a in argv_b)}")
        code, out, secs = _run(name, argv_b, out_dir)
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        results[name] = (f"{status}, {secs:.0f} s", summarise(name, out))

    print("\n## summary")
    failed = False
    for name in wanted:
        status, rows = results[name]
        failed |= status.startswith("FAILED")
        print(f"{name} [{status}]")
        for row in rows:
            print(f"    {row}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
