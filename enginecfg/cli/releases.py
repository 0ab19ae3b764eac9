"""``enginecfg releases``: the vLLM releases enginecfg speaks for, each with the dated rules it
adds (:func:`enginecfg.commands.releases.list_releases`)."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["register", "print_releases"]


def register(sub) -> None:
    p = sub.add_parser("releases", help="the vLLM releases enginecfg speaks for, with the rules each one adds",
                       description="Every vLLM release --vllm-version, ENGINECFG_VLLM_VERSION, upgrade --from/--to "
                                   "and check-log accept, oldest first: the release before it, the dated rules it "
                                   "adds on top of that one (the rule id, what changes, the vLLM change behind "
                                   "it), the option table its vllm serve lines are read with, and whether every "
                                   "decision follows its own rules yet.")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.set_defaults(func=_cmd_releases)


def print_releases(listing) -> None:
    from enginecfg.cli.tables import paragraph

    out = []
    for r in listing.releases:
        notes = [f"after {r.before}" if r.before is not None else "the first"]
        if r.name == listing.default:
            notes.append("the default")
        notes.append("decides the block size at engine start" if r.decides_at_engine_start
                     else "decides the block size at config time")
        if r.table_note is not None:
            notes.append(f"serve options read with {r.table_release}'s table")
        if not r.exact:
            notes.append(f"{len(r.unwired)} of the rules it differs by from {r.reference} not wired yet")
        out.append(f"{r.name} ({'; '.join(notes)})")
        if not r.adds:
            out.append(paragraph("no rule of its own", indent="  "))
        for d in r.adds:
            pr = f" [{d.pr}]" if d.pr else ""
            out.append(paragraph(f"{d.id}: {d.what}{pr}", indent="  ", hanging="      "))
    print("\n".join(out))


def _cmd_releases(ns: argparse.Namespace) -> int:
    from enginecfg.commands.releases import list_releases

    listing = list_releases()
    if ns.json:
        sys.stdout.write(json.dumps(listing.to_dict(), indent=2) + "\n")
    else:
        print_releases(listing)
    return 0
