"""``enginecfg check-log LOG|-``: the command line of :func:`enginecfg.commands.check_log`.

It reads the log from a file or from standard input (``-``), calls the library function and
prints the result: what the log is of and what it was compared under, then one row per logged
line that states a decision or a figure (the line, what it says, what enginecfg works out,
whether they agree), the reasons, the memory beside the estimate, and the explanations of the
lines users ask about.  ``--json`` prints the result's ``to_dict()``.  The run is recorded in
the audit store with the observation as a fact of its document (``--no-audit``, ``--db``,
``--actor``).

Exit status: 0 when every line that can be checked exactly agrees (an estimate may be off), 1
when one does not, 2 for bad input (no log lines, a file that cannot be read, a model that
cannot be resolved, an unknown release or GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["register", "print_check"]


def register(sub) -> None:
    p = sub.add_parser("check-log", help="read a vLLM start-up log and check every figure it logs",
                       description="Read a vLLM start-up log as pasted (docker, k8s or journald prefixes, colours, "
                                   "ranks, wrapped lines) and put each line that states a decision or a figure "
                                   "beside what enginecfg works out for the same deployment: agrees, or differs "
                                   "and why. The KV-cache figures are checked given the logged memory.")
    p.add_argument("log", metavar="LOG", help="the log file, or - to read it from standard input")
    p.add_argument("--model", default=None, metavar="PATH|REPO_ID",
                   help="where the model's config is, when the logged path is not on this machine")
    p.add_argument("--vllm-version", dest="vllm_version", default=None, metavar="V",
                   help="the release the log is of, when it does not say (it wins over the log's own)")
    p.add_argument("--gpu", default=None, metavar="PRESET",
                   help="the GPU the log is of, when it does not say (`enginecfg gpus` lists them)")
    p.add_argument("--revision", default=None, metavar="REV",
                   help="a branch, tag or commit of the Hugging Face repo (with a repo id only)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-audit", action="store_true", help="do not record the run in the audit store")
    p.add_argument("--db", default=None, metavar="URL",
                   help="audit database URL (default: ENGINECFG_DB, else a SQLite file in the user data directory)")
    p.add_argument("--actor", default=None, metavar="NAME",
                   help="who runs this, recorded with the run (default: ENGINECFG_ACTOR)")
    p.set_defaults(func=_cmd)


#: the most of a log read: a start-up log is kilobytes, a day of a server's journal megabytes;
#: a log without end (``/dev/zero``, a pipe that never closes) is refused at this bound
LOG_LIMIT = 64 << 20


def _read(path: str) -> tuple[str, str]:
    from enginecfg.store.files import TooLarge, size_text

    try:
        if path == "-":
            data = sys.stdin.buffer.read(LOG_LIMIT + 1)
            if len(data) > LOG_LIMIT:
                raise TooLarge(f"it holds more than the {size_text(LOG_LIMIT)} allowed")
            return data.decode("utf-8", errors="replace"), "standard input"
        from enginecfg.store.files import read_bounded

        return read_bounded(path, LOG_LIMIT).decode("utf-8", errors="replace"), path
    except TooLarge as exc:
        raise InvalidInputError(f"invalid log (LOG): {path!r} is not a start-up log: {exc}; give the log's "
                                "start-up lines", field="log") from None
    except OSError as exc:
        raise InvalidInputError(f"invalid log (LOG): cannot read {path!r}: {exc.strerror or exc}; give a file "
                                "or - for standard input", field="log") from None


def _cmd(ns: argparse.Namespace) -> int:
    from enginecfg.cli.recording import open_store
    from enginecfg.commands import check_log

    text, source = _read(ns.log)
    store, code = open_store(ns)
    if code:
        return code
    try:
        c = check_log(text, model=ns.model, vllm_version=ns.vllm_version, gpu=ns.gpu, source=source,
                      revision=ns.revision)
    finally:
        if store is not None:
            store.detach()
    recorded = None
    if store is not None and c.run_id and store.last_run_id == c.run_id and not store.write_failed:
        recorded = f"recorded as run {c.run_id} in {store.display_url}"
        sys.stderr.write(f"enginecfg: {recorded}\n")
    elif store is not None and store.write_failed:
        sys.stderr.write(f"enginecfg: audit record NOT written: {store.record_error}\n")
    if ns.json:
        sys.stdout.write(json.dumps(c.to_dict(), indent=2, default=str) + "\n")
    else:
        print_check(c, recorded=recorded)
    if c.error is not None:
        if ns.json:
            sys.stderr.write(f"enginecfg: error: {' '.join(str(c.error).split())}\n")
        return c.error.exit_code
    return 1 if any(ch.agrees is False and ch.exact for ch in c.checks) else 0


def _value(v: Any) -> str:
    if isinstance(v, dict) and set(v) >= {"low", "high"}:
        return f"{_value(v['low'])} to {_value(v['high'])}"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_value(x) for x in v)
    return "-" if v is None else str(v)


def _verdict(ch) -> str:
    if ch.agrees is None:
        return "not checked"
    if not ch.exact:  # within 5%, or inside the estimate's range: the why line says which
        return "estimate agrees" if ch.agrees else "estimate off"
    return "agrees" if ch.agrees else "DIFFERS"


def print_check(c, *, recorded: str | None = None) -> None:
    """The report of a :class:`~enginecfg.commands.LogCheck`."""
    from enginecfg.cli.tables import paragraph, render

    log, start = c.log, c.start
    out = [paragraph(f"{c.source}: {log.lines:,} lines, {len(log.starts)} start{'s' if len(log.starts) != 1 else ''} "
                     f"of vLLM; lines {start.first_line:,}-{start.last_line:,} compared"
                     + (f" (the last start)" if len(log.starts) > 1 else "") + ".")]
    release = f"vLLM {c.logged_release}" if c.logged_release else "vLLM (release not named)"
    out.append(paragraph(f"Logged: {release}, model {c.model or '-'}, on the {c.gpu}; compared under "
                         f"vLLM {c.vllm_version}" + (f" ({recorded})" if recorded else "") + "."))
    for note in (c.release_note, c.gpu_note):
        if note:
            out.append(paragraph(f"Note: {note}.", hanging="  "))
    args = ", ".join(f"{k}={v}" for k, v in c.engine_args.items()) or "none (the defaults)"
    out.append(paragraph(f"Engine arguments ({c.arguments_from}): {args}.", hanging="  "))
    if c.options is not None and (c.options.kv_cache_memory or c.options.gpu_memory_utilization != 0.9
                                  or c.options.num_gpu_blocks_override):
        mem = c.options
        flags = [f"gpu_memory_utilization={mem.gpu_memory_utilization:g}"]
        if mem.kv_cache_memory:
            flags.append(f"kv_cache_memory_bytes={mem.kv_cache_memory:,}")
        if mem.num_gpu_blocks_override:
            flags.append(f"num_gpu_blocks_override={mem.num_gpu_blocks_override:,}")
        out.append(paragraph("Memory flags: " + ", ".join(flags) + ".", hanging="  "))
    if c.set_aside:
        out.append(paragraph("Set aside (enginecfg does not take them): " + ", ".join(c.set_aside) + ".",
                             hanging="  "))
    if c.error is not None:
        names = dict.fromkeys(f"{f.name} (line {f.line})" for f in start.logged
                              if f.kind not in ("engine_config", "model", "release"))
        out.append(paragraph("Logged: " + ", ".join(names) + "."))
        out.append(paragraph(f"Not compared: {' '.join(str(c.error).split())}"))
        print("\n".join(out))
        return
    rows = [[ch.line, ch.name, _value(ch.logged), _value(ch.expected), _verdict(ch)] for ch in c.checks]
    if rows:
        out.append(render(["line", "logged line", "logged", "enginecfg", ""], rows, names=(0, 4),
                          title="Each logged decision and figure beside enginecfg's answer:"))
        out.append("Why:")
        for ch in c.checks:
            text = f"- line {ch.line} {ch.name}: {ch.why}"
            if ch.implied is not None:
                mem = ch.implied.get("kv_cache_memory") or {}
                blocks = ch.implied.get("blocks") or {}
                if mem:
                    count = (f"{blocks['low']:,}" if blocks.get("low") == blocks.get("high")
                             else f"{blocks.get('low'):,} to {blocks.get('high'):,}")
                    text += f" (it implies {count} blocks: {mem['low']:,} to {mem['high']:,} bytes of KV cache)"
            out.append(paragraph(text, hanging="    "))
    else:
        out.append("No logged line could be compared.")
    obs = c.observation
    memory = obs.memory if obs is not None else {}
    pred = memory.get("predicted") if memory else None
    logged = (memory.get("logged") or {}).get("available_kv_cache_memory") if memory else None
    if pred:
        line = (f"Memory: predicted from the config, the flags and the GPU alone: "
                f"{pred['available_kv_cache_memory'] / 2**30:.2f} GiB")
        if "low" in pred and "high" in pred:
            line += f" ({pred['low'] / 2**30:.2f} to {pred['high'] / 2**30:.2f} GiB)"
        line += f" for the KV cache ({pred['source']})"
        if logged:
            line += (f"; logged {logged['gib']} GiB ({logged['low']:,} to {logged['high']:,} bytes)")
            if memory.get("error") is not None:
                line += f": {memory['error'] * 100:+.1f}%"
        implied = (memory.get("implied") or {}).get("kv_cache_memory")
        if implied and not logged:
            line += (f"; the logged figures imply {implied['low'] / 2**30:.2f} to {implied['high'] / 2**30:.2f} GiB "
                     f"({implied['low']:,} to {implied['high']:,} bytes)")
        out.append(paragraph(line + "."))
    for text in (obs.explanations if obs is not None else ()):
        out.append(paragraph(text))
    print("\n".join(out))
