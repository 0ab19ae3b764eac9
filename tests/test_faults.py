"""Crashes and faults around a real ``enginecfg run``: the record is whole or absent, never torn.

tests/store/test_concurrency.py kills synthetic writers mid-run and mid-transaction; here
the process killed is the ``enginecfg run`` command itself, running the real pipeline.  The
hold points come from a stage plugin made "installed" for the child only (a ``.dist-info``
folder on its ``PYTHONPATH``): it blocks inside its own ``run`` (mid-run) or, by replacing
the write statements' ``commit`` in the child, inside the write transaction.

Then the faults of the database itself: a read-only database file, a full disk (a tiny
tmpfs; these tests run as root) and a PostgreSQL server restarted between runs.  Each test
says in its docstring which protection it pins: removing that protection makes it fail.

The faults are real (database files, mounts, killed processes); the commands around them run
through the CLI's ``main`` in this process (``support.run_cli``), except the killed run, one
run whose stdout is checked up to interpreter exit and the fresh process after a PostgreSQL
restart, which are real processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from support import CONFIGS, PG_URL, kill_at_marker, run_cli
from enginecfg import EngineConfig, Pipeline
from enginecfg.store import AuditStore
from enginecfg.store.engine import make_engine, normalise_url

QWEN = str(CONFIGS / "qwen3.5-27b")
MAMBA = str(CONFIGS / "mamba-130m-hf")
_needs_pg = pytest.mark.skipif(not PG_URL, reason="ENGINECFG_TEST_PG_URL is not set")
# ``db_url`` (SQLite and PostgreSQL) comes from tests/conftest.py


def _cli(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """``enginecfg ARGS`` through the CLI's main in this process (``support.run_cli``): the
    faults stay real (the database files, mounts and killed processes); only the interpreter
    start-up of each command is saved.  The killed run and ``_real_cli`` are real processes."""
    return run_cli(*args, env=env, timeout=timeout)


def _real_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``enginecfg ARGS`` as a real process (for what only a process shows)."""
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          cwd=os.environ["ENGINECFG_TEST_TMP"], timeout=timeout)


@pytest.fixture(scope="module", autouse=True)
def _snapshots_cached():
    """Both configs' transformers snapshots in this session's cache before the first run, as
    a user's second run finds them: no test here is about building one, and the killed
    process must reach its hold point without importing transformers."""
    from enginecfg.pipeline.hf.cache import snapshots_for

    snapshots_for([json.loads((Path(p) / "config.json").read_text()) for p in (QWEN, MAMBA)])


def _runs(url: str) -> list[dict]:
    store = AuditStore(url)
    try:
        return store.list_runs()
    finally:
        store.close()


def _verified(url: str) -> int:
    """Runs checked by ``enginecfg audit verify`` (which must pass)."""
    store = AuditStore(url)
    try:
        res = store.verify()
        assert res.ok, res.first_bad
        n = res.runs_checked
    finally:
        store.close()
    proc = _cli("audit", "verify", "--db", url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return n


# -- SIGKILL of the CLI ----------------------------------------------------------------------

_HOLD_STAGE = textwrap.dedent('''
    """A stage that holds the run where the test kills it."""
    import os, time
    from pathlib import Path
    from enginecfg import Stage


    def _hold(*_):
        Path(os.environ["HOLD_MARKER"]).write_text("ready")
        time.sleep(600)


    class Hold(Stage):
        name = "test-hold"

        def applies(self, cfg):
            return True

        def run(self, cfg, ctx):
            ctx.set("scheduler_config", "max_num_batched_tokens", 8192, reason="a change that must not be kept")
            if os.environ["HOLD_MODE"] == "stage":
                _hold()
            if os.environ["HOLD_MODE"] == "write":
                from enginecfg.store import dialects

                # held where COMMIT would be sent, inside the write transaction (on
                # PostgreSQL the rows then follow the run's statement, as a large run's do)
                dialects.PostgreSQLStatements.max_params = 1
                dialects.Statements.commit = lambda self, cur: _hold()
''')


def _hold_plugin(tmp_path: Path) -> Path:
    root = tmp_path / "plugin"
    info = root / "enginecfg_test_hold-0.1.dist-info"
    info.mkdir(parents=True)
    (root / "enginecfg_test_hold.py").write_text(_HOLD_STAGE)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: enginecfg-test-hold\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[enginecfg.stages]\nhold = enginecfg_test_hold:Hold\n")
    return root


def _kill_cli_at_hold(url: str, tmp_path: Path, mode: str) -> None:
    marker = tmp_path / f"ready-{mode}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_hold_plugin(tmp_path)), os.environ.get("PYTHONPATH", "")]), ENGINECFG_PLUGINS="enginecfg-test-hold",
               HOLD_MODE=mode, HOLD_MARKER=str(marker))
    proc = subprocess.Popen([sys.executable, "-P", "-m", "enginecfg", "run", QWEN, "--db", url, "--json"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=os.environ["ENGINECFG_TEST_TMP"])
    kill_at_marker(proc, marker, "enginecfg run", timeout=180)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.parametrize("mode", ["stage", "write"])
def test_sigkill_of_enginecfg_run_leaves_no_partial_record(db_url, tmp_path, mode):
    """Pins: a run is written in ONE transaction when it finishes (stage: nothing was written
    before run_finished; write: the killed transaction rolls back, and the chain head lock it
    held is released).  Writing events as they come, or committing in pieces, leaves a
    partial run here; a lock that outlives its process makes the next run fail.  The killed
    run held a plugin's stage, so its journal entry is left, and the next run's store records
    it whole, as interrupted, in a transaction of its own, before its own run."""
    first = _cli("run", MAMBA, "--db", db_url)
    assert first.returncode == 0, first.stderr
    _kill_cli_at_hold(db_url, tmp_path, mode)
    runs = _runs(db_url)
    assert [r["model"] for r in runs] == [MAMBA], runs       # the killed run left nothing torn
    assert _verified(db_url) == 1
    again = _cli("run", QWEN, "--db", db_url, "--json")
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    runs = _runs(db_url)
    assert [r["status"] for r in runs] == ["resolved", "interrupted", "resolved"], runs
    assert runs[0]["run_id"] == doc["run_id"] and runs[1]["model"] == QWEN
    where = "while stage 'test-hold'" if mode == "stage" else "after its last stage"
    assert where in runs[1]["error"] and "recorded from its journal" in runs[1]["error"]
    assert _verified(db_url) == 3


# -- a database that cannot be written -------------------------------------------------------

def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip()}")


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs holding an audit database with one recorded run."""
    mnt = tmp_path / "disk"
    _mount_tmpfs(mnt, "4m")
    url = f"sqlite:///{mnt / 'audit.db'}"
    proc = _cli("run", MAMBA, "--db", url)
    assert proc.returncode == 0, proc.stderr
    yield mnt, url
    _umount(mnt)


def _read_only(mnt: Path):
    """Make the database unwritable: remount the filesystem read-only (root ignores mode bits)."""
    proc = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot remount read-only: {proc.stderr.strip()}")

    def undo():
        subprocess.run(["mount", "-o", "remount,rw", str(mnt)], check=True)
    return undo


def _fill(mnt: Path):
    """Fill the filesystem to the last byte."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (b"\0" * 65536, b"\0"):
            try:
                while os.write(fd, chunk):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler.unlink


