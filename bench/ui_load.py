#!/usr/bin/env python3
"""The audit page under load: latency of its pages with slow and idle clients held open,
beside the same requests with none held, in the same run.

    python bench/ui_load.py [--clients 4] [--requests 50] [--slow 8] [--idle 16] [--runs 200]

``enginecfg ui`` runs as a real process on loopback over a SQLite store of ``--runs`` recorded
runs.  Each phase sends ``--clients`` x ``--requests`` GETs, the clients in parallel, cycling
over the pages (the run list, a run, a field's history, verify, diff).  The baseline phase holds
nothing open; the held phase first opens ``--idle`` connections that say nothing and ``--slow``
clients that send a request a byte every 100 ms, never finishing while it runs.  Printed: every
request's status (all must be 200), and p50 / p90 / p99 / max per phase, with the ratio
held / baseline; the exit status is 1 if any request failed.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _store(path: Path, runs: int) -> tuple[str, list[str]]:
    sys.path.insert(0, str(ROOT))
    from enginecfg.store import AuditStore
    from enginecfg.testing import emit_run

    url = f"sqlite:///{path}"
    ids = []
    with AuditStore(url, actor="bench").attach() as store:
        for i in range(runs):
            ids.append(emit_run(model=f"/models/m{i % 10}", fail="rejected" if i % 7 == 0 else None))
    store.close()
    return url, ids


def _get(port: int, path: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.perf_counter() - t0
    finally:
        conn.close()


def _phase(port: int, paths: list[str], clients: int, requests: int) -> tuple[list[float], list[str]]:
    times: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        for i in range(requests):
            path = paths[(k + i) % len(paths)]
            try:
                status, took = _get(port, path)
            except OSError as exc:
                with lock:
                    errors.append(f"{path}: {exc!r}")
                continue
            with lock:
                times.append(took)
                if status != 200:
                    errors.append(f"{path}: {status}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times, errors


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def _summary(name: str, times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return (f"{name:<9} n={len(ms):<4} p50 {_pct(ms, 50):7.1f} ms  p90 {_pct(ms, 90):7.1f} ms  "
            f"p99 {_pct(ms, 99):7.1f} ms  max {max(ms):7.1f} ms  mean {statistics.fmean(ms):7.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=50, help="per client and phase")
    ap.add_argument("--slow", type=int, default=8)
    ap.add_argument("--idle", type=int, default=16)
    ap.add_argument("--runs", type=int, default=200, help="runs in the store the page reads")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url, ids = _store(Path(tmp) / "audit.db", args.runs)
        env = dict(os.environ, ENGINECFG_PLUGINS="none", PYTHONPATH=str(ROOT))
        proc = subprocess.Popen([sys.executable, "-P", "-m", "enginecfg", "ui", "--db", url, "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
        try:
            line = proc.stdout.readline()
            port = int(line.split(" at http://127.0.0.1:")[1].split("/")[0])
            paths = ["/", f"/run/{ids[len(ids) // 2]}", "/history?field=cache_config.block_size", "/verify",
                     f"/diff?a={ids[0]}&b={ids[1]}"]
            _phase(port, paths, 1, len(paths))  # warm: templates compiled, caches filled
            base, base_errors = _phase(port, paths, args.clients, args.requests)
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.idle)]
            slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.slow)]
            for s in slow:
                s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            stop = threading.Event()

            def trickle() -> None:
                while not stop.wait(0.1):
                    for s in slow:
                        s.sendall(b"a")

            trickler = threading.Thread(target=trickle, daemon=True)
            trickler.start()
            held, held_errors = _phase(port, paths, args.clients, args.requests)
            stop.set()
            trickler.join()
            for s in idle + slow:
                s.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"enginecfg ui on loopback, SQLite store of {args.runs} runs; {args.clients} clients x "
          f"{args.requests} requests per phase; held: {args.slow} slow + {args.idle} idle connections")
    print(_summary("baseline", base))
    print(_summary("held", held))
    print(f"p99 held / baseline: {_pct(held, 99) / _pct(base, 99):.2f}x")
    errors = base_errors + held_errors
    print(f"errors: {len(errors)}" + ("" if not errors else f" ({errors[:5]})"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
