"""The audit store's CLI commands: ``runs``, ``show``, ``history``, ``why``, ``diff``,
``export``, ``db upgrade|downgrade|current`` and ``audit verify|checkpoint|keygen`` (the
signed checkpoints themselves are :mod:`enginecfg.store.checkpoint`'s).

:func:`register` adds them to the main CLI's subparsers; each sets ``func`` to a handler
``handler(args) -> int``.  Rich tables for people, ``--json`` for machines (a JSON list of
rows, or an object for one thing).  Every command takes ``--db URL`` (default:
``ENGINECFG_DB``, else the user's SQLite file).  Errors are one line on stderr: exit 2 for
bad input (unknown run id, bad URL or an unreachable database, bad time), exit 1 from
``audit verify`` when the history is not intact.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from typing import Any, Callable

from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError
from enginecfg.ui.facts import parse_time

__all__ = ["register", "parse_time"]

_opened: list[Any] = []  # stores a handler opened, closed when it returns


def _fail(message: str, code: int) -> int:
    print(f"enginecfg: error: {' '.join(str(message).split())}", file=sys.stderr)
    return code


def _alembic_errors() -> tuple[type[BaseException], ...]:
    """Alembic's error type, if a migration imported Alembic (matched only when one fails)."""
    util = sys.modules.get("alembic.util")
    return (util.CommandError,) if util is not None else ()


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn every expected failure into one line on stderr and an exit code."""

    @functools.wraps(fn)
    def handler(args: argparse.Namespace) -> int:
        from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

        db = getattr(args, "db", None)
        try:
            try:
                return fn(args)
            finally:
                while _opened:
                    _opened.pop().close()
        except InvalidInputError as exc:
            return _fail(str(exc), 2)
        except (ArgumentError, NoSuchModuleError) as exc:
            return _fail(f"bad database URL {db or '(default)'}: {exc}", 2)
        except DBAPIError as exc:
            return _fail(f"cannot use the audit database: {exc.orig}", 2)
        except _alembic_errors() as exc:
            return _fail(f"migration: {exc}", 2)
        except SQLAlchemyError as exc:
            return _fail(f"audit database error: {exc}", 2)
        except EngineCfgError as exc:
            return _fail(str(exc), getattr(exc, "exit_code", 1))
        except BrokenPipeError:  # the reader (head, less) went away: not an error
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except OSError as exc:
            return _fail(str(exc), 2)

    return handler


def _store(args: argparse.Namespace, *, auto_upgrade: bool = True, read_only: bool = False):
    """The store of ``--db``.  ``read_only``: for a command that only reads, which creates,
    migrates and writes nothing, and refuses a database holding no audit store at this
    enginecfg's schema revision (saying what it found there)."""
    from enginecfg.store import AuditStore

    url = args.db
    if url is not None and not url.strip():
        raise InvalidInputError.for_value("db", url, "a SQLAlchemy database URL", flag="--db")
    store = AuditStore(url, auto_upgrade=auto_upgrade, read_only=read_only)
    _opened.append(store)
    return store


def _reader(args: argparse.Namespace):
    """:func:`_store` for a command that only reads."""
    return _store(args, read_only=True)


def store_queries():
    from enginecfg.store import queries

    return queries


