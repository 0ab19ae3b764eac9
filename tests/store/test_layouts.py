"""Hash layouts: each run is verified by the field list it was hashed with, so adding a hashed
column (one migration plus one entry in ``hashing.LAYOUT_STEPS``) leaves older runs
verifiable, and a run that claims another layout than its own no longer matches."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from sqlalchemy import text

from enginecfg.store import engine as eng
from enginecfg.testing import emit_run
from enginecfg.store.hashing import LAYOUT_STEPS, UnknownLayoutError, current_layout, layout

from .conftest import drop_triggers


def test_runs_record_the_layout_they_were_hashed_with(store):
    rid = emit_run()
    with store.engine.connect() as conn:
        got = conn.execute(text("SELECT hash_layout FROM runs WHERE id = :r"), {"r": rid}).scalar()
    assert got == current_layout() == len(LAYOUT_STEPS)


def test_layouts_accumulate_and_unknown_ones_are_refused():
    one = layout(1)
    assert "model" in one.run_fields and set(one.child_fields) == {
        "stage_executions", "changes", "messages", "validation_checks"}
    assert layout(None) == one
    for bad in (0, current_layout() + 1, "1", True):
        with pytest.raises(UnknownLayoutError):
            layout(bad)


def test_a_run_claiming_an_unknown_layout_is_named(store):
    ids = [emit_run() for _ in range(3)]
    with store.engine.begin() as conn:
        drop_triggers(conn)
        conn.execute(text("UPDATE runs SET hash_layout = 99 WHERE id = :r"), {"r": ids[1]})
    res = store.verify()
    assert (res.first_bad.kind, res.first_bad.run_id) == ("unknown_layout", ids[1])


def test_the_database_identity_survives_reupgrades_of_later_revisions(db_url):
    engine = eng.make_engine(db_url)
    try:
        eng.upgrade(engine)
        with engine.connect() as conn:
            sid = conn.execute(text("SELECT store_id FROM chain_head")).scalar()
        assert isinstance(sid, str) and len(sid) == 32
        eng.upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT store_id FROM chain_head")).scalar() == sid
    finally:
        engine.dispose()


# A later enginecfg that hashes one more run column, as its author would write it: the
# migration (an Alembic operation), the model's column, the value the recorder fills in, and
# ONE new entry in the hashed-field list.  Run in a child process: it changes the models.
_FUTURE = textwrap.dedent("""
    import json, sys
    import sqlalchemy as sa
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import text
    from enginecfg.store import AuditStore, hashing
    from enginecfg.store.models import Run
    from enginecfg.store.recorder import AuditStore as Recorder
    from enginecfg.testing import emit_run

    url = sys.argv[1]
    store = AuditStore(url).attach()
    old = [emit_run() for _ in range(3)]
    with store.engine.begin() as conn:                                   # the migration
        Operations(MigrationContext.configure(conn)).add_column("runs", sa.Column("site", sa.Text))
    store.close()

    Run.__table__.append_column(sa.Column("site", sa.Text))              # the model
    rows = Recorder._rows
    Recorder._rows = lambda self, buf, **kw: (                           # the recorder
        lambda run, kids: ({**run, "site": "rack-7"}, kids))(*rows(self, buf, **kw))
    hashing.LAYOUT_STEPS.append({"runs": ("site",)})                     # the one line

    store = AuditStore(url).attach()                                     # the new version
    new = [emit_run() for _ in range(2)]
    intact = store.verify()
    with store.engine.connect() as conn:
        layouts = dict(conn.execute(text("SELECT id, hash_layout FROM runs")).all())
        sites = dict(conn.execute(text("SELECT id, site FROM runs")).all())
    with store.engine.begin() as conn:                                   # tamper the new field
        for trig in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'")).scalars().all():
            conn.execute(text(f'DROP TRIGGER "{trig}"'))
        conn.execute(text("UPDATE runs SET site = 'rack-9' WHERE id = :r"), {"r": new[0]})
    tampered = store.verify()
    print(json.dumps({"old": old, "new": new, "intact": intact.ok, "checked": intact.runs_checked,
                      "layouts": layouts, "sites": sites,
                      "tampered": tampered.first_bad.to_dict() if tampered.first_bad else None}))
    store.close()
""")


def test_adding_a_hashed_column_keeps_old_runs_verifiable(tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    proc = subprocess.run([sys.executable, "-P", "-c", _FUTURE, url], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    base = current_layout()
    assert out["intact"] and out["checked"] == 5
    assert [out["layouts"][r] for r in out["old"]] == [base] * 3
    assert [out["layouts"][r] for r in out["new"]] == [base + 1] * 2
    assert [out["sites"][r] for r in out["new"]] == ["rack-7"] * 2
    # the new column is covered by the hash of the runs written with it
    assert out["tampered"]["kind"] == "edited_run"
    assert out["tampered"]["run_id"] == out["new"][0]
