"""The ``enginecfg`` command line.

``enginecfg run PATH [PATH ...] [engine flags]`` resolves configs and prints what changed,
by which stage and why (``--json``: the run document; for several paths, one document per
line, in the order given); several paths share one pipeline, one audit store and one
transformers request for the snapshots they miss; ``enginecfg stages`` lists the stages; the
audit commands (``runs``, ``show``, ``history``, ``why``, ``diff``, ``export``, ``db``,
``audit verify``) come from :mod:`enginecfg.cli.audit`.  Engine flags are vLLM's
spellings.  Exit codes: 0 resolved, 1 rejected by a verification step, 2 bad input (for several
paths: the highest of theirs).
Errors are one line on stderr, never a traceback (unless ``--traceback``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 (bad input)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"enginecfg: error: {message}\n")
        raise SystemExit(2)


# engine flag -> (EngineArgs name, argparse kwargs)
def _add_engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine arguments (vLLM's names)")
    g.add_argument("--block-size", dest="block_size", type=_int("--block-size"))
    g.add_argument("--kv-cache-dtype", dest="kv_cache_dtype")
    g.add_argument("--enable-prefix-caching", dest="enable_prefix_caching",
                   action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--enable-chunked-prefill", dest="enable_chunked_prefill",
                   action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--mamba-cache-mode", dest="mamba_cache_mode")
    g.add_argument("--mamba-block-size", dest="mamba_block_size", type=_int("--mamba-block-size"))
    g.add_argument("--mamba-ssm-cache-dtype", dest="mamba_ssm_cache_dtype")
    g.add_argument("--mamba-cache-dtype", dest="mamba_cache_dtype")
    g.add_argument("--calculate-kv-scales", dest="calculate_kv_scales", action="store_true", default=None)
    g.add_argument("--attention-backend", dest="attention_backend")
    g.add_argument("-tp", "--tensor-parallel-size", dest="tensor_parallel_size", type=_int("--tensor-parallel-size"))
    g.add_argument("-pp", "--pipeline-parallel-size", dest="pipeline_parallel_size",
                   type=_int("--pipeline-parallel-size"))
    g.add_argument("--max-model-len", dest="max_model_len", type=_int("--max-model-len"))
    g.add_argument("--max-num-batched-tokens", dest="max_num_batched_tokens",
                   type=_int("--max-num-batched-tokens"))
    g.add_argument("--dtype", dest="dtype")


_ENGINE_DESTS = ("block_size", "kv_cache_dtype", "enable_prefix_caching", "enable_chunked_prefill",
                 "mamba_cache_mode", "mamba_block_size", "mamba_ssm_cache_dtype", "mamba_cache_dtype",
                 "calculate_kv_scales", "attention_backend", "tensor_parallel_size", "pipeline_parallel_size",
                 "max_model_len", "max_num_batched_tokens", "dtype")


def _int(flag: str):
    def parse(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} needs an integer, got {text!r}") from None
    return parse


def _engine_args(ns: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(ns, k) for k in _ENGINE_DESTS if getattr(ns, k, None) is not None}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="enginecfg", description="Resolve, explain and validate LLM engine configs "
                                                   "exactly as vLLM 0.19.0 does.")
    parser.add_argument("--log-format", choices=("console", "json", "off"), default="off",
                        help="log every pipeline event to stderr (structlog)")
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of failures")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    run = sub.add_parser("run", help="resolve a model config and show what changed and why")
    run.add_argument("paths", nargs="+", metavar="PATH",
                     help="a model folder holding config.json, or a config.json file (several: each is run)")
    _add_engine_flags(run)
    _add_pipeline_flags(run)
    run.add_argument("--json", action="store_true", help="print the run document as JSON")
    run.add_argument("--no-audit", action="store_true", help="do not record the run in the audit store")
    run.add_argument("--db", default=None, help="audit database URL (default: ENGINECFG_DB, else a "
                                                "SQLite file in the user data directory)")
    run.add_argument("--audit-best-effort", action="store_true",
                     help="if the audit record cannot be written, still exit with the run's status")
    run.set_defaults(func=_cmd_run)

    stages = sub.add_parser("stages", help="list the stages in order (and, given PATH, which apply)")
    stages.add_argument("path", nargs="?", default=None)
    _add_engine_flags(stages)
    _add_pipeline_flags(stages)
    stages.add_argument("--json", action="store_true")
    stages.set_defaults(func=_cmd_stages)

    from enginecfg.cli.audit import register

    register(sub)
    return parser


def _add_pipeline_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu-validation", choices=("auto", "require-gpu", "interpret", "off"), default="auto")
    p.add_argument("--only-stage", action="append", default=None, metavar="NAME",
                   help="run only this stage (repeatable)")
    p.add_argument("--skip-stage", action="append", default=[], metavar="NAME",
                   help="leave this stage out (repeatable)")


def _pipeline(ns: argparse.Namespace):
    from enginecfg.pipeline.run import Pipeline

    return Pipeline(disable=ns.skip_stage, only=ns.only_stage, gpu_validation=ns.gpu_validation)


def _error_line(exc: EngineCfgError) -> str:
    where = f" [{exc.stage}]" if exc.stage and exc.stage != "loading" else ""
    return f"enginecfg: {exc.status}{where}: " + " ".join(str(exc).split())


def _cmd_run(ns: argparse.Namespace) -> int:
    from enginecfg.pipeline.loading import prefetch_pretrained

    args = _engine_args(ns)
    # a config not cached yet needs the transformers worker: start it now, so that its
    # import runs while this process opens the audit store and builds the pipeline
    try:
        prefetch_pretrained(ns.paths, wait=False)
    except EngineCfgError:
        pass  # the run itself reports it (and records it as a failed run)
    store = None
    if not ns.no_audit:
        try:
            from enginecfg.store import AuditStore

            store = AuditStore(ns.db).attach()
        except EngineCfgError as exc:
            sys.stderr.write(f"enginecfg: audit store unavailable: {' '.join(str(exc).split())}\n")
            if not ns.audit_best_effort:
                return 2
    try:
        pipeline = _pipeline(ns)
    except EngineCfgError as exc:
        sys.stderr.write(_error_line(exc) + "\n")
        return exc.exit_code
    many = len(ns.paths) > 1
    code = 0
    try:
        if many:
            prefetch_pretrained(ns.paths)  # every missing snapshot in one request
        for path in ns.paths:
            code = max(code, _run_one(ns, pipeline, store, path, args, many))
    finally:
        if store is not None:
            store.detach()
    return code


def _run_one(ns: argparse.Namespace, pipeline, store, path: str, args: dict[str, Any], many: bool) -> int:
    code = 0
    failed_before = store.write_failed if store is not None else 0
    try:
        result = pipeline.resolve(path, **args)
        doc = result.to_dict()
    except EngineCfgError as exc:
        doc = getattr(exc, "document", None) or {"status": exc.status, "error": exc.to_dict()}
        sys.stderr.write(_error_line(exc) + "\n")
        if ns.traceback:
            import traceback

            traceback.print_exception(exc)
        code = exc.exit_code
        result = None
    record_error = None
    if store is not None and store.write_failed > failed_before:
        record_error = store.record_error
        sys.stderr.write(f"enginecfg: audit record NOT written: {record_error}\n")
        if not ns.audit_best_effort and code == 0:
            code = 2
    if ns.json:
        text = json.dumps(doc, default=str) if many else json.dumps(doc, indent=2, default=str)
        sys.stdout.write(text + "\n")
    elif result is not None:
        from enginecfg.cli.report import print_run

        print_run(result, recorded=store is not None and record_error is None)
    elif doc.get("run_id"):
        sys.stdout.write(f"run {doc['run_id']}: {doc['status']}\n")
    return code


def _cmd_stages(ns: argparse.Namespace) -> int:
    from enginecfg.pipeline.config import EngineConfig
    from enginecfg.pipeline.plugins import describe_stages

    try:
        pipeline = _pipeline(ns)
        cfg = EngineConfig.from_pretrained(ns.path, **_engine_args(ns)) if ns.path else None
        rows = describe_stages(pipeline, cfg)
    except EngineCfgError as exc:
        sys.stderr.write(_error_line(exc) + "\n")
        return exc.exit_code
    if ns.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="enginecfg stages, in run order")
    for col in ("#", "stage", "origin", "after", "before") + (("applies",) if cfg is not None else ()):
        table.add_column(col)
    for r in rows:
        cells = [str(r["position"]), r["name"], r["origin"], ", ".join(r["after"]), ", ".join(r["before"])]
        if cfg is not None:
            cells.append("yes" if r["applies"] else "no")
        table.add_row(*cells)
    Console().print(table)
    return 0


def _configure_logs(fmt: str) -> None:
    """stdout carries the run document, so log lines never go there: with ``--log-format``
    they go to stderr; without it, the CLI's own one-line messages say everything and
    library log lines (e.g. the audit store's) are dropped."""
    import logging

    import structlog

    # structlog knows the standard levels only; "off" drops everything below CRITICAL, and
    # nothing in enginecfg logs at CRITICAL
    level = logging.INFO if fmt != "off" else logging.CRITICAL
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    _configure_logs(ns.log_format)
    if ns.log_format != "off":
        from enginecfg.cli.logs import attach

        attach(ns.log_format)
    if getattr(ns, "command", None) == "run":
        ns.traceback = ns.traceback
    try:
        return ns.func(ns)
    except EngineCfgError as exc:
        sys.stderr.write(_error_line(exc) + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("enginecfg: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
