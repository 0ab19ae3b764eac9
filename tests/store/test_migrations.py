"""The Alembic environment: round trips on both backends, models == migrations."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

import enginecfg.migrations
from enginecfg.store import AuditStore
from enginecfg.store import engine as eng
from enginecfg.testing import emit_run
from enginecfg.store.models import AUDIT_TABLES, Base

AUDIT = set(AUDIT_TABLES) | {"chain_head"}


def _alembic_head() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(eng.alembic_config()).get_current_head()


HEAD = _alembic_head()


def _tables(engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def test_upgrade_downgrade_upgrade_round_trip(db_url):
    engine = eng.make_engine(db_url)
    try:
        eng.upgrade(engine)
        assert eng.current_revision(engine) == eng.head_revision() == HEAD
        assert AUDIT <= _tables(engine)
        eng.downgrade(engine, "0001")
        assert eng.current_revision(engine) == "0001"
        assert "validation_checks" not in _tables(engine)
        assert "n_checks" not in _columns(engine, "runs")
        eng.downgrade(engine, "base")
        assert eng.current_revision(engine) is None
        assert not (AUDIT & _tables(engine))
        eng.upgrade(engine)
        assert AUDIT <= _tables(engine)
        assert eng.current_revision(engine) == HEAD
    finally:
        engine.dispose()


def test_models_match_migrations(db_url):
    engine = eng.make_engine(db_url)
    try:
        eng.upgrade(engine)
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(ctx, Base.metadata) == []
    finally:
        engine.dispose()


def test_store_upgrades_on_first_use_and_data_survives_reupgrade(db_url):
    with AuditStore(db_url).attach() as store:
        rid = emit_run()
        assert store.recorded == 1
        assert eng.current_revision(store.engine) == HEAD
    again = AuditStore(db_url)
    assert again.get_run(rid)["run_id"] == rid
    assert again.verify().ok
    again.close()


def _layout_1_run(store, monkeypatch) -> str:
    """A run as enginecfg recorded it before hash layout 2 (no one's name hashed): what a
    schema down to 0001 can hold whole."""
    from enginecfg.store import hashing

    with monkeypatch.context() as m:
        m.setattr(hashing, "LAYOUT_STEPS", hashing.LAYOUT_STEPS[:1])
        with store.attach():
            rid = emit_run()
    assert store.get_run(rid)["hash_layout"] == 1
    return rid


def test_downgrade_to_0001_and_back_keeps_old_runs_verifiable(db_url, monkeypatch):
    store = AuditStore(db_url)
    rid = _layout_1_run(store, monkeypatch)
    engine = store.engine
    eng.downgrade(engine, "0001")
    eng.upgrade(engine)
    store._ready = False
    assert store.get_run(rid)["checks"] == 0
    assert store.verify().ok
    store.close()


def test_script_location_is_the_installed_package_not_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = eng.alembic_config()
    assert Path(cfg.get_main_option("script_location")) == Path(
        enginecfg.migrations.__file__).resolve().parent
    url = f"sqlite:///{tmp_path / 'x.db'}"
    engine = eng.make_engine(url)
    eng.upgrade(engine)
    assert eng.current_revision(engine) == HEAD
    engine.dispose()


def test_alembic_command_line_with_the_shipped_ini(tmp_path):
    ini = Path(enginecfg.migrations.__file__).parent / "alembic.ini"
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    env = dict(os.environ)
    env.pop("ENGINECFG_DB", None)
    for args in (["upgrade", "head"], ["downgrade", "base"], ["upgrade", "head"]):
        proc = subprocess.run([sys.executable, "-m", "alembic", "-c", str(ini), "-x",
                               f"url={url}", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    engine = eng.make_engine(url)
    assert eng.current_revision(engine) == HEAD
    engine.dispose()


def test_sqlite_connection_settings(tmp_path):
    engine = eng.make_engine(f"sqlite:///{tmp_path / 'p.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_default_url_uses_env_then_user_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("ENGINECFG_DB", "sqlite:////somewhere/else.db")
    assert eng.default_url() == "sqlite:////somewhere/else.db"
    assert AuditStore().url == "sqlite:////somewhere/else.db"
    monkeypatch.delenv("ENGINECFG_DB")
    import platformdirs

    expected = Path(platformdirs.user_data_dir("enginecfg")) / "audit.db"
    assert eng.default_url() == f"sqlite:///{expected}"


@pytest.mark.parametrize("given, driver", [("postgresql://u:p@h/db", "postgresql+psycopg"),
                                           ("sqlite:///x.db", "sqlite")])
def test_bare_postgresql_url_means_psycopg3(given, driver):
    assert eng.normalise_url(given).drivername == driver


def _columns(engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


def test_0003_explanations_round_trip_keeps_runs_verifiable(db_url, monkeypatch):
    """The explanation column comes and goes with 0003; the hash chain does not depend on it."""
    store = AuditStore(db_url)
    rid = _layout_1_run(store, monkeypatch)
    engine = store.engine
    assert "explanation" in _columns(engine, "changes")
    eng.downgrade(engine, "0002")
    assert "explanation" not in _columns(engine, "changes")
    eng.upgrade(engine)
    store._ready = False
    assert all(c["explanation"] is None for c in store.get_run(rid)["changes"])
    assert store.verify().ok
    store.close()


def test_0003_sources_round_trip_keeps_runs_verifiable(db_url, monkeypatch):
    """runs.source comes and goes with its revision; runs written without it still verify, and
    a run's recorded source is covered by its hash."""
    store = AuditStore(db_url)
    rid = _layout_1_run(store, monkeypatch)
    engine = store.engine
    assert "source" in _columns(engine, "runs")
    eng.downgrade(engine, "0003_explanations")
    assert "source" not in _columns(engine, "runs")
    eng.upgrade(engine)
    store._ready = False
    assert store.get_run(rid)["source"] is None
    assert store.verify().ok
    store.close()


def test_head_revision_without_alembic_is_alembics_answer():
    assert eng.head_revision() == _alembic_head()


def test_an_audited_run_on_an_up_to_date_database_does_not_import_alembic(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    engine = eng.make_engine(url)
    eng.upgrade(engine)
    engine.dispose()
    code = ("import sys\nfrom enginecfg.store import AuditStore\nfrom enginecfg.testing import emit_run\n"
            f"with AuditStore({url!r}).attach() as s:\n    emit_run()\n    assert s.recorded == 1\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'structlog')))")
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