def _assert_unrecorded(proc: subprocess.CompletedProcess, best_effort: bool, url: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("enginecfg: audit record NOT written: "), proc.stderr
    assert "Traceback" not in proc.stderr
    start = proc.stdout.find("{\n")
    doc = json.loads(proc.stdout[start:])                        # the document is still printed
    assert doc["status"] == "resolved" and doc["config"]
    assert doc["run_id"] in lines[0]                              # the missing record is named
    assert proc.returncode == (0 if best_effort else 2), (proc.returncode, proc.stderr)


@pytest.mark.parametrize("fault", ["read-only", "disk full"])
@pytest.mark.parametrize("best_effort", [True, False], ids=["best-effort", "strict"])
def test_unwritable_database(small_disk, fault, best_effort):
    """Pins: a failed audit write is caught by the recorder and reported by the CLI
    (``record_error``): with --audit-best-effort the config still resolves (exit 0) with one
    "audit record NOT written" line naming the run; without it the run is not trusted (exit
    2).  A recorder that raises, or a CLI that ignores ``record_error``, fails this test; and
    the database is intact once space / write access is back."""
    mnt, url = small_disk
    undo = _read_only(mnt) if fault == "read-only" else _fill(mnt)
    try:
        proc = _cli("run", QWEN, "--db", url, "--json", *(["--audit-best-effort"] if best_effort else []))
    finally:
        undo()
    _assert_unrecorded(proc, best_effort, url)
    if fault == "disk full":
        # SQLite says "database or disk is full", or "disk I/O error" when even its shared
        # memory file (WAL index) cannot grow
        assert "full" in proc.stderr.lower() or "disk i/o" in proc.stderr.lower(), proc.stderr
    assert [r["model"] for r in _runs(url)] == [MAMBA]
    again = _cli("run", QWEN, "--db", url)
    assert again.returncode == 0, again.stderr
    assert _verified(url) == 2


def test_unwritable_database_stdout_is_only_the_document(small_disk):
    """A real process: nothing but the document reaches its stdout, up to interpreter exit."""
    mnt, url = small_disk
    undo = _read_only(mnt)
    try:
        proc = _real_cli("run", QWEN, "--db", url, "--json", "--audit-best-effort")
    finally:
        undo()
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["status"] == "resolved"


# -- PostgreSQL restarted between runs -------------------------------------------------------

def _restart_postgres() -> None:
    if not shutil.which("pg_lsclusters"):
        pytest.skip("pg_lsclusters is not installed (cannot restart the server)")
    port = str(normalise_url(PG_URL).port or 5432)
    rows = [line.split() for line in subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True,
                                                    check=True).stdout.splitlines()]
    match = [r for r in rows if len(r) > 2 and r[2] == port]
    if not match:
        pytest.skip(f"no local cluster on port {port} to restart")
    version, cluster = match[0][0], match[0][1]
    subprocess.run(["pg_ctlcluster", version, cluster, "restart"], check=True, capture_output=True, timeout=120)


@pytest.mark.postgres
@_needs_pg
def test_postgres_restart_between_runs_of_one_store():
    """Pins ``pool_pre_ping`` on PostgreSQL engines: a long-lived store whose pooled
    connection died with the server reconnects instead of failing the next record."""
    schema = "f_" + uuid.uuid4().hex[:16]
    admin = make_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    admin.dispose()
    url = normalise_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"}) \
        .render_as_string(hide_password=False)
    store = AuditStore(url).attach()
    try:
        first = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(MAMBA))
        assert store.recorded == 1, store.record_error
        _restart_postgres()
        second = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(QWEN))
        assert store.record_error is None, store.record_error
        assert store.recorded == 2
        assert [r["run_id"] for r in store.list_runs()] == [second.run_id, first.run_id]
        res = store.verify()
        assert res.ok and res.runs_checked == 2
        # and a fresh process after the restart records too
        proc = _real_cli("run", QWEN, "--db", url)
        assert proc.returncode == 0, proc.stderr
        assert store.verify().runs_checked == 3
    finally:
        store.close()
        admin = make_engine(PG_URL)
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
