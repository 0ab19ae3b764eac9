"""The audit page's WSGI application, called directly (the browser test drives it through
Chromium): read-only at every level, hostile stored text escaped, bad input a clear page."""

from __future__ import annotations

import io

import pytest
from sqlalchemy import text

from enginecfg.store import AuditStore
from enginecfg.store import engine as eng
from enginecfg.testing import emit_run
from enginecfg.ui.pages import UiUnavailableError, open_pages

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def pages(db_url):
    with AuditStore(db_url, actor="ci <b>bold</b>").attach() as store:
        ids = [emit_run(model=f"/models/{HOSTILE}"), emit_run(model="/models/beta", fail="rejected")]
    store.close()
    app = open_pages(db_url, bound_to="127.0.0.1")
    yield app, ids
    app.store.close()


def _get(app, path: str, *, method: str = "GET", host: str = "127.0.0.1:8100"):
    path, _, query = path.partition("?")
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
               "HTTP_HOST": host, "wsgi.input": io.BytesIO()}
    seen = {}

    def start_response(status, headers):
        seen["status"], seen["headers"] = status, dict(headers)

    body = b"".join(app(environ, start_response)).decode("utf-8")
    return int(seen["status"].split()[0]), seen["headers"], body


def test_hostile_text_is_escaped_and_scripts_are_forbidden(pages):
    app, ids = pages
    code, headers, body = _get(app, "/")
    assert code == 200 and ids[0][:12] in body and ids[1][:12] in body
    assert HOSTILE not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<b>bold</b>" not in body
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    code, _, body = _get(app, f"/run/{ids[0]}")
    assert code == 200 and HOSTILE not in body and "hybrid-alignment" in body


def test_only_get_and_head_and_only_the_loopback_name(pages):
    app, _ = pages
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        code, headers, _ = _get(app, "/", method=method)
        assert code == 405 and headers["Allow"] == "GET, HEAD"
    code, _, body = _get(app, "/", method="HEAD")
    assert code == 200 and body == ""
    assert _get(app, "/", host="attacker.example:8100")[0] == 403
    assert _get(app, "/", host="localhost:8100")[0] == 200


def test_the_database_is_opened_read_only(pages):
    app, _ = pages
    with pytest.raises(Exception, match="(?i)read.only|readonly|attempt to write"):
        with app.store.engine.begin() as conn:
            conn.execute(text("CREATE TABLE sneaky (x INTEGER)"))
    with pytest.raises(Exception):
        app.store.attach()


def test_bad_input_is_a_clear_page(pages):
    app, _ = pages
    code, _, body = _get(app, "/run/ffffffffffff")
    assert code == 404 and "no stored run" in body
    for path in ("/?status=deleted", "/?since=yesterday", "/?limit=0", "/history?field=no_such_field"):
        code, _, body = _get(app, path)
        assert code == 400 and 'id="error"' in body, path
    assert _get(app, "/nowhere")[0] == 404


def test_every_page_renders(pages):
    app, ids = pages
    for path in ("/", "/?actor=ci", "/?model=beta&status=rejected", "/history",
                 "/history?field=cache_config.block_size", f"/diff?a={ids[0]}&b={ids[1]}",
                 "/diff", "/verify"):
        code, _, body = _get(app, path)
        assert code == 200, (path, body[-500:])
    _, _, body = _get(app, "/history?field=cache_config.block_size")
    assert body.count("<circle") == 2
    _, _, body = _get(app, "/?actor=nobody")
    assert "0 run(s)" in body


def test_a_database_below_the_newest_revision_is_refused_not_upgraded(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = eng.make_engine(url)
    eng.upgrade(engine, "0006_hash_layout")
    engine.dispose()
    with pytest.raises(UiUnavailableError, match="db upgrade"):
        open_pages(url)
    engine = eng.make_engine(url)
    assert eng.current_revision(engine) == "0006_hash_layout"
    engine.dispose()
    with pytest.raises(Exception, match="does not exist"):
        open_pages(f"sqlite:///{tmp_path / 'absent.db'}")
    assert not (tmp_path / "absent.db").exists()
