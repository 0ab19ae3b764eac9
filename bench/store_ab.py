"""The audit store's one-writer speed of two checkouts, alternated round by round.

    python bench/store_ab.py BEFORE_CHECKOUT AFTER_CHECKOUT [RUNS] [ROUNDS]

Each round records RUNS synthetic runs (``emit_run``) into a fresh SQLite file, in a fresh
process importing the one checkout (``PYTHONPATH``), then the same with the other; the ratio
after/before is taken round by round, so that a machine whose load drifts compares like with
like.  The rate is per CPU-second of the writing process (the write path's own cost; a
loaded shared machine makes wall time a measure of the neighbours); ``AB_WALL=1`` takes wall
time instead, ``AB_PG_URL`` a PostgreSQL server (a schema per round).  A checkout made with
``git archive COMMIT | tar -x -C DIR`` is one.
"""
import os
import statistics
import subprocess
import sys
import tempfile
CODE = r'''
import sys, time, tempfile, os
from enginecfg.store import AuditStore
from enginecfg.testing import emit_run
d = tempfile.mkdtemp()
url = f"sqlite:///{d}/a.db"
pg = os.environ.get("AB_PG_URL")
if pg:
    import uuid
    from sqlalchemy import text
    from enginecfg.store.engine import make_engine, normalise_url
    schema = "ab_" + uuid.uuid4().hex[:12]
    admin = make_engine(pg)
    with admin.begin() as c:
        c.execute(text(f"CREATE SCHEMA {schema}"))
    url = normalise_url(pg).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
store = AuditStore(url).attach()
emit_run()
n = int(sys.argv[1])
t0 = time.perf_counter(); c0 = time.process_time()
for i in range(n):
    emit_run(block_size=16 if i % 2 else None)
dt = time.perf_counter() - t0; cpu = time.process_time() - c0
assert store.write_failed == 0, store.record_error
store.close()
if pg:
    with admin.begin() as c:
        c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
print(n / dt, n / cpu)
'''
def one(src, n):
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run([sys.executable, "-P", "-c", CODE, str(n)], env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    assert out.returncode == 0, out.stderr
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall if os.environ.get("AB_WALL") else cpu)
base, new = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 600
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 7
ratios, b_all, n_all = [], [], []
for r in range(rounds):
    b = one(base, n); a = one(new, n)
    b_all.append(b); n_all.append(a); ratios.append(a / b)
    print(f"round {r+1}: before {b:.0f} runs/s, after {a:.0f} runs/s, ratio {a/b:.3f}", flush=True)
print(f"median before {statistics.median(b_all):.0f}, after {statistics.median(n_all):.0f}, ratio median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
