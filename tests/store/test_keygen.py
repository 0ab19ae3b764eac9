"""``audit keygen`` never loses a key: it overwrites no file, private or public, refuses one
path for both keys, and makes both files or neither; a path it cannot use is one line on
stderr, exit 2."""

from __future__ import annotations

import pytest

from support import run_cli
from enginecfg.store import checkpoint as cp


def _one_line_refusal(proc, *words: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr


def test_an_existing_public_key_is_never_overwritten(tmp_path):
    public = tmp_path / "team.pub.pem"
    public.write_bytes(b"the team's published key\n")
    proc = run_cli("audit", "keygen", "--out", str(tmp_path / "new.pem"), "--public", str(public))
    _one_line_refusal(proc, "--public", "exists", "never overwritten")
    assert public.read_bytes() == b"the team's published key\n"
    assert not (tmp_path / "new.pem").exists()  # both files or neither


def test_an_existing_private_key_is_never_overwritten(tmp_path):
    private = tmp_path / "k.pem"
    assert run_cli("audit", "keygen", "--out", str(private)).returncode == 0
    before = private.read_bytes(), (tmp_path / "k.pub.pem").read_bytes()
    proc = run_cli("audit", "keygen", "--out", str(private), "--public", str(tmp_path / "other.pem"))
    _one_line_refusal(proc, "--out", "exists")
    assert (private.read_bytes(), (tmp_path / "k.pub.pem").read_bytes()) == before
    assert not (tmp_path / "other.pem").exists()


@pytest.mark.parametrize("public", ["c.pem", "./c.pem", "{tmp}/c.pem"])
def test_one_path_for_both_keys_is_refused(tmp_path, monkeypatch, public):
    monkeypatch.chdir(tmp_path)
    proc = run_cli("audit", "keygen", "--out", "c.pem", "--public", public.format(tmp=tmp_path))
    _one_line_refusal(proc, "--public", "private key")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, flag", [
    (["--out", ""], "--out"),
    (["--out", "{tmp}/"], "--out"),
    (["--out", "{tmp}"], "--out"),
    (["--out", "{tmp}/k.pem", "--public", ""], "--public"),
    (["--out", "{tmp}/no/such/folder/k.pem"], "--out"),
])
def test_a_path_that_cannot_be_a_new_key_file_is_one_line(tmp_path, argv, flag):
    proc = run_cli("audit", "keygen", *[a.format(tmp=tmp_path) for a in argv])
    _one_line_refusal(proc, flag)
    assert list(tmp_path.iterdir()) == []


def test_the_library_function_refuses_alike(tmp_path):
    with pytest.raises(cp.CheckpointError, match="private key"):
        cp.generate_key(tmp_path / "a.pem", tmp_path / "a.pem")
    key = cp.generate_key(tmp_path / "a.pem")
    assert cp.public_key_path(tmp_path / "a.pem") == tmp_path / "a.pub.pem"
    assert cp.load_key(tmp_path / "a.pub.pem").key_id == key.key_id
    assert oct((tmp_path / "a.pem").stat().st_mode & 0o777) == "0o600"