def _dump(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def _v(value: Any) -> str:
    """A stored value as people read it: JSON spelling (null, true, "auto"), as everywhere."""
    return json.dumps(value, default=str)


def _value(field: str, value: Any) -> str:
    """A stored value of *field*: a figure (``impact.*``) as ``explain`` prints it (``58.85x``,
    ``311,248``), anything else as JSON."""
    from enginecfg.cli.numbers import value as spelt

    return spelt(field, value)


def _cell(args: argparse.Namespace, field: str, value: Any) -> str:
    """A value in a table: as people read it, or as JSON in ``--csv`` (numbers exact)."""
    return _v(value) if getattr(args, "csv", False) else _value(field, value)


def _time(iso: str | None) -> str:
    """ISO 8601 in UTC to the second, ``2026-12-03T07:45:33Z`` (the JSON keeps full precision)."""
    return "" if iso is None else iso[:19] + "Z"


def _flags(engine_args: Any) -> str:
    from enginecfg.pipeline.engine_args import to_flags

    return " ".join(to_flags(engine_args)) if isinstance(engine_args, dict) else ""


def _print_table(args: argparse.Namespace, columns: list[str], rows: list[list[Any]], *,
                 names: tuple[int, ...], title: str) -> None:
    """A table for people, or CSV with ``--csv`` (same columns)."""
    from enginecfg.cli.tables import render, write_csv

    if getattr(args, "csv", False):
        write_csv(sys.stdout, columns, rows)
    else:
        print(render(columns, rows, names=names, title=title))


# -- handlers -----------------------------------------------------------------------------


@_guard
def _cmd_runs(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise InvalidInputError.for_value("limit", args.limit, "a positive integer",
                                          flag="--limit")
    if args.vllm_version is not None:
        import re

        from enginecfg.pipeline import rulepacks

        # a release this enginecfg speaks for, or one spelt as a release (a store may hold
        # the runs of a release a newer enginecfg added: the filter then finds those)
        given = args.vllm_version.strip()
        if given not in rulepacks.releases() and not re.fullmatch(r"\d+\.\d+\.\d+", given):
            raise InvalidInputError.for_value("vllm_version", args.vllm_version,
                                              ", ".join(rulepacks.releases()) + ", or another "
                                              "release number (X.Y.Z)", flag="--vllm-version")
    since = parse_time(args.since, flag="--since") if args.since else None
    until = parse_time(args.until, flag="--until") if args.until else None
    from enginecfg.ui.facts import model_key

    rows = _reader(args).list_runs(model=model_key(args.model), architecture=args.architecture,
                                  status=args.status, since=since, until=until, limit=args.limit,
                                  actor=args.actor, vllm_version=args.vllm_version)
    if args.json:
        _dump(rows)
        return 0
    from enginecfg.ui.facts import start_verdict, who_ran

    _print_table(args, ["run_id", "started_at", "status", "start", "vllm", "model", "architecture",
                        "actor", "changes", "engine flags"],
                 [[r["run_id"][:12], _time(r["started_at"]), r["status"], start_verdict(r), r["vllm_version"],
                   r["model"], r["architecture"], who_ran(r), r["changes"],
                   _flags(r["engine_args"])]
                  for r in rows],
                 names=(0, 1, 2, 4, 6), title=f"{len(rows)} run(s), newest first")
    return 0


@_guard
def _cmd_show(args: argparse.Namespace) -> int:
    run = _reader(args).get_run(args.run)
    if args.json:
        _dump(run)
        return 0
    if args.csv:  # the run's changes, one row each (the run itself: --json)
        from enginecfg.cli.tables import write_csv

        write_csv(sys.stdout, ["run_id", "seq", "stage", "field", "old", "new", "level", "reason",
                               "explanation"],
                  [[run["run_id"], c["seq"], c["stage"], c["field"], _v(c["old"]), _v(c["new"]),
                    c["level"], c["reason"], c.get("explanation")] for c in run["changes"]])
        return 0
    from enginecfg.cli.tables import paragraph, render
    from enginecfg.ui.facts import (
        capacity_rows,
        release_rows,
        source_rows,
        start_verdict,
        startup_log_rows,
        validation_rows,
        who_ran,
    )

    keys = ["run_id", "position", "status", "model", "architecture", "started_at",
            "finished_at"]
    after = ["host", "pid", "enginecfg_version", "input_fingerprint", "result_fingerprint",
             "row_hash"]
    verdict = [["start", start_verdict(run)]] if start_verdict(run) else []
    out = [render(["key", "value"],
                  [[k, run[k]] for k in keys[:3]] + verdict + [[k, run[k]] for k in keys[3:]]
                  + [["actor", who_ran(run) or "(not recorded)"]]
                  + [[k, run[k]] for k in after]
                  + [["engine flags", _flags(run["engine_args"])]]
                  + ([["error", _v(run["error"])]] if run["error"] else []),
                  names=(0,), title=f"run {run['run_id']}")]
    out.append(render(["key", "value"], release_rows(run), names=(0,), title="release and GPU"))
    out.append(render(["key", "value"], source_rows(run), names=(0,), title="source"))
    out.append(render(["key", "value"], validation_rows(run), names=(0,),
                      title="GPU validation"))
    out.append(render(["key", "value"], capacity_rows(run), names=(0,), title="capacity"))
    observed = startup_log_rows(run)
    if observed:
        source = (run.get("result") or {}).get("startup_log", {}).get("source")
        out.append(render(["line", "logged line", "logged", "enginecfg", ""], observed, names=(0, 4),
                          title=f"start-up log checked ({source}; enginecfg check-log)"))
    out.append(render(["#", "stage", "origin", "outcome", "changes", "seconds", "error"],
                      [[s["stage_order"], s["stage"], s["origin"], s["outcome"], s["n_changes"],
                        None if s["duration_s"] is None else f"{s['duration_s']:.6f}", s["error"]]
                       for s in run["stages"]], names=(0, 1, 3), title="stages"))
    out.append(render(["seq", "stage", "field", "old", "new", "level"],
                      [[c["seq"], c["stage"], c["field"], _v(c["old"]), _v(c["new"]), c["level"]]
                       for c in run["changes"]], names=(0, 1, 2, 5), title="changes"))
    for c in run["changes"]:
        out.append(paragraph(f"#{c['seq']} {c['field']}: {c['reason']}", indent="  ",
                             hanging="      "))
        if c.get("explanation"):
            out.append(paragraph(c["explanation"], indent="      "))
    if run["messages"]:
        out.append(render(["seq", "stage", "level", "message"],
                          [[m["seq"], m["stage"], m["level"], m["message"]]
                           for m in run["messages"]], names=(0, 1, 2), title="messages"))
    if run["validation_checks"]:
        out.append(render(["check", "kernel", "dtype", "max_error", "tolerance", "passed", "device"],
                          [[v["check"], v["kernel"], v["dtype"], _v(v["max_error"]),
                            _v(v["tolerance"]), _v(v["passed"]), v["device"]]
                           for v in run["validation_checks"]], names=(0, 1, 2), title="validation checks"))
    print("\n".join(out))
    return 0


@_guard
def _cmd_history(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise InvalidInputError.for_value("limit", args.limit, "a positive integer",
                                          flag="--limit")
    store = _reader(args)
    store.check_field(args.field)
    from enginecfg.ui.facts import model_key

    rows = store.field_history(args.field, model=model_key(args.model), limit=args.limit,
                               changed_only=args.changed_only)
    if args.json:
        _dump(rows)
        return 0
    from enginecfg.ui.facts import start_verdict

    _print_table(args, ["run_id", "started_at", "model", "status", "start", "vllm", "value",
                        "changed by", "engine flags"],
                 [[r["run_id"][:12], _time(r["started_at"]), r["model"], r["status"], start_verdict(r),
                   r["vllm_version"], _cell(args, args.field, r["value"]),
                   "; ".join(f"{c['stage']}: {_v(c['old'])} -> {_v(c['new'])}"
                             for c in r["changes"]) or "(unchanged)",
                   _flags(r["engine_args"])] for r in rows],
                 names=(0, 1, 3, 5), title=f"{args.field}: {len(rows)} run(s), newest first")
    return 0


@_guard
def _cmd_why(args: argparse.Namespace) -> int:
    res = _reader(args).why(args.run, args.field)
    if not res["found"]:
        near = res.get("closest") or []
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise InvalidInputError(f"run {res['run_id']} neither holds nor changed a field "
                                f"{args.field!r}{hint}", field="field")
    if args.json:
        _dump(res)
        return 0
    from enginecfg.cli.tables import paragraph
    from enginecfg.ui.facts import start_verdict

    state = ", ".join(x for x in (res["status"], start_verdict(res)) if x)
    out = [paragraph(f"{res['field']} in run {res['run_id']} ({state}, {res['model']})",
                     hanging="    ")]
    if res.get("fact"):
        out.append(paragraph("  a figure the run records (the impact stage works it out from the resolved "
                             "config; no stage changes it)", hanging="    "))
        out.append(f"  value:   {_value(res['field'], res['final'])}")
        print("\n".join(out))
        return 0
    out.append(f"  initial: {_v(res['initial'])}")
    for c in res["changes"]:
        where = "" if c["field"] == res["field"] else f" [{c['field']}]"
        out.append(f"  #{c['seq']} {c['stage']}{where}: {_v(c['old'])} -> {_v(c['new'])} ({c['level']})")
        out.append(paragraph(c["reason"], indent="      "))
        if c.get("explanation"):
            out.append(paragraph(c["explanation"], indent="      "))
    if not res["changes"]:
        out.append("  (no stage changed it)")
    out.append(f"  final:   {_v(res['final'])}")
    print("\n".join(out))
    return 0


@_guard
def _cmd_diff(args: argparse.Namespace) -> int:
    res = _reader(args).diff_runs(args.run_a, args.run_b)
    if args.json:
        _dump(res)
        return 0
    _print_table(args, ["field", "a", "b"],
                 [[d["field"], "(absent)" if d["only_in"] == "b" else _cell(args, d["field"], d["a"]),
                   "(absent)" if d["only_in"] == "a" else _cell(args, d["field"], d["b"])]
                  for d in res["differences"]],
                 names=(0,), title=f"{len(res['differences'])} difference(s): "
                                   f"a = run {res['run_id_a']}, b = run {res['run_id_b']}"
                                   + diff_releases(res))
    return 0


def diff_releases(res: dict[str, Any]) -> str:
    """The diff header's note on the two runs' releases: which each speaks for when they
    differ (their fields then differ by the releases' rules, not only by the inputs)."""
    if not res.get("releases_differ"):
        return ""
    return (f"; the releases differ: a = vLLM {res['vllm_version_a']}, "
            f"b = vLLM {res['vllm_version_b']}")


@_guard
def _cmd_export(args: argparse.Namespace) -> int:
    store = _reader(args)
    if args.all:
        if args.format != "jsonl" or args.table != "runs" or args.raw:
            raise InvalidInputError("--all exports every table, raw, as JSON lines: it takes "
                                    "neither --format csv, --table nor --raw", field="all")
        if args.output in (None, "-"):
            counts = store_queries().export_all(store, sys.stdout)
        else:
            with open(args.output, "w", encoding="utf-8", newline="") as fh:
                counts = store_queries().export_all(store, fh)
            print(f"exported every table ({', '.join(f'{n} {t}' for t, n in counts.items())}) "
                  f"to {args.output}", file=sys.stderr)
        return 0
    if args.output in (None, "-"):
        n = store.export(sys.stdout, fmt=args.format, table=args.table, raw=args.raw)
    else:
        with open(args.output, "w", encoding="utf-8", newline="") as fh:
            n = store.export(fh, fmt=args.format, table=args.table, raw=args.raw)
        print(f"exported {n} {args.table} row(s) to {args.output}", file=sys.stderr)
    return 0


@_guard
def _cmd_db_upgrade(args: argparse.Namespace) -> int:
    from enginecfg.store import engine as eng

    store = _store(args, auto_upgrade=False)
    eng.upgrade(store.engine, args.revision)
    print(f"{store.display_url}: at revision {eng.current_revision(store.engine)}")
    return 0


@_guard
def _cmd_db_downgrade(args: argparse.Namespace) -> int:
    from enginecfg.store import engine as eng
    from enginecfg.store.downgrade import downgrade

    store = _store(args, auto_upgrade=False)
    eng.make_engine(store.url, read_only=True).dispose()  # a store that is not there: refused
    done = downgrade(store.engine, args.revision, exported=args.i_have_exported,
                     who=store.identity)
    print(f"{store.display_url}: at revision {eng.current_revision(store.engine) or 'base'}")
    if args.i_have_exported and done.loses:
        print(f"enginecfg: the loss is recorded in the store (audit_losses) and `audit verify` "
              f"reports it; the history before it is in {args.i_have_exported}", file=sys.stderr)
    return 0


@_guard
def _cmd_db_current(args: argparse.Namespace) -> int:
    from enginecfg.store import engine as eng

    store = _store(args, auto_upgrade=False)
    head = eng.head_revision()
    try:
        engine = eng.make_engine(store.url, read_only=True)  # a question: it creates nothing
    except eng.StoreNotReadyError:  # a SQLite file not written yet: no schema at all
        cur = None
    else:
        try:
            cur = eng.current_revision(engine)
        finally:
            engine.dispose()
    if args.json:
        _dump({"db": store.display_url, "current": cur, "head": head})
    else:
        print(f"{store.display_url}: at revision {cur or 'base'} (head: {head})")
    return 0


@_guard
def _cmd_audit_verify(args: argparse.Namespace) -> int:
    import os

    from enginecfg.store import checkpoint as cp

    mirror = None if args.no_mirror else os.environ.get(cp.MIRROR_ENV) or None
    if args.checkpoint or mirror:
        keys = [cp.load_key(f) for f in args.key_file] or [cp.load_key()]
        res = cp.verify_with_checkpoints(_reader(args), args.checkpoint, keys, mirror=mirror)
    else:
        res = _reader(args).verify()
    if args.json:
        _dump(res.to_dict())
        return 0 if res.ok else 1
    print(verify_summary(res))
    if res.ok:
        print(f"audit history intact: {res.runs_checked} run(s), head at position "
              f"{res.head_position} ({res.head_hash[:16]})"
              + (f"; extends {res.checkpoints_checked} signed checkpoint(s)"
                 if res.checkpoints_checked else ""))
    else:
        bad = res.first_bad
        print(f"audit history NOT intact: {len(res.problems)} problem(s); first: {bad.message}")
        for p in res.problems[1:20]:
            print(f"  also: {p.message}")
    return 0 if res.ok else 1


def verify_summary(res: Any) -> str:
    """What a verification checked, in words: the store, its creation, the positions
    walked, and the checkpoints (the mirror's included)."""
    created = _time(res.to_dict()["created_at"]) or "unknown"
    walked = (f"positions {res.first_position}..{res.last_position}"
              if res.first_position is not None else "no run")
    parts = [f"checked store {res.store_id or '(no id)'} (created {created}): {walked}, "
             f"head at position {res.head_position}"]
    if res.checkpoint_sources:
        parts.append(f"against {res.checkpoints_checked} signed checkpoint(s) from "
                     + ", ".join(res.checkpoint_sources))
    if res.mirror:
        parts.append(f"mirror {res.mirror}")
    return "; ".join(parts)


@_guard
def _cmd_audit_checkpoint(args: argparse.Namespace) -> int:
    import os

    from enginecfg.store import checkpoint as cp

    doc = cp.make_checkpoint(_reader(args), cp.load_key(args.key_file))
    text = cp.checkpoint_text(doc)
    if args.output in (None, "-"):
        sys.stdout.write(text)
        return 0
    try:  # a new file: an earlier checkpoint is never overwritten
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise InvalidInputError.for_value("output", args.output, "a path that does not exist "
                                          "yet (a checkpoint is never overwritten)",
                                          flag="--output") from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"checkpoint of position {doc['position']} signed with key {doc['key_id']} "
          f"({doc['alg']}) written to {args.output}", file=sys.stderr)
    return 0


@_guard
def _cmd_audit_keygen(args: argparse.Namespace) -> int:
    from enginecfg.store import checkpoint as cp

    key = cp.generate_key(args.out, args.public)
    print(f"Ed25519 key {key.key_id}: private key {args.out} (keep it with the signer only), "
          f"public key {cp.public_key_path(args.out, args.public)}")
    return 0


@_guard
def _cmd_ui(args: argparse.Namespace) -> int:
    import os

    from enginecfg.store import checkpoint as cp
    from enginecfg.ui.pages import open_pages, serve

    if not 0 <= args.port <= 65535:
        raise InvalidInputError.for_value("port", args.port, "0 (any free port) to 65535",
                                          flag="--port")
    if args.db is not None and not args.db.strip():
        raise InvalidInputError.for_value("db", args.db, "a SQLAlchemy database URL", flag="--db")
    keys = [cp.load_key(f) for f in args.key_file]
    mirror = None if args.no_mirror else os.environ.get(cp.MIRROR_ENV) or None
    pages = open_pages(args.db, checkpoints=args.checkpoint, keys=keys, mirror=mirror,
                       bound_to=args.host)
    _opened.append(pages.store)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"enginecfg: note: serving on {args.host}: whoever reaches this address can read "
              "the audit history", file=sys.stderr)

    def ready(url: str) -> None:
        print(f"enginecfg ui: {pages.store.display_url} (read-only) at {url} ; Ctrl-C stops",
              flush=True)

    try:
        serve(pages, args.host, args.port, ready=ready)
    except KeyboardInterrupt:
        print("enginecfg ui: stopped", file=sys.stderr)
    except OSError as exc:
        raise InvalidInputError(f"invalid --host/--port {args.host}:{args.port}: cannot listen "
                                f"there ({exc.strerror or exc})", field="port") from None
    return 0


# -- registration -------------------------------------------------------------------------


def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="URL", default=None,
                   help="audit database (sqlite:///PATH or postgresql://...); default: $ENGINECFG_DB, else the "
                        "user's SQLite audit.db")


