"""The audit page: a read-only WSGI application over the store's query functions.

Pages (all GET; any other method is answered 405):

``/``                 the runs, newest first, filtered by model, status, vLLM release, actor
                      and time
``/run/<id>``         one run: who, its vLLM release and GPU, source, GPU validation, capacity, stages and their
                      origin, every change with its reason and explanation, the messages
``/history?field=F``  one field's value across runs, as a chart and a table
``/diff?a=A&b=B``     the fields whose final values differ between two runs
``/verify``           the hash chain's verification, with the checkpoints and the mirror

HTML comes from Jinja2 templates with autoescaping on, so stored text (a model name, a
message) is shown as text, never as markup; the responses also forbid scripts outright
(``Content-Security-Policy``).  The database is opened read-only.  Bound to a loopback
address, requests naming another host are refused (a page of another site cannot reach it
through a name that resolves here).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, quote

from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError

__all__ = ["AuditPages", "open_pages", "serve", "UiUnavailableError"]

_STATUSES = ("resolved", "rejected", "invalid", "interrupted")
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
_HEADERS = [
    ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "
                                "img-src 'self'; form-action 'self'; base-uri 'none'; "
                                "frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]


class UiUnavailableError(EngineCfgError):
    """The page cannot be served: a library is missing, or the database is not at the
    schema this version reads.  Exit code 2."""

    exit_code = 2
    status = "invalid"


def _environment():
    try:
        import jinja2
    except ImportError:
        raise UiUnavailableError("the audit page needs Jinja2: pip install 'enginecfg[ui]'") from None
    env = jinja2.Environment(loader=jinja2.PackageLoader("enginecfg.ui", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["json"] = _json_text
    env.filters["t"] = _short_time
    env.filters["q"] = lambda v: quote(str(v), safe="")
    return env


def _json_text(value: Any) -> str:
    import json

    return json.dumps(value, default=str)


def _short_time(iso: str | None) -> str:
    return "" if not iso else iso[:19].replace("T", " ") + " UTC"


class AuditPages:
    """The WSGI application.  ``store``: an :class:`~enginecfg.store.AuditStore` (opened
    read-only by :func:`open_pages`); ``checkpoints`` / ``keys``: what ``/verify`` checks
    the chain against besides the mirror (``ENGINECFG_AUDIT_MIRROR``, when set)."""

    def __init__(self, store, *, checkpoints: Iterable[str] = (), keys: Iterable[Any] = (),
                 mirror: str | None = None, bound_to: str | None = None):
        self.store = store
        self.checkpoints = list(checkpoints)
        self.keys = list(keys)
        self.mirror = mirror
        self.bound_to = bound_to
        self.env = _environment()
        self.routes: dict[str, Callable[[dict[str, str]], tuple[str, dict[str, Any]]]] = {
            "/": self.runs, "/history": self.history, "/diff": self.diff, "/verify": self.verify}

    # -- WSGI --------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response) -> list[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            return self._send(start_response, "405 Method Not Allowed",
                              self._page("error.html", title="read-only",
                                         message=f"this page is read-only: {method} is refused"),
                              [("Allow", "GET, HEAD")], head=False)
        if not self._host_allowed(environ.get("HTTP_HOST", "")):
            return self._send(start_response, "403 Forbidden",
                              self._page("error.html", title="forbidden",
                                         message="this page answers requests for the loopback "
                                                 "address it is bound to only"), head=False)
        path = environ.get("PATH_INFO", "/") or "/"
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        try:
            if path.startswith("/run/"):
                template, ctx = self.run(path[len("/run/"):], query)
            elif path in self.routes:
                template, ctx = self.routes[path](query)
            else:
                return self._send(start_response, "404 Not Found",
                                  self._page("error.html", title="not found",
                                             message=f"no page {path}"), head=method == "HEAD")
            return self._send(start_response, "200 OK", self._page(template, **ctx),
                              head=method == "HEAD")
        except InvalidInputError as exc:
            from enginecfg.store.queries import UnknownRunError

            status, title = (("404 Not Found", "not found") if isinstance(exc, UnknownRunError)
                             else ("400 Bad Request", "bad request"))
            return self._send(start_response, status,
                              self._page("error.html", title=title,
                                         message=" ".join(str(exc).split())),
                              head=method == "HEAD")

    def _host_allowed(self, host: str) -> bool:
        if self.bound_to is None or self.bound_to not in _LOOPBACK:
            return True
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in _LOOPBACK

    def _page(self, template: str, **ctx: Any) -> bytes:
        return self.env.get_template(template).render(db=self.store.display_url, **ctx).encode("utf-8")

    @staticmethod
    def _send(start_response, status: str, body: bytes, extra: list | None = None, *,
              head: bool) -> list[bytes]:
        start_response(status, [("Content-Type", "text/html; charset=utf-8"),
                                ("Content-Length", str(len(body)))] + _HEADERS + (extra or []))
        return [] if head else [body]

    # -- pages -------------------------------------------------------------------------------

    def runs(self, q: dict[str, str]) -> tuple[str, dict[str, Any]]:
        from enginecfg.ui.facts import who_ran

        status = q.get("status") or None
        if status is not None and status not in _STATUSES:
            raise InvalidInputError.for_value("status", status, ", ".join(_STATUSES))
        since = _when(q.get("since"), "since")
        until = _when(q.get("until"), "until")
        try:
            limit = int(q.get("limit") or 100)
        except ValueError:
            limit = 0
        if not 1 <= limit <= 10_000:
            raise InvalidInputError.for_value("limit", q.get("limit"), "an integer from 1 to 10000")
        rows = self.store.list_runs(model=q.get("model") or None, status=status,
                                    actor=q.get("actor") or None, since=since, until=until,
                                    limit=limit, vllm_version=q.get("vllm_version") or None)
        for r in rows:
            r["who"] = who_ran(r)
        return "runs.html", {"title": "runs", "rows": rows, "q": q, "statuses": _STATUSES,
                             "limit": limit}

    def run(self, run_id: str, q: dict[str, str]) -> tuple[str, dict[str, Any]]:
        from urllib.parse import unquote

        from enginecfg.ui.facts import (
            capacity_rows,
            release_rows,
            source_rows,
            validation_rows,
            who_ran,
        )

        run = self.store.get_run(unquote(run_id))
        summary = [["run", run["run_id"]], ["position", run["position"]],
                   ["status", run["status"]], ["model", run["model"]],
                   ["architecture", run["architecture"]],
                   ["vLLM release", run["vllm_version"]],
                   ["started", _short_time(run["started_at"])],
                   ["actor", who_ran(run) or "(not recorded)"],
                   ["host / pid", f"{run['host']} / {run['pid']}"],
                   ["enginecfg", run["enginecfg_version"]],
                   ["engine arguments", _json_text(run["engine_args"])]]
        if run.get("error"):
            err = run["error"]
            summary.append(["error", err.get("message") if isinstance(err, dict) else str(err)])
        return "run.html", {"title": f"run {run['run_id'][:12]}", "run": run,
                            "summary": summary, "release": release_rows(run),
                            "source": source_rows(run),
                            "validation": validation_rows(run), "capacity": capacity_rows(run)}

    def history(self, q: dict[str, str]) -> tuple[str, dict[str, Any]]:
        from enginecfg.ui.charts import history_chart

        field = (q.get("field") or "").strip()
        entries, chart = [], None
        if field:
            self.store.check_field(field)
            entries = self.store.field_history(field, model=q.get("model") or None, limit=200)
            chart = history_chart(entries)
        return "history.html", {"title": f"history of {field}" if field else "history",
                                "field": field, "entries": entries, "chart": chart, "q": q}

    def diff(self, q: dict[str, str]) -> tuple[str, dict[str, Any]]:
        a, b = (q.get("a") or "").strip(), (q.get("b") or "").strip()
        result = self.store.diff_runs(a, b) if a and b else None
        return "diff.html", {"title": "diff", "a": a, "b": b, "result": result}

    def verify(self, q: dict[str, str]) -> tuple[str, dict[str, Any]]:
        from enginecfg.store import checkpoint as cp

        note = None
        if self.checkpoints or self.mirror:
            try:
                keys = self.keys or [cp.load_key()]
                res = cp.verify_with_checkpoints(self.store, self.checkpoints, keys,
                                                 mirror=self.mirror)
            except cp.CheckpointError as exc:
                note = " ".join(str(exc).split())
                res = self.store.verify()
        else:
            res = self.store.verify()
        return "verify.html", {"title": "verify", "res": res, "doc": res.to_dict(),
                               "note": note, "mirror_env": cp.MIRROR_ENV}


def _when(text: str | None, name: str) -> float | None:
    if not text:
        return None
    from enginecfg.ui.facts import parse_time

    return parse_time(text, flag=name)


def open_pages(url: str | None, *, checkpoints: Iterable[str] = (), keys: Iterable[Any] = (),
               mirror: str | None = None, bound_to: str | None = None) -> AuditPages:
    """:class:`AuditPages` over the database at *url*, opened read-only; refused when the
    database is not at the newest schema revision (the page reads its columns)."""
    from enginecfg.store import AuditStore
    from enginecfg.store import engine as eng

    store = AuditStore(url, read_only=True, mirror=None)
    try:
        store.engine  # refused unless an audit store at the newest revision (never upgraded)
    except eng.StoreNotReadyError as exc:
        store.close()
        raise UiUnavailableError(f"{exc} (the page never writes)") from None
    return AuditPages(store, checkpoints=checkpoints, keys=keys, mirror=mirror, bound_to=bound_to)


def serve(pages: AuditPages, host: str = "127.0.0.1", port: int = 8100, *,
          ready: Callable[[str], None] | None = None) -> None:
    """Serve *pages* until interrupted; ``ready(url)`` is called once it listens."""
    import socket
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    class Server(WSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    httpd = make_server(host, port, pages, server_class=Server, handler_class=Quiet)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{httpd.server_port}/"
    (ready or (lambda u: print(u, flush=True)))(url)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        httpd.server_close()
        pages.store.close()
        sys.stdout.flush()
