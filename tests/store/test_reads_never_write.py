"""Commands that only read never write: a mistyped ``--db`` creates no store, a file that holds
none is named for what it holds, and a store at an older schema revision is not migrated by a
read (it is told to run ``enginecfg db upgrade``)."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from support import run_cli
from enginecfg.store import AuditStore
from enginecfg.store import engine as eng
from enginecfg.testing import emit_run

READS = [
    ["runs"], ["show", "0" * 12], ["history", "cache_config.block_size"],
    ["why", "0" * 12, "cache_config.block_size"], ["diff", "0" * 12, "1" * 12],
    ["export"], ["export", "--all"], ["audit", "verify"], ["audit", "checkpoint"],
]


def _refused(proc, *words: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


@pytest.mark.parametrize("argv", READS, ids=lambda a: " ".join(a[:2]))
def test_a_read_of_a_mistyped_path_creates_no_store(tmp_path, argv):
    path = tmp_path / "typo.db"
    proc = run_cli(*argv, "--db", f"sqlite:///{path}", env={"ENGINECFG_AUDIT_KEY": "k" * 32})
    _refused(proc, "does not exist", str(path))
    assert list(tmp_path.iterdir()) == []


def test_the_schema_questions_create_nothing_either(tmp_path):
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    current = run_cli("db", "current", "--db", url)
    assert current.returncode == 0 and "at revision base" in current.stdout
    _refused(run_cli("db", "downgrade", "base", "--db", url), "does not exist")
    assert list(tmp_path.iterdir()) == []


def test_verify_of_an_empty_file_names_what_it_found(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    proc = run_cli("audit", "verify", "--db", f"sqlite:///{empty}")
    _refused(proc, "holds no audit store", "is empty (0 bytes)")
    assert "intact" not in proc.stdout and empty.stat().st_size == 0
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database\n")
    _refused(run_cli("runs", "--db", f"sqlite:///{junk}"), "holds no audit store", "not a database")
    other = tmp_path / "other.db"
    engine = eng.make_engine(f"sqlite:///{other}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE invoices (n INTEGER)"))
    engine.dispose()
    _refused(run_cli("audit", "verify", "--db", f"sqlite:///{other}"), "other tables (invoices)")


def test_reads_of_an_empty_database_create_no_table(db_url):
    if db_url.startswith("sqlite"):  # an empty file: the file exists, holding nothing
        engine = eng.make_engine(db_url)
        engine.connect().close()
        engine.dispose()
    for argv in (["audit", "verify"], ["runs"]):
        _refused(run_cli(*argv, "--db", db_url), "holds no audit store")
    engine = eng.make_engine(db_url, read_only=True)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


def test_a_read_never_migrates_an_older_store(db_url):
    with AuditStore(db_url).attach() as store:
        emit_run()
    store.close()
    engine = eng.make_engine(db_url)
    eng.downgrade(engine, "0010_release")  # the revision before this one: nothing to export
    engine.dispose()
    for argv in (["audit", "verify"], ["runs"], ["export", "--all"]):
        _refused(run_cli(*argv, "--db", db_url), "revision 0010_release", "enginecfg db upgrade")
    engine = eng.make_engine(db_url)
    try:
        assert eng.current_revision(engine) == "0010_release"
    finally:
        engine.dispose()
    assert run_cli("db", "upgrade", "--db", db_url).returncode == 0
    verdict = run_cli("audit", "verify", "--db", db_url)
    assert verdict.returncode == 0 and "intact: 1 run(s)" in verdict.stdout


def test_a_store_of_a_newer_enginecfg_is_named_not_read(db_url):
    with AuditStore(db_url).attach():
        emit_run()
    engine = eng.make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
    engine.dispose()
    _refused(run_cli("runs", "--db", db_url), "0099_from_the_future", "newer enginecfg")
