"""The ``enginecfg`` command line.

``enginecfg run PATH [engine flags]`` resolves a config and prints what changed, by which
stage and why (``--json``: the run document); ``enginecfg stages`` lists the stages;
``explain`` and ``plan`` (:mod:`enginecfg.cli.explain`) give the KV-cache cost of a setting; the
audit commands (``runs``, ``show``, ``history``, ``why``, ``diff``, ``export``, ``db``,
``audit verify``) come from :mod:`enginecfg.cli.audit`.  Engine flags are vLLM's spellings,
built from the one table :data:`enginecfg.pipeline.engine_args.ENGINE_ARGS`, and read as
``vllm serve`` reads them (``--max-model-len 32k``); a pasted ``vllm serve`` line works:
options of ``vllm serve`` that enginecfg does not use are set aside with a note on stderr.
Global flags (``--log-format``, ``--traceback``) go before or after the command.
Exit codes: 0 resolved, 1 rejected by a verification step, 2 bad input.  Errors are one
line on stderr, never a traceback (unless ``--traceback``).

``enginecfg run PATH [PATH ...]`` runs each path in turn with one pipeline, one audit store
and one transformers request for the snapshots they miss; ``--json`` then prints one
document per line, in the order given, and the exit status is the highest of the runs'.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from enginecfg.cli.engine_flags import add_engine_flags, add_memory_flags, engine_args, memory_options
from enginecfg.pipeline.errors import EngineCfgError

__all__ = ["main", "build_parser", "read_vllm_serve_line"]

#: ``vllm serve`` options that change what vLLM resolves, which enginecfg does not model:
#: a run given them still resolves without them, and says so
_CHANGES_THE_ANSWER = frozenset({
    "--quantization", "-q", "--code-revision", "--hf-config-path",
    "--config-format", "--convert", "--pooler-config",
    "--model-impl", "--speculative-config",
})
_COMMANDS_WITH_ENGINE_FLAGS = ("run", "stages", "explain", "upgrade")


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 (bad input)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"enginecfg: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(2)


class _Help(argparse.HelpFormatter):
    def __init__(self, prog: str) -> None:
        from enginecfg.cli.tables import width

        super().__init__(prog, max_help_position=32, width=min(width(), 100))

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        # flag names (--max-num-batched-tokens) are never broken at their hyphens
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False)


def _version_line() -> str:
    from enginecfg import __version__

    from enginecfg.pipeline import releases

    spoken = releases.all_releases()
    return (f"enginecfg {__version__} (vLLM {spoken[0]} to {spoken[-1]} semantics: {len(spoken)} releases; "
            f"default {_releases()[0]})")


def _add_globals(p: argparse.ArgumentParser, *, here: bool) -> None:
    """The global flags; on a command's parser they default to "not given" so that a value
    given before the command survives."""
    default = {} if here else {"default": argparse.SUPPRESS}
    p.add_argument("--log-format", choices=("console", "json", "off"),
                   help="log every pipeline event to stderr (structlog); default: off",
                   **({"default": "off"} if here else default))
    p.add_argument("--traceback", action="store_true", help="show tracebacks of failures",
                   **({"default": False} if here else default))


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in dict.fromkeys(action.choices.values()):
                yield sp
                yield from _subparsers(sp)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="enginecfg", formatter_class=_Help,
                     description="Resolve, explain and validate LLM engine configs exactly as vLLM "
                                 + " or ".join(_releases()) + " does (--vllm-version), and audit every run.",
                     epilog="`enginecfg COMMAND --help` shows a command's flags. Exit codes: 0 resolved, "
                            "1 rejected by a verification step, 2 bad input.")
    _add_globals(parser, here=True)
    parser.add_argument("--version", action="version", version=_version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser("run", help="resolve a model config and show what changed and why",
                         formatter_class=_Help,
                         description="Resolve a model config as vLLM would (the release --vllm-version names, "
                                     "default " + _releases()[0] + ") and show what changed, by "
                                     "which stage and why. A pasted `vllm serve MODEL ...` line works too: "
                                     "options enginecfg does not use are set aside with a note on stderr.")
    run.add_argument("paths", nargs="*", metavar="PATH",
                     help="a model folder holding config.json, a config.json file, or a Hugging Face repo id "
                          "(org/name; HF_HOME, HF_HUB_OFFLINE and HF_TOKEN apply); several: each is run, with "
                          "--json one document per line")
    run.add_argument("--model", dest="model_option", metavar="PATH", help=argparse.SUPPRESS)
    add_engine_flags(run)
    add_memory_flags(run)
    _add_pipeline_flags(run)
    run.add_argument("--require-start", action="store_true",
                     help="exit 1 when vLLM (the release the run speaks for) would not start with the resolved config on the GPU and "
                          "memory given (its start-up checks: KV-cache memory, one request of max_model_len, "
                          "auto-fit, the free memory the utilization requests); for CI")
    run.add_argument("--json", action="store_true", help="print the run document as JSON")
    run.add_argument("--no-audit", action="store_true", help="do not record the run in the audit store")
    run.add_argument("--db", default=None, metavar="URL",
                     help="audit database URL (default: ENGINECFG_DB, else a SQLite file in the user data "
                          "directory)")
    run.add_argument("--actor", default=None, metavar="NAME",
                     help="who runs this, recorded with the run beside the OS user (a service account, "
                          "a CI job); default: ENGINECFG_ACTOR")
    run.add_argument("--audit-best-effort", action="store_true",
                     help="if the audit record cannot be written, still exit with the run's status")
    run.set_defaults(func=_cmd_run)

    stages = sub.add_parser("stages", help="list the stages in order (and, given PATH, which apply)",
                            formatter_class=_Help)
    stages.add_argument("path", nargs="?", default=None)
    stages.add_argument("--model", dest="model_option", metavar="PATH", help=argparse.SUPPRESS)
    add_engine_flags(stages)
    _add_pipeline_flags(stages)
    stages.add_argument("--json", action="store_true", help="print JSON for machines")
    stages.add_argument("--csv", action="store_true", help="print CSV")
    stages.set_defaults(func=_cmd_stages)

    gp = sub.add_parser("gpus", help="the GPU presets --gpu takes, with their memory and compute capability",
                        formatter_class=_Help)
    gp.add_argument("--json", action="store_true", help="print JSON for machines")
    gp.set_defaults(func=_cmd_gpus)

    from enginecfg.cli.audit import register
    from enginecfg.cli.explain import register as register_explain

    register(sub)
    register_explain(sub)
    from enginecfg.cli.upgrade import register as register_upgrade

    register_upgrade(sub)
    from enginecfg.cli.check_log import register as register_check_log

    register_check_log(sub)
    from enginecfg.cli.releases import register as register_releases

    register_releases(sub)
    for sp in _subparsers(parser):
        sp.formatter_class = _Help
        _add_globals(sp, here=False)
    return parser


def _add_pipeline_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pipeline")
    g.add_argument("--gpu-validation", choices=("auto", "require-gpu", "interpret", "off"), default="auto",
                   help="prove the resolved config with Triton kernels: auto (on a GPU if there is one), "
                        "require-gpu, interpret (Triton's interpreter on the CPU; slow), off")
    g.add_argument("--vllm-version", default=None, metavar="VERSION",
                   help="the vLLM release whose rules decide: " + ", ".join(_releases())
                        + " (default: ENGINECFG_VLLM_VERSION, else " + _releases()[0] + ")")
    g.add_argument("--only-stage", action="append", default=None, metavar="NAME",
                   help="run only this stage (repeatable)")
    g.add_argument("--skip-stage", action="append", default=[], metavar="NAME",
                   help="leave this stage out (repeatable)")
    g.add_argument("--stage-timeout", default=None, metavar="SECONDS",
                   help="seconds a plugin's stage may take before the run is refused (default: "
                        "ENGINECFG_STAGE_TIMEOUT, else 10)")


# -- a pasted `vllm serve` line ------------------------------------------------------------------

def read_vllm_serve_line(tokens: Sequence[str], own: set[str], groups: list[list[str]] | None = None, *,
                         release: str | None = None) -> tuple[list[str], list[str], list[str]]:
    """Split a command's tokens into (enginecfg's tokens, set-aside vLLM options, unknown options).
    *groups*, when given, receives each set-aside option as its tokens (the equivalent ``vllm
    serve`` command keeps them).  *release* names the vLLM release whose ``vllm serve`` options
    are read (default: the default release's): a switch spelt as that release spells it
    (0.34.0's ``--disable-prefix-caching``) is enginecfg's flag of the same engine argument
    (``--no-enable-prefix-caching``).

    ``own`` holds the option strings the command takes.  An option another release's ``vllm
    serve`` has is set aside too (the run's equivalent command then names it as dropped); a
    pasted line was read by the release's own parser before, which refuses it.  Spellings are read as ``vllm serve``
    reads them (``--max_model_len`` is ``--max-model-len``; ``--x=value``).  A leading
    ``vllm serve`` (or ``serve``) is dropped.  Options of ``vllm serve`` that enginecfg does
    not take are removed with their values; anything else unknown is returned for an error.
    """
    from enginecfg.cli.engine_flags import serve_table, serve_tables
    from enginecfg.pipeline.engine_args import ENGINE_ARGS

    table = serve_table(release)
    VLLM_SERVE_OPTIONS = table.VLLM_SERVE_OPTIONS
    tokens = list(tokens)
    while tokens and tokens[0] in ("vllm", "serve"):
        tokens.pop(0)
    keep: list[str] = []
    aside: list[str] = []
    unknown: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "--":
            keep += tokens[i - 1:]
            break
        if not tok.startswith("-") or tok == "-" or _is_number(tok):
            keep.append(tok)
            continue
        name, eq, value = tok.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        spelled = name + eq + value
        if name in own:
            keep.append(spelled)
            continue
        switch = table.VLLM_SERVE_SWITCHES.get(name)
        if switch is not None and not eq and switch[0] in ENGINE_ARGS:
            flag = ENGINE_ARGS[switch[0]].flags[0]
            flag = flag if switch[1] else "--no-" + flag[2:]
            if flag in own:
                keep.append(flag)
                continue
        nargs = VLLM_SERVE_OPTIONS.get(name)
        if nargs is None:  # another release's option: set aside too (a pasted line was refused first)
            nargs = next((t.VLLM_SERVE_OPTIONS[name] for t in serve_tables() if name in t.VLLM_SERVE_OPTIONS),
                         None)
        if nargs is None and (name.startswith("-O") and not name.startswith("--")
                              or not name.startswith("--") and VLLM_SERVE_OPTIONS.get(name[:2]) == 1):
            aside.append(tok)  # a short option with its value attached: -O3, -tp2
            if groups is not None:
                groups.append([tok])
            continue
        if nargs is None and "." in name and VLLM_SERVE_OPTIONS.get(name.split(".")[0]) == 1:
            nargs = 1  # one key of a JSON option: --compilation-config.mode 3
        if nargs is None:
            unknown.append(name)
            continue
        taken = [spelled]
        if not eq:
            if nargs == 1 and i < len(tokens):
                taken.append(tokens[i])
                i += 1
            elif nargs in ("?", "*", "+"):
                while i < len(tokens) and (not tokens[i].startswith("-") or _is_number(tokens[i])):
                    taken.append(tokens[i])
                    i += 1
                    if nargs == "?":
                        break
        aside.append(" ".join(taken))
        if groups is not None:
            groups.append(taken)
    return keep, aside, unknown


def _is_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _own_options(parser: argparse.ArgumentParser) -> set[str]:
    return set(parser._option_string_actions)


def _prepare(parser: argparse.ArgumentParser, argv: list[str], aside_tokens: list[str] | None = None) -> list[str]:
    """Read a pasted ``vllm serve`` line in the run/stages/explain commands (see module doc);
    the options set aside go, as tokens, into *aside_tokens* when it is given."""
    cmd_at, i = None, 0
    while i < len(argv):
        if argv[i] == "--log-format":
            i += 2
            continue
        if not argv[i].startswith("-"):
            cmd_at = i
            break
        i += 1
    if cmd_at is None or argv[cmd_at] not in _COMMANDS_WITH_ENGINE_FLAGS:
        return argv
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cmd_parser = sub.choices[argv[cmd_at]]
    own = _own_options(cmd_parser)
    releases = _releases_asked(argv[cmd_at], argv[cmd_at + 1:])
    pasted = argv[cmd_at + 1:cmd_at + 2] in (["vllm"], ["serve"])
    if pasted:
        # a pasted line: the parser of the release the command runs answers first
        # (engine_flags.vllm_serve_refusal); upgrade's line must parse under both releases
        from enginecfg.cli.engine_flags import vllm_serve_refusal

        for release in releases:
            refused = vllm_serve_refusal(argv[cmd_at + 1:], release)
            if refused is not None:
                who = f"vLLM {release}: " if argv[cmd_at] == "upgrade" else ""
                sys.stderr.write(f"enginecfg: {who}vllm serve: error: {refused}\n")
                raise SystemExit(2)
    groups: list[list[str]] = []
    keep, aside, unknown = read_vllm_serve_line(argv[cmd_at + 1:], own, groups, release=releases[-1])
    if aside_tokens is not None:
        aside_tokens.extend(t for g in groups for t in g)
    if unknown:
        from enginecfg.cli.engine_flags import serve_table
        from enginecfg.pipeline.suggest import did_you_mean

        bad = unknown[0]
        table = serve_table(releases[-1])
        hint = did_you_mean(bad, [o for o in own | set(table.VLLM_SERVE_OPTIONS) if o.startswith("--")])
        sys.stderr.write(f"enginecfg: error: unknown option {bad}{hint}: neither an enginecfg {argv[cmd_at]} "
                         f"option nor a vllm serve {table.VLLM_VERSION} option (see enginecfg {argv[cmd_at]} "
                         "--help)\n")
        raise SystemExit(2)
    if aside:
        affects = [a.split()[0].split("=")[0] for a in aside
                   if a.split()[0].split("=")[0] in _CHANGES_THE_ANSWER]
        sys.stderr.write("enginecfg: note: set aside vllm serve options that enginecfg does not use: "
                         + ", ".join(aside) + "\n")
        if affects:
            sys.stderr.write("enginecfg: note: " + ", ".join(dict.fromkeys(affects))
                             + " can change what vLLM resolves; enginecfg resolved without "
                             + ("it" if len(set(affects)) == 1 else "them") + "\n")
    return argv[:cmd_at + 1] + keep


def _option_value(tokens: Sequence[str], *names: str) -> str | None:
    """The last value given to one of the options *names* (``--x V``, ``--x=V``, ``--x_y V``)."""
    found = None
    for i, tok in enumerate(tokens):
        name, eq, value = tok.partition("=")
        if not name.startswith("--") or "--" + name[2:].replace("_", "-") not in names:
            continue
        if eq:
            found = value
        elif i + 1 < len(tokens):
            found = tokens[i + 1]
    return found


def _releases_asked(command: str, tokens: Sequence[str]) -> list[str | None]:
    """The releases whose ``vllm serve`` reads a command's pasted line: ``upgrade``'s two
    (``--from``, ``--to``), else the one ``--vllm-version`` or ``$ENGINECFG_VLLM_VERSION`` names
    (None: the default release)."""
    if command == "upgrade":
        from enginecfg.commands.upgrade import DEFAULT_FROM, DEFAULT_TO

        return [_option_value(tokens, "--from") or DEFAULT_FROM, _option_value(tokens, "--to") or DEFAULT_TO]
    from enginecfg.pipeline.releases import env_value

    return [_option_value(tokens, "--vllm-version") or env_value()]


# -- commands ------------------------------------------------------------------------------------

def _releases() -> list[str]:
    from enginecfg.pipeline import rulepacks

    default = rulepacks.default_release()
    return [default] + [r for r in rulepacks.releases() if r != default]


def _pipeline(ns: argparse.Namespace):
    from enginecfg.pipeline.run import Pipeline

    return Pipeline(disable=ns.skip_stage, only=ns.only_stage, gpu_validation=ns.gpu_validation,
                    impact=memory_options(ns), vllm_version=ns.vllm_version, gpu=getattr(ns, "gpu", None),
                    stage_timeout=getattr(ns, "stage_timeout", None))


def _error_line(exc: EngineCfgError, args: dict | None = None) -> str:
    """The one line of a refusal: its status, the stage, the message and the flag it is about."""
    from enginecfg.cli.report import error_text

    where = f" [{exc.stage}]" if exc.stage and exc.stage != "loading" else ""
    return f"enginecfg: {exc.status}{where}: " + error_text(exc, args)


def _model_path(ns: argparse.Namespace, parser_name: str) -> str | None:
    path = ns.path or ns.model_option
    if ns.path and ns.model_option and ns.path != ns.model_option:
        sys.stderr.write(f"enginecfg: error: two models given: {ns.path} and --model {ns.model_option}\n")
        raise SystemExit(2)
    return path


def _model_paths(ns: argparse.Namespace) -> list[str]:
    paths = list(ns.paths)
    if ns.model_option:
        if paths and paths != [ns.model_option]:
            sys.stderr.write(f"enginecfg: error: two models given: {' '.join(paths)} and --model "
                             f"{ns.model_option}\n")
            raise SystemExit(2)
        paths = [ns.model_option]
    return paths


def _cmd_run(ns: argparse.Namespace) -> int:
    from enginecfg.cli import progress
    from enginecfg.pipeline.loading import prefetch_pretrained

    paths = _model_paths(ns)
    if not paths:
        sys.stderr.write("enginecfg: error: run needs a model: a folder holding config.json, or a "
                         "config.json file (see enginecfg run --help)\n")
        return 2
    args = engine_args(ns)
    # a config not cached yet needs the transformers worker: start it now, so that its
    # import runs while this process opens the audit store and builds the pipeline
    try:
        prefetch_pretrained(paths, wait=False)
    except EngineCfgError:
        pass  # the run itself reports it (and records it as a failed run)
    from enginecfg.cli.recording import open_store

    store, code = open_store(ns)
    if code:
        return code
    try:
        pipeline = _pipeline(ns)
    except EngineCfgError as exc:
        sys.stderr.write(_error_line(exc) + "\n")
        return exc.exit_code
    from enginecfg.commands.run import run

    many = len(paths) > 1
    code = 0
    watcher = progress.attach(ns.gpu_validation)
    try:
        for outcome in run(paths, revision=ns.revision, pipeline=pipeline, store=store, **args):
            code = max(code, _report_run(ns, outcome, store, many))
    finally:
        watcher.detach()
        if store is not None:
            store.detach()
    return code


def _report_run(ns: argparse.Namespace, outcome, store, many: bool) -> int:
    """Print one run's outcome; its exit status."""
    code = outcome.exit_code
    doc = outcome.to_dict()
    if ns.require_start and outcome.result is not None:
        from enginecfg.cli.report import start_gate

        refusal = start_gate(outcome.result.facts.get("impact"), outcome.result.vllm_version or _releases()[0],
                             outcome.model)
        if refusal is not None:
            sys.stderr.write(refusal + "\n")
            code = max(code, 1)
    if outcome.error is not None:
        sys.stderr.write(_error_line(outcome.error, engine_args(ns)) + "\n")
        if ns.traceback:
            import traceback

            traceback.print_exception(outcome.error)
    if outcome.record_error is not None:
        sys.stderr.write(f"enginecfg: audit record NOT written: {outcome.record_error}\n")
        if not ns.audit_best_effort and code == 0:
            code = 2
    where = (f"recorded as run {outcome.run_id} in {store.display_url}" if outcome.recorded
             else "not recorded (--no-audit)" if ns.no_audit else "not recorded")
    if ns.json:
        text = json.dumps(doc, default=str) if many else json.dumps(doc, indent=2, default=str)
        sys.stdout.write(text + "\n")
        if outcome.recorded:
            sys.stderr.write(f"enginecfg: {where}\n")
    elif outcome.result is not None:
        from enginecfg.cli.report import print_run

        print_run(outcome.result, where=where, memory=memory_options(ns),
                  extra=getattr(ns, "vllm_serve_extra", None))
    elif outcome.run_id:
        sys.stdout.write(f"run {outcome.run_id}: {doc['status']}; {where}\n")
    return code


def _cmd_gpus(ns: argparse.Namespace) -> int:
    from enginecfg.cli.engine_flags import print_gpus
    from enginecfg.pipeline.models.gpus import GPUS

    if ns.json:
        sys.stdout.write(json.dumps([g.to_dict() for g in GPUS.values()], indent=2) + "\n")
    else:
        print_gpus()
    return 0


def _cmd_stages(ns: argparse.Namespace) -> int:
    from enginecfg.pipeline.plugins import describe_stages

    path = _model_path(ns, "stages")
    try:
        pipeline = _pipeline(ns)
        # loaded by the release's own loader; nothing runs here, so a bad argument is refused now
        cfg = pipeline.rules.load(path, engine_args(ns), ns.revision) if path else None
        rows = describe_stages(pipeline, cfg)
    except EngineCfgError as exc:
        sys.stderr.write(_error_line(exc, engine_args(ns)) + "\n")
        return exc.exit_code
    if ns.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    columns = ["#", "stage", "origin", "after", "before"] + (["applies"] if cfg is not None else [])
    table = [[r["position"], r["name"], r["origin"], ", ".join(r["after"]), ", ".join(r["before"])]
             + (["yes" if r["applies"] else "no"] if cfg is not None else []) for r in rows]
    if ns.csv:
        from enginecfg.cli.tables import write_csv

        write_csv(sys.stdout, columns, table)
        return 0
    from enginecfg.cli.tables import render

    # every stage name is typed back (--skip-stage, --only-stage, after/before): kept whole
    print(render(columns, table, names=(0, 1, 3, 4), title="enginecfg stages, in run order"))
    return 0


def _configure_logs(fmt: str) -> None:
    """stdout carries the run document, so log lines never go there: with ``--log-format``
    they go to stderr; without it, nothing is configured (structlog is not even imported)
    and the library's few log lines (the audit store's) are dropped."""
    if fmt == "off":
        from enginecfg.cli import logs

        logs.quiet()
        return
    import logging

    import structlog

    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def main(argv: Sequence[str] | None = None) -> int:
    from enginecfg.cli.terminal import neutral_streams

    # what people read never carries a control character or a lone surrogate (the stored
    # values and the JSON and CSV output stay exact): errors from the first line on
    with neutral_streams(stdout=False):
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not [t for t in argv if t not in ("--traceback",) and not t.startswith("--log-format")]:
        parser.print_help()
        return 0
    aside: list[str] = []
    try:
        ns = parser.parse_args(_prepare(parser, argv, aside))
    except SystemExit as exc:
        return int(exc.code or 0)
    if getattr(ns, "func", None) is None:
        parser.print_help()
        return 0
    ns.vllm_serve_extra = aside
    if isinstance(getattr(ns, "gpu", None), str) and ns.gpu.strip().lower() in ("help", "list"):
        from enginecfg.cli.engine_flags import print_gpus

        print_gpus()
        return 0
    from enginecfg.cli.terminal import neutral_streams

    machine = bool(getattr(ns, "csv", False)) or getattr(ns, "format", None) == "csv"
    with neutral_streams(stderr=False, machine_stdout=machine):
        _configure_logs(ns.log_format)
        if ns.log_format != "off":
            from enginecfg.cli.logs import attach

            attach(ns.log_format)
        return _call(ns)


def _call(ns: argparse.Namespace) -> int:
    try:
        return ns.func(ns)
    except EngineCfgError as exc:
        sys.stderr.write(_error_line(exc, engine_args(ns)) + "\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("enginecfg: interrupted\n")
        return 130
    except BrokenPipeError:  # the reader (head, less) went away: not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
