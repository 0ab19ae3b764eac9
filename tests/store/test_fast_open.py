"""Opening a store at the head revision asks one query and never imports Alembic."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from enginecfg.store import AuditStore
from enginecfg.store import engine as eng
from support import REPO


def test_the_head_read_from_the_scripts_is_alembics_head():
    assert eng._head_from_files() == eng.head_revision()


def test_schema_is_current_only_at_the_head(db_url):
    engine = eng.make_engine(db_url)
    try:
        assert not eng.schema_is_current(engine)  # no schema at all
        eng.upgrade(engine, "0001")
        assert not eng.schema_is_current(engine)  # behind
        eng.upgrade(engine)
        assert eng.schema_is_current(engine)
    finally:
        engine.dispose()


def test_recording_into_a_current_store_does_not_import_alembic(tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    AuditStore(url).verify()  # created and migrated here
    code = (f"import sys, json; sys.path.insert(0, {str(REPO)!r})\n"
            "from enginecfg.store import AuditStore\n"
            "from enginecfg.testing import emit_run\n"
            f"s = AuditStore({url!r}).attach(); emit_run()\n"
            "print(json.dumps([s.recorded, 'alembic' in sys.modules]))\n")
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.environ["ENGINECFG_TEST_TMP"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [1, False]
