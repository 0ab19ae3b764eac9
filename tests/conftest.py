"""Shared test set-up: a fresh snapshot cache and audit DB per session."""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from support import CONFIGS, PG_URL, REPO

#: every audit-store test runs on SQLite and on PostgreSQL (skipped only without a server)
BACKENDS = [
    "sqlite",
    pytest.param("postgresql", marks=[
        pytest.mark.postgres,
        pytest.mark.skipif(not PG_URL, reason="ENGINECFG_TEST_PG_URL is not set"),
    ]),
]


@contextlib.contextmanager
def fresh_database(backend: str, folder: Path):
    """A fresh, empty audit database URL (PostgreSQL: a schema of its own, dropped afterwards)."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'audit.db'}"
        return
    from sqlalchemy import text

    from enginecfg.store.engine import make_engine, normalise_url

    schema = "t_" + uuid.uuid4().hex[:16]
    admin = make_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = normalise_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path):
    """A fresh, empty audit database URL, on SQLite and on PostgreSQL."""
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture(scope="module", params=BACKENDS)
def module_db_url(request, tmp_path_factory):
    """:func:`db_url` shared by the tests of one module."""
    with fresh_database(request.param, tmp_path_factory.mktemp("db")) as url:
        yield url


def pytest_configure(config):
    # processes the tests start import this checkout too, as the tests themselves do (never a
    # stale install); tests of the install itself (test_imports.py) take PYTHONPATH away again
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO)])
    # a cache of this session only: every snapshot is built by transformers for real
    tmp = Path(tempfile.mkdtemp(prefix="enginecfg-tests-"))
    os.environ["ENGINECFG_CACHE_DIR"] = str(tmp / "hf-cache")
    # the journals of PostgreSQL stores (store/journal.py) are the session's too
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")
    os.environ.setdefault("ENGINECFG_DB", f"sqlite:///{tmp / 'audit.db'}")
    os.environ["ENGINECFG_TEST_TMP"] = str(tmp)


@pytest.fixture(scope="session")
def warm_snapshots():
    """Build the snapshots of every fixture config in one transformers worker."""
    from enginecfg.pipeline.hf.cache import snapshots_for

    dicts = [json.loads((d / "config.json").read_text()) for d in sorted(CONFIGS.iterdir())]
    snapshots_for(dicts)
    return True


@pytest.fixture
def qwen_folder(tmp_path):
    """A model folder holding a copy of Qwen3.5-27B's config.json, the caches of loaded
    configs (snapshots, load memo, files read) empty before and after."""
    from enginecfg.pipeline.hf import cache as hfcache

    d = tmp_path / "model"
    d.mkdir()
    shutil.copyfile(CONFIGS / "qwen3.5-27b" / "config.json", d / "config.json")
    hfcache.clear()
    yield d
    hfcache.clear()


def pytest_sessionfinish(session):
    # The end of a session walks the whole heap again and again (pytest's last check for
    # finalizers that fail collects five times), and with torch and transformers imported
    # that heap is hundreds of thousands of long-lived objects: seconds.  One full collection
    # here still finds every cycle left behind (reported as before); what survives it is
    # frozen until the interpreter exits, so the walks in between skip it.  (Unfrozen at
    # exit: extension modules check at their teardown that their objects were freed.)
    gc.collect()
    gc.freeze()
    atexit.register(gc.unfreeze)


def pytest_unconfigure(config):
    # the session's folder (its snapshot cache and default audit database) goes with it;
    # a store still open at exit has its files open already, and its checkpointer never
    # creates a file that is gone
    tmp = os.environ.get("ENGINECFG_TEST_TMP")
    if tmp and os.path.basename(tmp).startswith("enginecfg-tests-"):
        shutil.rmtree(tmp, ignore_errors=True)