def _add_json(p: argparse.ArgumentParser, *, csv: bool = False) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print JSON for machines")
    if csv:
        g.add_argument("--csv", action="store_true", help="print the table as CSV")


def register(subparsers: Any) -> None:
    """Add the audit-store commands to an ``ArgumentParser.add_subparsers()`` object."""
    p = subparsers.add_parser("runs", help="list recorded runs, newest first")
    p.add_argument("--model", help="model path as given, or its folder name")
    p.add_argument("--architecture")
    p.add_argument("--status", choices=("resolved", "rejected", "invalid", "interrupted"))
    p.add_argument("--since", metavar="TIME", help="ISO date/time (UTC) or an age: 30m, 2h, 7d")
    p.add_argument("--until", metavar="TIME", help="ISO date/time (UTC) or an age")
    p.add_argument("--actor", metavar="NAME",
                   help="runs by this actor (--actor / ENGINECFG_ACTOR) or operating-system user")
    p.add_argument("--vllm-version", metavar="V", default=None,
                   help="runs decided by this vLLM release's rules (enginecfg releases lists them)")
    p.add_argument("--limit", type=int, default=50, metavar="N")
    _add_json(p, csv=True)
    _add_db(p)
    p.set_defaults(func=_cmd_runs)

    p = subparsers.add_parser("show", help="everything recorded about one run")
    p.add_argument("run", metavar="RUN", help="run id or a unique prefix of it")
    _add_json(p, csv=True)
    _add_db(p)
    p.set_defaults(func=_cmd_show)

    p = subparsers.add_parser("history", help="one field's value across runs, newest first")
    p.add_argument("field", metavar="FIELD", help="dotted field, e.g. cache_config.block_size")
    p.add_argument("--model")
    p.add_argument("--limit", type=int, default=50, metavar="N")
    p.add_argument("--changed-only", action="store_true",
                   help="only runs in which a stage changed the field")
    _add_json(p, csv=True)
    _add_db(p)
    p.set_defaults(func=_cmd_history)

    p = subparsers.add_parser("why", help="the chain of changes behind a field's final value")
    p.add_argument("run", metavar="RUN")
    p.add_argument("field", metavar="FIELD")
    _add_json(p)
    _add_db(p)
    p.set_defaults(func=_cmd_why)

    p = subparsers.add_parser("diff", help="fields whose final values differ between two runs")
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    _add_json(p, csv=True)
    _add_db(p)
    p.set_defaults(func=_cmd_diff)

    p = subparsers.add_parser("export", help="dump an audit table as JSON lines or CSV")
    p.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    p.add_argument("--table", default="runs",
                   choices=("runs", "stage_executions", "changes", "messages",
                            "validation_checks"))
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--raw", action="store_true",
                   help="the stored values exactly (epoch-second floats, the runs table's 'id'), "
                        "as the row hashes cover them; default: ISO times and 'run_id'")
    p.add_argument("--all", action="store_true",
                   help="every table, raw, with a header naming the store and its chain head: "
                        "the export `db downgrade --i-have-exported` checks")
    _add_db(p)
    p.set_defaults(func=_cmd_export)

    db = subparsers.add_parser("db", help="the audit database schema")
    dbsub = db.add_subparsers(dest="db_command", metavar="{upgrade,downgrade,current}")
    dbsub.required = True
    p = dbsub.add_parser("upgrade", help="upgrade the schema (default: to the newest revision)")
    p.add_argument("revision", nargs="?", default="head", metavar="REV")
    _add_db(p)
    p.set_defaults(func=_cmd_db_upgrade)
    p = dbsub.add_parser("downgrade", help="downgrade the schema to REV (base: drop it all); "
                                           "refused on a store holding runs unless exported")
    p.add_argument("revision", metavar="REV", help="a revision below the current one, base, or -N")
    p.add_argument("--i-have-exported", metavar="FILE", default=None,
                   help="the store was exported to FILE (`enginecfg export --all -o FILE`) as it "
                        "is now: checked, then the downgrade may drop history; the loss is "
                        "recorded and `audit verify` reports it")
    _add_db(p)
    p.set_defaults(func=_cmd_db_downgrade)
    p = dbsub.add_parser("current", help="the schema revision the database is at")
    _add_json(p)
    _add_db(p)
    p.set_defaults(func=_cmd_db_current)

    audit = subparsers.add_parser("audit", help="check the audit history")
    asub = audit.add_subparsers(dest="audit_command", metavar="{verify,checkpoint,keygen}")
    asub.required = True
    p = asub.add_parser("verify", help="recompute the hash chain (exit 0 intact, 1 not)")
    p.add_argument("--checkpoint", action="append", default=[], metavar="FILE|URL",
                   help="also prove the database extends the signed checkpoints in FILE (or "
                        "in a mirror database URL); repeatable")
    p.add_argument("--key-file", action="append", default=[], metavar="FILE",
                   help="key that verifies the checkpoints (repeatable, one per key); "
                        "default: $ENGINECFG_AUDIT_KEY")
    p.add_argument("--no-mirror", action="store_true",
                   help="do not check against the mirror ($ENGINECFG_AUDIT_MIRROR), which is "
                        "checked by default when set")
    _add_json(p)
    _add_db(p)
    p.set_defaults(func=_cmd_audit_verify)
    p = asub.add_parser("checkpoint", help="sign the chain head, to be kept elsewhere")
    p.add_argument("--key-file", metavar="FILE", default=None,
                   help="Ed25519 private key (PEM) or shared secret; default: "
                        "$ENGINECFG_AUDIT_KEY")
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="write it to this new file instead of stdout")
    _add_db(p)
    p.set_defaults(func=_cmd_audit_checkpoint)
    p = subparsers.add_parser("ui", help="a read-only web page over the audit store (runs, "
                                         "changes, history charts, diffs, verification)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8100, metavar="N",
                   help="port (default 8100; 0: any free port, printed)")
    p.add_argument("--checkpoint", action="append", default=[], metavar="FILE|URL",
                   help="signed checkpoints the verify page checks (repeatable)")
    p.add_argument("--key-file", action="append", default=[], metavar="FILE",
                   help="key that verifies them (repeatable); default: $ENGINECFG_AUDIT_KEY")
    p.add_argument("--no-mirror", action="store_true",
                   help="do not check against $ENGINECFG_AUDIT_MIRROR on the verify page")
    _add_db(p)
    p.set_defaults(func=_cmd_ui)

    p = asub.add_parser("keygen", help="make an Ed25519 key pair for checkpoints")
    p.add_argument("--out", required=True, metavar="FILE", help="private key file (new)")
    p.add_argument("--public", metavar="FILE", default=None,
                   help="public key file (default: FILE with .pub.pem)")
    p.set_defaults(func=_cmd_audit_keygen)
