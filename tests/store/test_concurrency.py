"""Many writers at once, and writers killed mid-run or mid-transaction."""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import kill_at_marker
from sqlalchemy import func, select

from enginecfg.store import AuditStore
from enginecfg.testing import emit_run, write_runs
from enginecfg.store.models import ChainHead, Run

WRITERS, RUNS_EACH = 8, 200


def test_eight_processes_record_1600_runs_none_lost_or_duplicated(db_url):
    # the database is fresh: the writers also race to create the schema
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(WRITERS) as pool:
        results = pool.starmap(write_runs, [(db_url, RUNS_EACH, str(i)) for i in range(WRITERS)])
    assert [r["failed"] for r in results] == [0] * WRITERS, [r["errors"][:1] for r in results]
    sent = [rid for r in results for rid in r["ids"]]
    assert len(sent) == len(set(sent)) == WRITERS * RUNS_EACH
    store = AuditStore(db_url)
    with store.engine.connect() as conn:
        stored = conn.execute(select(Run.id)).scalars().all()
        positions = conn.execute(select(Run.chain_pos).order_by(Run.chain_pos)).scalars().all()
        per_model = dict(conn.execute(select(Run.model, func.count()).group_by(Run.model)).all())
    assert len(stored) == len(set(stored)) == WRITERS * RUNS_EACH
    assert set(stored) == set(sent)
    assert positions == list(range(1, WRITERS * RUNS_EACH + 1))
    assert per_model == {f"/models/m{i}": RUNS_EACH for i in range(WRITERS)}
    res = store.verify()
    assert res.ok, res.first_bad
    assert res.runs_checked == WRITERS * RUNS_EACH
    store.close()


_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from enginecfg.store import AuditStore
    from enginecfg.testing import emit_run

    url, marker, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    store = AuditStore(url).attach()
    emit_run()                                   # one complete run first

    def hold(*_):
        marker.write_text("ready")
        time.sleep(600)                          # killed here

    if mode == "mid-run":
        emit_run(run_id="d" * 32, stop_after_changes=True, between=hold)
    else:
        from enginecfg.store import dialects
        # held inside the write transaction, where COMMIT would be sent; on PostgreSQL the
        # run's rows then go after its statement, in an explicit transaction (as a large
        # run's do)
        dialects.PostgreSQLStatements.max_params = 1
        dialects.Statements.commit = lambda self, cur: hold()
        emit_run(run_id="d" * 32)
""")


def _kill_while_holding(db_url: str, tmp_path: Path, mode: str) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    marker = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, str(script), db_url, str(marker), mode],
                            stderr=subprocess.PIPE, text=True)
    kill_at_marker(proc, marker, "child", timeout=120)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("mode", ["mid-run", "in-transaction"])
def test_sigkill_leaves_the_database_consistent(db_url, tmp_path, mode):
    _kill_while_holding(db_url, tmp_path, mode)
    store = AuditStore(db_url).attach()
    with store.engine.connect() as conn:
        ids = conn.execute(select(Run.id)).scalars().all()
        head = conn.execute(select(ChainHead.position)).scalar_one()
    assert len(ids) == 1 and "d" * 32 not in ids and head == 1
    assert store.verify().ok
    # the next run records fine (the killed writer's lock is gone) and chains on
    rid = emit_run(run_id="d" * 32)
    assert store.write_failed == 0, store.record_error
    assert store.get_run(rid)["position"] == 2
    res = store.verify()
    assert res.ok and res.runs_checked == 2
    store.close()


def test_threads_of_one_process_share_a_store(store):
    import threading

    ids: list[str] = []
    lock = threading.Lock()

    def work():
        for _ in range(20):
            rid = emit_run()
            with lock:
                ids.append(rid)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.recorded == 80 and store.write_failed == 0
    res = store.verify()
    assert res.ok and res.runs_checked == 80
