"""Signed checkpoints: a history rewritten consistently (every hash and the chain head) passes
the chain's own check but not a checkpoint kept elsewhere, which names the first run that
differs; a checkpoint with a wrong key or a forged signature is refused."""

from __future__ import annotations

import io
import json

import pytest
from sqlalchemy import select, text

from enginecfg.store import AuditStore
from enginecfg.store import checkpoint as cp
from enginecfg.store.mirror import Mirror
from enginecfg.testing import emit_run
from enginecfg.store.hashing import CHILD_ORDER, layout, run_hash
from enginecfg.store.models import Base, ChainHead, Run

from .conftest import drop_triggers

SECRET = "correct horse battery staple, 2025"


@pytest.fixture(params=["hmac", "ed25519"])
def key(request, tmp_path):
    if request.param == "hmac":
        return cp.parse_key(SECRET.encode(), "test secret")
    return cp.generate_key(tmp_path / "audit.pem")


@pytest.fixture
def chain(store):
    ids = [emit_run(checks=1) for _ in range(5)]
    return store, ids


def _save(doc, path):
    path.write_text(json.dumps(doc))
    return str(path)


def rewrite(store, from_pos: int = 1, *, drop_from: int | None = None) -> None:
    """The attacker: edit every run from ``from_pos`` on (or drop the runs from ``drop_from``
    on), then recompute each run's hash, the links after it and the chain head, so that the
    chain verifies again."""
    runs_t = Run.__table__
    with store.engine.begin() as conn:
        drop_triggers(conn)
        if drop_from is not None:
            doomed = conn.execute(select(runs_t.c.id).where(runs_t.c.chain_pos >= drop_from)
                                  ).scalars().all()
            for table in CHILD_ORDER:
                t = Base.metadata.tables[table]
                conn.execute(t.delete().where(t.c.run_id.in_(doomed)))
            conn.execute(runs_t.delete().where(runs_t.c.id.in_(doomed)))
        rows = [dict(r) for r in conn.execute(select(runs_t).order_by(runs_t.c.chain_pos))
                .mappings()]
        prev = rows[from_pos - 2]["row_hash"] if from_pos > 1 else "0" * 64
        for row in rows[from_pos - 1:]:
            kids = {}
            for table in layout(row["hash_layout"]).child_fields:
                t = Base.metadata.tables[table]
                kids[table] = conn.execute(
                    select(t.c.row_hash).where(t.c.run_id == row["id"])
                    .order_by(t.c[CHILD_ORDER[table]])).scalars().all()
            row.update(prev_hash=prev, model=row["model"] + "-rewritten")
            row["row_hash"] = run_hash(row, kids)
            conn.execute(runs_t.update().where(runs_t.c.id == row["id"]).values(
                model=row["model"], prev_hash=row["prev_hash"], row_hash=row["row_hash"]))
            prev = row["row_hash"]
        last = rows[-1]
        conn.execute(ChainHead.__table__.update().where(ChainHead.id == 1).values(
            position=last["chain_pos"], head_hash=prev))


def test_a_consistent_full_rewrite_passes_verify_but_not_the_checkpoint(chain, key, tmp_path):
    store, ids = chain
    f = _save(cp.make_checkpoint(store, key), tmp_path / "cp.json")
    assert cp.verify_with_checkpoints(store, [f], [key]).ok
    rewrite(store, 1)
    plain = store.verify()
    assert plain.ok and plain.runs_checked == 5          # the chain alone cannot tell
    res = cp.verify_with_checkpoints(store, [f], [key])
    assert not res.ok and res.checkpoints_checked == 1
    bad = res.first_bad
    assert (bad.kind, bad.run_id, bad.position) == ("checkpoint_mismatch", ids[0], 1)
    assert ids[0] in bad.message and "rewritten" in bad.message


def test_the_first_rewritten_run_is_named(chain, key, tmp_path):
    store, ids = chain
    f = _save(cp.make_checkpoint(store, key), tmp_path / "cp.json")
    rewrite(store, 3)
    assert store.verify().ok
    bad = cp.verify_with_checkpoints(store, [f], [key]).first_bad
    assert (bad.run_id, bad.position) == (ids[2], 3)


def test_a_database_that_grew_still_extends_its_checkpoints(chain, key, tmp_path):
    store, ids = chain
    first = _save(cp.make_checkpoint(store, key), tmp_path / "a.json")
    emit_run()
    second = _save(cp.make_checkpoint(store, key), tmp_path / "b.json")
    emit_run()
    res = cp.verify_with_checkpoints(store, [first, second], [key])
    assert res.ok and res.checkpoints_checked == 2 and res.runs_checked == 7


def test_several_checkpoints_the_older_one_still_holds(store, key, tmp_path):
    ids = [emit_run() for _ in range(2)]
    early = _save(cp.make_checkpoint(store, key), tmp_path / "early.json")
    ids += [emit_run() for _ in range(3)]
    late = _save(cp.make_checkpoint(store, key), tmp_path / "late.json")
    rewrite(store, 4)
    assert cp.verify_with_checkpoints(store, [early], [key]).ok
    res = cp.verify_with_checkpoints(store, [early, late], [key])
    assert not res.ok and len(res.problems) == 1
    assert (res.first_bad.run_id, res.first_bad.position) == (ids[3], 4)


