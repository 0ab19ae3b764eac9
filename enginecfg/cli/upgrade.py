"""``enginecfg upgrade``: the command line of :func:`enginecfg.commands.upgrade`.

It parses the engine and memory flags (``explain``'s), resolves the model under the two
releases ``--from`` and ``--to`` name, and prints the decisions side by side with the rule
behind each change, then the KV capacity, the concurrency and whether each release starts;
``--json`` prints the result's ``to_dict()``.  Exit status: 0 when both releases resolve the
setting, else the highest of their refusals' (1 rejected, 2 bad input), as ``run`` maps them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from enginecfg.cli.engine_flags import add_engine_flags, add_memory_flags, engine_args, memory_options
from enginecfg.cli.numbers import concurrency as _fmt_conc

__all__ = ["register", "print_upgrade"]

_GIB = 2**30


def _value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _ratio(r: float | None) -> str:
    return "" if r is None else f"{r:.2f}x"


def _side_title(side) -> str:
    if side.error is not None:
        return f"vLLM {side.release} refuses this setting"
    if side.starts is False:
        return f"vLLM {side.release} resolves it but would not start"
    if side.starts is None:
        return f"vLLM {side.release} resolves it; whether it starts was not worked out"
    return f"vLLM {side.release} resolves it and starts"


def print_upgrade(u) -> None:
    """The report of an :class:`~enginecfg.commands.upgrade.Upgrade`, at the terminal's width."""
    from enginecfg.cli.report import error_text
    from enginecfg.cli.tables import paragraph, render

    a, b = u.from_side, u.to_side
    flags = " ".join(f"{k}={v}" for k, v in u.engine_args.items())
    out = [paragraph(f"{u.model}: vLLM {a.release} -> {b.release} on {u.gpu}"
                     + (f", {flags}" if flags else "") + ".")]
    for side in (a, b):
        line = _side_title(side) + "."
        if side.error is not None:
            line = f"{_side_title(side)}: {side.error.status}: " + error_text(side.error, u.engine_args)
        elif side.starts is False:
            line = f"{_side_title(side)}: {side.start_error}"
        elif side.starts is None:
            line = f"{_side_title(side)}: {side.start_unknown}"
        out.append(paragraph(f"- {line}", hanging="  "))
    if u.fields:
        # the changed mark ends the decision's name: a column of its own would need a header
        rows = [[f.field + (" *" if f.changed else ""), _value(f.value_from), _value(f.value_to)]
                for f in u.fields]
        out.append("")
        out.append(render(["decision", a.release, b.release], rows, names=(0,),
                          title="Decisions (* changed):"))
    if u.changed:
        out.append("")
        out.append("Why they changed (release [rule in RULES.md]):")
        for f in u.changed:
            out.append(paragraph(f"- {f.field} {_value(f.value_from)} -> {_value(f.value_to)}: {f.why}",
                                 hanging="    "))
            if f.detail and f.field.startswith("startup."):
                out.append(paragraph(f"{b.release}: {f.detail}", indent="    "))
    cap = u.capacity
    if a.impact is not None or b.impact is not None:
        mem = [s.impact.memory if s.impact is not None else None for s in (a, b)]
        rows = [["KV-cache memory", *(f"{m.kv_cache_memory / _GIB:,.2f} GiB" if m else "-" for m in mem), ""],
                ["GPU KV cache size (tokens)", _value(cap.kv_tokens[0]), _value(cap.kv_tokens[1]),
                 _ratio(cap.kv_tokens_ratio)],
                ["blocks", _value(cap.num_blocks[0]), _value(cap.num_blocks[1]), _ratio(cap.num_blocks_ratio)],
                [f"concurrency at max_model_len ({_value(cap.max_model_len[1] or cap.max_model_len[0])})",
                 _fmt_conc(cap.max_concurrency[0]) if cap.max_concurrency[0] is not None else "-",
                 _fmt_conc(cap.max_concurrency[1]) if cap.max_concurrency[1] is not None else "-",
                 _ratio(cap.max_concurrency_ratio)]]
        for n, (x, y) in cap.concurrency.items():
            rows.append([f"concurrency at {n:,} tokens", _fmt_conc(x) if x is not None else "-",
                         _fmt_conc(y) if y is not None else "-", _ratio(cap.concurrency_ratio(n))])
        rows.append(["starts", _value(cap.starts[0]), _value(cap.starts[1]), ""])
        out.append("")
        out.append(render(["", a.release, b.release, "ratio"], rows, names=(0, 1, 2, 3),
                          title=f"KV cache and concurrency on {u.gpu} (each release's own memory defaults):"))
        for rule in u.capacity_rules:
            out.append(paragraph(f"- {rule.text()}", hanging="    "))
        for side, err in zip((a, b), cap.start_error):
            if err:
                out.append(paragraph(f"{side.release} would stop at start-up: {err}", hanging="  "))
    print("\n".join(out))


def register(sub) -> None:
    from enginecfg.commands.upgrade import DEFAULT_FROM, DEFAULT_TO
    from enginecfg.pipeline import rulepacks

    known = ", ".join(rulepacks.releases())
    up = sub.add_parser("upgrade", help="what moving to another vLLM release changes for a model and setting",
                        description="Resolve a model under two vLLM releases (same engine flags, same GPU and "
                                    "memory flags) and show every decision side by side, each change tied to "
                                    "the rule and release behind it, with the KV capacity, the concurrency "
                                    "and whether each release starts. Nothing is recorded in the audit store.")
    up.add_argument("path", help="a model folder holding config.json, a config.json file, or a Hugging Face "
                                 "repo id (org/name)")
    up.add_argument("--from", dest="from_version", default=DEFAULT_FROM, metavar="VERSION",
                    help=f"the release deployed now: {known} (default {DEFAULT_FROM})")
    up.add_argument("--to", dest="to_version", default=DEFAULT_TO, metavar="VERSION",
                    help=f"the release to move to: {known} (default {DEFAULT_TO})")
    add_engine_flags(up)
    add_memory_flags(up)
    up.add_argument("--json", action="store_true", help="print the comparison as JSON")
    up.set_defaults(func=_cmd_upgrade)


def _cmd_upgrade(ns: argparse.Namespace) -> int:
    from enginecfg.cli.report import error_text
    from enginecfg.commands.upgrade import upgrade
    from enginecfg.pipeline.run import release_from_env

    release_from_env()  # --from and --to name the releases; a bad setting is refused all the same
    u = upgrade(ns.path, from_version=ns.from_version, to_version=ns.to_version, revision=ns.revision,
                **memory_options(ns), **engine_args(ns))
    if ns.json:
        sys.stdout.write(json.dumps(u.to_dict(), indent=2, default=str) + "\n")
    else:
        print_upgrade(u)
    for side in (u.from_side, u.to_side):
        if side.error is not None:
            sys.stderr.write(f"enginecfg: vLLM {side.release}: {side.error.status}: "
                             + error_text(side.error, u.engine_args) + "\n")
    return u.exit_code
