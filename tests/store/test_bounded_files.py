"""The files a user names to the audit commands are read within a bound: ``/dev/zero`` (a line
without end) or a file far larger than any key, checkpoint or export row is refused at once,
with the limit named, instead of being read until memory runs out."""

from __future__ import annotations

import os

import pytest

from support import run_cli
from enginecfg.store import AuditStore
from enginecfg.store import checkpoint as cp
from enginecfg.store.files import (CHECKPOINT_FILE_LIMIT, KEY_FILE_LIMIT, TooLarge, bounded_lines,
                                   read_bounded)
from enginecfg.testing import emit_run

SECRET = "a shared secret of enough bytes"


@pytest.fixture
def recorded(db_url, tmp_path):
    with AuditStore(db_url).attach():
        emit_run()
    saved = tmp_path / "cp.json"
    made = run_cli("audit", "checkpoint", "-o", str(saved), "--db", db_url,
                   env={cp.KEY_ENV: SECRET})
    assert made.returncode == 0, made.stderr
    return db_url, saved


def _bounded_cli(*args: str, env: dict | None = None):
    """``enginecfg ARGS`` as a process whose memory is capped (3 GiB of address space): were a
    file read without bound again, it would fail there, not take the machine's memory."""
    import resource
    import subprocess
    import sys

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True,
                          text=True, timeout=60, preexec_fn=cap, env={**os.environ, **(env or {})})


def _refused_fast(proc, *words: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_dev_zero_is_refused_as_a_key_a_checkpoint_and_an_export(recorded, tmp_path):
    db_url, saved = recorded
    key = tmp_path / "key"
    key.write_text(SECRET)
    # each of these read /dev/zero until the process was killed for its memory
    _refused_fast(_bounded_cli("audit", "verify", "--checkpoint", str(saved), "--key-file",
                               "/dev/zero", "--db", db_url), "--key-file", "64 KiB")
    _refused_fast(_bounded_cli("audit", "checkpoint", "--key-file", "/dev/zero", "--db", db_url),
                  "--key-file", "64 KiB")
    _refused_fast(_bounded_cli("audit", "verify", "--checkpoint", "/dev/zero", "--key-file",
                               str(key), "--db", db_url), "--checkpoint", "64 MiB")
    _refused_fast(_bounded_cli("db", "downgrade", "base", "--i-have-exported", "/dev/zero",
                               "--db", db_url), "--i-have-exported", "256 MiB")
    verdict = run_cli("audit", "verify", "--checkpoint", str(saved), "--key-file", str(key),
                      "--db", db_url)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr  # the genuine ones still do


def test_a_file_larger_than_its_limit_is_refused_from_its_size(tmp_path):
    big = tmp_path / "big"
    with open(big, "wb") as fh:  # sparse: no byte of it is written or read
        fh.truncate(CHECKPOINT_FILE_LIMIT + 1)
    with pytest.raises(TooLarge, match="1,073,741,825 bytes, more than the 1 GiB"):
        read_bounded(big, CHECKPOINT_FILE_LIMIT)
    with pytest.raises(cp.CheckpointError, match="more than the 1 GiB"):
        cp.read_checkpoints(str(big))
    key = tmp_path / "key"
    key.write_bytes(b"k" * (KEY_FILE_LIMIT + 1))
    with pytest.raises(cp.CheckpointError, match="64 KiB"):
        cp.load_key(key)
    key.write_bytes(b"k" * KEY_FILE_LIMIT)
    assert cp.load_key(key).alg == "hmac-sha256"  # at the limit: read


def test_a_pipe_is_read_within_the_limit(tmp_path):
    r, w = os.pipe()
    os.write(w, b"line one\nline two\n")
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        assert list(bounded_lines(fh, 16)) == [b"line one\n", b"line two\n"]
    r, w = os.pipe()
    os.write(w, b"x" * 40)
    os.close(w)
    with os.fdopen(r, "rb") as fh, pytest.raises(TooLarge, match="a line of it is longer"):
        list(bounded_lines(fh, 16))
