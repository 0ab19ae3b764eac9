"""One model, one key; one run, one unambiguous name.

A model folder given relative to where the command ran, absolute, with ``..``, a trailing ``/``
or as its ``config.json`` is one model to ``runs --model``, ``history --model`` and the page's
filter.  A run id prefix names a run only when it has at least four characters (as git
abbreviates commits) and no other stored run shares it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from support import EXAMPLES

from enginecfg.store import AmbiguousRunError, AuditStore, UnknownRunError
from enginecfg.store import queries
from enginecfg.testing import emit_run


def cli(*args, db, cwd):
    env = dict(os.environ, ENGINECFG_PLUGINS="none", COLUMNS="200", ENGINECFG_DB=db)
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def spelled(tmp_path_factory, warm_snapshots):
    """Four runs of one model folder, each spelling it another way, and one of another model."""
    root = tmp_path_factory.mktemp("key")
    folder = root / "models" / "qwen"
    folder.mkdir(parents=True)
    shutil.copy(EXAMPLES / "qwen3.5-27b" / "config.json", folder / "config.json")
    db = f"sqlite:///{root / 'audit.db'}"
    for spelling in ("models/qwen", str(folder), "./models/../models/qwen/", "models/qwen/config.json"):
        proc = cli("run", spelling, "--gpu-validation", "off", db=db, cwd=root)
        assert proc.returncode == 0, proc.stderr
    assert cli("run", str(EXAMPLES / "gemma-4-26b-a4b"), "--gpu-validation", "off", db=db, cwd=root).returncode == 0
    return root, folder, db


@pytest.mark.parametrize("spelling", ["models/qwen", "{folder}", "models/qwen/", "./models/../models/qwen",
                                      "models/qwen/config.json", "qwen"])
def test_every_spelling_of_a_folder_is_one_model_to_runs(spelled, spelling):
    root, folder, db = spelled
    proc = cli("runs", "--model", spelling.format(folder=folder), "--json", db=db, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 4


def test_an_absolute_path_from_anywhere_is_the_same_model(spelled, tmp_path):
    root, folder, db = spelled
    assert len(json.loads(cli("runs", "--model", str(folder), "--json", db=db, cwd=tmp_path).stdout)) == 4
    history = json.loads(cli("history", "cache_config.block_size", "--model", str(folder), "--json",
                             db=db, cwd=tmp_path).stdout)
    assert len(history) == 4
    # another folder that only shares the name is another model
    other = tmp_path / "elsewhere" / "qwen"
    other.mkdir(parents=True)
    shutil.copy(folder / "config.json", other / "config.json")
    assert json.loads(cli("runs", "--model", str(other), "--json", db=db, cwd=tmp_path).stdout) == []


def test_the_pages_filter_takes_the_same_key(spelled):
    import io

    from enginecfg.ui.pages import open_pages

    root, folder, db = spelled
    app = open_pages(db, bound_to="127.0.0.1")
    try:
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "QUERY_STRING": f"model={folder}",
                   "HTTP_HOST": "127.0.0.1:8100", "wsgi.input": io.BytesIO()}
        body = b"".join(app(environ, lambda status, headers: None)).decode()
        assert "4 run(s), newest first" in body
    finally:
        app.store.close()


# -- run id prefixes ------------------------------------------------------------------------------

def test_a_prefix_shorter_than_four_characters_names_no_run(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with AuditStore(url).attach() as store:
        rid = emit_run(run_id="5" + "0" * 31)
    for n in range(1, 4):
        with pytest.raises(UnknownRunError, match="a prefix of at least 4 of its characters"):
            store.get_run(rid[:n])
    assert getattr(queries, "MIN_RUN_ID_PREFIX", None) == 4 and store.get_run(rid[:4])["run_id"] == rid
    emit_store = AuditStore(url)
    with emit_store.attach():
        emit_run(run_id="5000" + "1" * 28)
    with pytest.raises(AmbiguousRunError, match="several runs"):
        store.get_run(rid[:4])
    assert store.get_run(rid[:5])["run_id"] == rid
    emit_store.close()
    store.close()


def test_show_refuses_a_one_character_prefix(spelled):
    root, folder, db = spelled
    rid = json.loads(cli("runs", "--json", db=db, cwd=root).stdout)[0]["run_id"]
    proc = cli("show", rid[0], db=db, cwd=root)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "invalid run id: got" in proc.stderr and "at least 4" in proc.stderr
    assert cli("show", rid[:12], db=db, cwd=root).returncode == 0
    assert cli("why", rid[:2], "cache_config.block_size", db=db, cwd=root).returncode == 2