def test_runs_removed_from_the_tail_with_the_head_moved_back(chain, key, tmp_path):
    store, ids = chain
    f = _save(cp.make_checkpoint(store, key), tmp_path / "cp.json")
    rewrite(store, 4, drop_from=4)          # drop runs 4, 5 and re-hash nothing before them
    assert store.verify().ok
    bad = cp.verify_with_checkpoints(store, [f], [key]).first_bad
    assert bad.kind == "checkpoint_mismatch" and bad.position == 4
    assert "ends at position 3" in bad.message


def test_a_checkpoint_of_another_database_is_named(chain, key, tmp_path):
    store, _ = chain
    other = AuditStore(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        f = _save(cp.make_checkpoint(other, key), tmp_path / "other.json")
    finally:
        other.close()
    bad = cp.verify_with_checkpoints(store, [f], [key]).first_bad
    assert bad.kind == "checkpoint_other_db"


def test_a_wrong_key_is_refused(chain, key, tmp_path):
    store, _ = chain
    f = _save(cp.make_checkpoint(store, key), tmp_path / "cp.json")
    wrong = cp.parse_key(b"another shared secret, 32 bytes!!", "wrong")
    with pytest.raises(cp.CheckpointError, match="not the key given") as exc:
        cp.verify_with_checkpoints(store, [f], [wrong])
    assert exc.value.exit_code == 2 and key.key_id in str(exc.value)


@pytest.mark.parametrize("forgery", ["field", "signature", "resigned"])
def test_a_forged_checkpoint_is_refused(chain, key, tmp_path, forgery):
    store, ids = chain
    doc = cp.make_checkpoint(store, key)
    if forgery == "field":             # moved back to an earlier head, signature kept
        doc["position"] = 3
    elif forgery == "signature":       # bytes of a signature, not this one's
        doc["signature"] = doc["signature"][::-1]
    else:                              # signed by the attacker's key, claiming ours
        attacker = cp.parse_key(b"the attacker's own secret......", "attacker")
        doc = {**cp.sign(doc, attacker), "alg": key.alg, "key_id": key.key_id}
    f = _save(doc, tmp_path / "forged.json")
    with pytest.raises(cp.CheckpointError, match="altered or forged"):
        cp.verify_with_checkpoints(store, [f], [key])


def test_the_public_key_verifies_and_cannot_sign(chain, tmp_path):
    store, _ = chain
    private = cp.generate_key(tmp_path / "k.pem", tmp_path / "k.pub.pem")
    public = cp.load_key(tmp_path / "k.pub.pem")
    assert public.key_id == private.key_id and not public.can_sign
    f = _save(cp.make_checkpoint(store, private), tmp_path / "cp.json")
    assert cp.verify_with_checkpoints(store, [f], [public]).ok
    with pytest.raises(cp.CheckpointError, match="cannot sign"):
        cp.make_checkpoint(store, public)


def test_after_rotation_each_checkpoint_verifies_with_its_own_key(store, tmp_path):
    old = cp.parse_key(SECRET.encode(), "old")
    new = cp.generate_key(tmp_path / "new.pem")
    emit_run()
    a = _save(cp.make_checkpoint(store, old), tmp_path / "a.json")
    emit_run()
    b = _save(cp.make_checkpoint(store, new), tmp_path / "b.json")
    assert cp.verify_with_checkpoints(store, [a, b], [old, new]).ok
    with pytest.raises(cp.CheckpointError, match="not the key given"):
        cp.verify_with_checkpoints(store, [a, b], [new])


def test_no_checkpoint_of_a_history_that_does_not_verify(chain, key):
    store, ids = chain
    with store.engine.begin() as conn:
        drop_triggers(conn)
        conn.execute(text("UPDATE runs SET status = 'rejected' WHERE id = :r"), {"r": ids[1]})
    with pytest.raises(cp.NotIntactError, match="NOT intact"):
        cp.make_checkpoint(store, key)


@pytest.mark.parametrize("content, why", [
    (b"short", "too short"),
    (b"-----BEGIN PRIVATE KEY-----\nnonsense\n-----END PRIVATE KEY-----\n", "PEM"),
])
def test_unusable_keys_are_refused(tmp_path, content, why):
    (tmp_path / "k").write_bytes(content)
    with pytest.raises(cp.CheckpointError, match=why):
        cp.load_key(tmp_path / "k")


def test_key_from_the_environment_and_none_at_all():
    key = cp.load_key(env={cp.KEY_ENV: SECRET})
    assert key.alg == "hmac-sha256" and key.source == f"${cp.KEY_ENV}"
    with pytest.raises(cp.CheckpointError, match="--key-file"):
        cp.load_key(env={})


def test_malformed_checkpoint_files_are_refused(chain, key, tmp_path):
    store, _ = chain
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(cp.CheckpointError, match="not JSON"):
        cp.verify_with_checkpoints(store, [str(tmp_path / "x.json")], [key])
    (tmp_path / "y.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(cp.CheckpointError, match="not an enginecfg checkpoint"):
        cp.verify_with_checkpoints(store, [str(tmp_path / "y.json")], [key])
    with pytest.raises(cp.CheckpointError, match="cannot read"):
        cp.verify_with_checkpoints(store, [str(tmp_path / "absent.json")], [key])


def test_mirror_to_a_file_every_n_runs(db_url, key, tmp_path):
    target = tmp_path / "mirror.jsonl"
    store = AuditStore(db_url, mirror=Mirror(str(target), key, every=2)).attach()
    try:
        ids = [emit_run() for _ in range(5)]
        docs = [json.loads(line) for line in target.read_text().splitlines()]
        assert [d["position"] for d in docs] == [2, 4]
        assert [d["run_id"] for d in docs] == [ids[1], ids[3]]
        assert cp.verify_with_checkpoints(store, [str(target)], [key]).checkpoints_checked == 2
        rewrite(store, 2)
        bad = cp.verify_with_checkpoints(store, [str(target)], [key]).first_bad
        assert (bad.run_id, bad.position) == (ids[1], 2)
    finally:
        store.close()


def test_mirror_to_a_database_from_the_environment(db_url, tmp_path, monkeypatch):
    mirror_url = f"sqlite:///{tmp_path / 'mirror.db'}"
    monkeypatch.setenv(cp.MIRROR_ENV, mirror_url)
    monkeypatch.setenv(cp.MIRROR_EVERY_ENV, "3")
    monkeypatch.setenv(cp.KEY_ENV, SECRET)
    store = AuditStore(db_url).attach()
    try:
        for _ in range(7):
            emit_run()
        assert store.mirror_failed == 0
        found = cp.read_checkpoints(mirror_url)
        assert [d["position"] for _, d in found] == [3, 6]
        assert cp.verify_with_checkpoints(store, [mirror_url], [cp.load_key()]).ok
    finally:
        store.close()


def test_a_broken_mirror_never_breaks_recording(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv(cp.MIRROR_ENV, str(tmp_path / "no-such-dir" / "m.jsonl"))
    monkeypatch.setenv(cp.MIRROR_EVERY_ENV, "1")
    monkeypatch.setenv(cp.KEY_ENV, SECRET)
    store = AuditStore(db_url).attach()
    try:
        emit_run()
        emit_run()
        assert store.recorded == 2 and store.mirror_failed == 2
        assert store.verify().ok
    finally:
        store.close()


def test_audit_checkpoint_writes_stdout_or_a_new_file(chain, tmp_path, monkeypatch):
    from support import run_cli

    store, ids = chain
    monkeypatch.setenv(cp.KEY_ENV, SECRET)
    proc = run_cli("audit", "checkpoint", "--db", store.url)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["position"] == 5 and doc["run_id"] == ids[4]
    cp.check_signature(doc, [cp.load_key()], "stdout")
    path = tmp_path / "cp.json"
    assert run_cli("audit", "checkpoint", "--db", store.url, "-o", str(path)).returncode == 0
    before = path.read_text()
    again = run_cli("audit", "checkpoint", "--db", store.url, "-o", str(path))
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert path.read_text() == before


def test_the_command_line(chain, tmp_path, monkeypatch):
    import subprocess
    import sys

    store, ids = chain
    monkeypatch.delenv(cp.KEY_ENV, raising=False)

    def cli(*argv):
        proc = subprocess.run([sys.executable, "-P", "-m", "enginecfg", *argv],
                              capture_output=True, text=True, timeout=120)
        return proc.returncode, proc.stdout, proc.stderr

    pem, pub, saved = tmp_path / "k.pem", tmp_path / "k.pub", tmp_path / "cp.json"
    code, out, _ = cli("audit", "keygen", "--out", str(pem), "--public", str(pub))
    assert code == 0 and pem.exists() and pub.exists()
    code, _, err = cli("audit", "checkpoint", "--key-file", str(pem), "-o", str(saved),
                       "--db", store.url)
    assert code == 0 and "position 5" in err
    code, out, _ = cli("audit", "verify", "--checkpoint", str(saved), "--key-file", str(pub),
                       "--db", store.url)
    assert code == 0 and "extends 1 signed checkpoint" in out
    rewrite(store, 2)
    assert cli("audit", "verify", "--db", store.url)[0] == 0
    code, out, _ = cli("audit", "verify", "--checkpoint", str(saved), "--key-file", str(pub),
                       "--db", store.url)
    assert code == 1 and "NOT intact" in out and ids[1] in out
    code, out, err = cli("audit", "verify", "--checkpoint", str(saved), "--db", store.url)
    assert code == 2 and out == "" and err.count("\n") == 1 and cp.KEY_ENV in err
    (tmp_path / "wrong").write_text(SECRET)
    code, out, err = cli("audit", "verify", "--checkpoint", str(saved), "--key-file",
                         str(tmp_path / "wrong"), "--db", store.url)
    assert code == 2 and err.count("\n") == 1 and "not the key given" in err
