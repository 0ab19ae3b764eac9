"""Audit-store benchmark: runs recorded per second, and the history query on a big store.

    python bench/store_bench.py [--runs 400] [--repeat 3] [--changes 1000000]

* one writer: one process recording synthetic runs (6 stages, 5 changes, 2 messages each)
  through the signal bus into a fresh SQLite file; runs/s, median of ``--repeat``;
* 8 writers: 8 processes (spawn) released together by a barrier, into one file;
  aggregate runs/s = all runs / (last finish - first start), median of ``--repeat``;
* the two alternate, one round = one writer then 8 writers, and the ratio is taken round by
  round (median, with the lowest and highest): on a shared machine whose speed drifts from
  minute to minute, a ratio of two medians taken minutes apart measures the drift;
* the same two on PostgreSQL when ``ENGINECFG_TEST_PG_URL`` is set (a schema per repeat);
* ``field_history`` with ``--changes`` changes stored (bulk-inserted, 10 per run, into a
  temporary SQLite file): median latency of the default query (newest 50 runs), of
  ``changed_only=True`` and of a model-filtered query.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path


def _one_writer(url: str, n: int) -> float:
    from enginecfg.store import AuditStore
    from enginecfg.testing import emit_run

    store = AuditStore(url).attach()
    emit_run()  # schema + connection warm-up
    t0 = time.perf_counter()
    for i in range(n):
        emit_run(block_size=16 if i % 2 else None)
    dt = time.perf_counter() - t0
    assert store.write_failed == 0, store.record_error
    store.close()
    return n / dt


def _worker(url: str, n: int, barrier, queue) -> None:
    from enginecfg.store import AuditStore
    from enginecfg.testing import emit_run

    store = AuditStore(url).attach()
    emit_run()
    barrier.wait()
    t0 = time.time()
    for _ in range(n):
        emit_run()
    queue.put((t0, time.time(), store.write_failed))
    store.close()


def alternating(fresh, writers: int, n: int, rounds: int) -> dict[str, list[float]]:
    """``rounds`` rounds of one writer then ``writers`` writers (each into a fresh database
    from ``fresh(tag)``): the rates of each and the ratio of each round."""
    one, many, ratio = [], [], []
    for _ in range(rounds):
        one.append(_one_writer(fresh("one"), n))
        many.append(_many_writers(fresh("many"), writers, n))
        ratio.append(many[-1] / one[-1])
    return {"one": one, "many": many, "ratio": ratio}


def summary(name: str, writers: int, n: int, got: dict[str, list[float]]) -> str:
    med = statistics.median
    rounds = len(got["ratio"])
    return (f"{name:10s} 1 writer : {med(got['one']):8.0f} runs/s (median of {rounds} x {n} runs)\n"
            f"{name:10s} {writers} writers: {med(got['many']):8.0f} runs/s aggregate (median of "
            f"{rounds} x {writers}x{n} runs)\n"
            f"{name:10s} {writers} writers / 1 writer, round by round: median x{med(got['ratio']):.2f} "
            f"(x{min(got['ratio']):.2f}-x{max(got['ratio']):.2f})")


def _many_writers(url: str, writers: int, n: int) -> float:
    from enginecfg.store import AuditStore

    AuditStore(url).verify()  # create the schema before the clock starts
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, n, barrier, queue)) for _ in range(writers)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    assert all(r[2] == 0 for r in results), results
    start, end = min(r[0] for r in results), max(r[1] for r in results)
    return writers * n / (end - start)


class _PgSchemas:
    """Fresh PostgreSQL schemas (via search_path) for each measurement, dropped after."""

    def __init__(self, url: str):
        from enginecfg.store.engine import make_engine

        self.base = url
        self.engine = make_engine(url)
        self.names: list[str] = []

    def new(self) -> str:
        from sqlalchemy import text

        from enginecfg.store.engine import normalise_url

        name = "bench_" + uuid.uuid4().hex[:12]
        with self.engine.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {name}"))
        self.names.append(name)
        return normalise_url(self.base).update_query_dict(
            {"options": f"-csearch_path={name}"}).render_as_string(hide_password=False)

    def close(self) -> None:
        from sqlalchemy import text

        with self.engine.begin() as conn:
            for name in self.names:
                conn.execute(text(f"DROP SCHEMA {name} CASCADE"))
        self.engine.dispose()


def _fill(url: str, n_changes: int, per_run: int = 10) -> int:
    """Bulk-insert runs with ``per_run`` changes each (placeholder hashes: not verifiable)."""
    from sqlalchemy import insert

    from enginecfg.store import AuditStore
    from enginecfg.testing import base_config
    from enginecfg.store.models import Change, Run

    store = AuditStore(url)
    engine = store.engine
    n_runs = n_changes // per_run
    now = time.time() - n_runs
    fields = ["cache_config.block_size", "cache_config.enable_prefix_caching",
              "scheduler_config.enable_chunked_prefill", "cache_config.mamba_cache_mode",
              "cache_config.cache_dtype", "attention_config.backend",
              "cache_config.mamba_block_size", "model_config.max_model_len",
              "hf_config.is_causal", "cache_config.calculate_kv_scales"]
    batch = 2000
    for start in range(0, n_runs, batch):
        runs, changes = [], []
        for i in range(start, min(start + batch, n_runs)):
            rid = f"{i:032x}"
            bs = (16, 1056, 2048, 784)[i % 4]
            cfg = base_config(bs)
            runs.append({
                "id": rid, "chain_pos": i + 1, "started_at": now + i, "finished_at": now + i,
                "recorded_at": now + i, "status": "resolved", "enginecfg_version": "bench",
                "host": "bench", "pid": 1, "model": f"/models/m{i % 20}",
                "architecture": "Qwen3NextForCausalLM", "engine_args": {},
                "planned_stages": [], "input_config": cfg, "input_fingerprint": "x",
                "result": {"config": cfg}, "result_fingerprint": "x", "error": None,
                "failed_stage": None, "n_stages": 0, "n_changes": per_run, "n_messages": 0,
                "n_checks": 0, "prev_hash": "0" * 64, "row_hash": f"{i:064x}"})
            for s in range(per_run):
                changes.append({"run_id": rid, "seq": s + 1, "stage": "defaults",
                                "field": fields[s % len(fields)], "old": None, "new": bs,
                                "reason": "bench change", "level": "INFO", "via": "context",
                                "row_hash": "0" * 64})
        with engine.begin() as conn:
            conn.execute(insert(Run), runs)
            conn.execute(insert(Change), changes)
    store.close()
    return n_runs * per_run


def _time_query(fn, repeat: int = 15) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=400, help="runs per writer per repeat")
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--changes", type=int, default=1_000_000)
    ap.add_argument("--skip-history", action="store_true")
    args = ap.parse_args(argv)

    print(f"# {time.strftime('%Y-%m-%d')} · {platform.node()} · {platform.processor() or platform.machine()}"
          f" · {os.cpu_count()} CPUs · Python {platform.python_version()}")
    backends: list[tuple[str, object]] = [("sqlite", None)]
    pg = os.environ.get("ENGINECFG_TEST_PG_URL")
    if pg:
        backends.append(("postgresql", _PgSchemas(pg)))
    with tempfile.TemporaryDirectory() as tmp:
        for name, schemas in backends:
            def fresh(tag: str) -> str:
                if schemas is None:
                    return f"sqlite:///{Path(tmp) / f'{tag}-{uuid.uuid4().hex[:6]}.db'}"
                return schemas.new()

            got = alternating(fresh, args.writers, args.runs, args.repeat)
            print(summary(name, args.writers, args.runs, got), flush=True)
            if schemas is not None:
                schemas.close()
        if not args.skip_history:
            from enginecfg.store import AuditStore

            url = f"sqlite:///{Path(tmp) / 'history.db'}"
            t0 = time.perf_counter()
            n = _fill(url, args.changes)
            fill_s = time.perf_counter() - t0
            store = AuditStore(url)
            field = "cache_config.block_size"
            q_default = _time_query(lambda: store.field_history(field, limit=50))
            q_changed = _time_query(lambda: store.field_history(field, limit=50,
                                                                changed_only=True))
            q_model = _time_query(lambda: store.field_history(field, model="m7", limit=50))
            size_mb = (Path(tmp) / "history.db").stat().st_size / 1e6
            print(f"history    {n:,} changes in {n // 10:,} runs (filled in {fill_s:.0f} s, "
                  f"{size_mb:.0f} MB)")
            print(f"history    field_history(limit=50)                 : {q_default * 1e3:7.2f} ms")
            print(f"history    field_history(limit=50, changed_only)   : {q_changed * 1e3:7.2f} ms")
            print(f"history    field_history(model='m7', limit=50)     : {q_model * 1e3:7.2f} ms")
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
