#!/usr/bin/env python3
"""Write the release room's rule data (``pipeline/releases/rules.json``) from the dated timeline
(``pipeline/releases/TIMELINE.md``, beside it): every release from the first one enginecfg speaks for to
the last, in order, each with the rules it adds on top of the release before it.

    python tools/make_release_rules.py           # rewrite pipeline/releases/rules.json
    python tools/make_release_rules.py --check   # exit 1 if it is stale

A rule entry is ``{"id", "what", "where", "pr"}``: its id (a row naming several ids, ``S4, S5,
S6`` or ``C1b / F1a``, gives one entry per id, with the row's words), what changes, the vLLM
function, and the PR or release note (None where the timeline has none). The first release is
the base every other one is composed on; it adds no rule.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "pipeline" / "releases" / "TIMELINE.md"
TARGET = ROOT / "pipeline" / "releases" / "rules.json"
BASE = "0.19.0"
HEADING = re.compile(r"^## (\d+\.\d+\.\d+)\s*$")
RULE_ID = re.compile(r"\b[CBSKFG]-?\d+(?:\.\d+)?[a-z]?\b")


def _cells(line: str) -> list[str]:
    # split a markdown row on the pipes that are not inside backticks
    out, cur, tick = [], "", False
    for ch in line.strip()[1:-1]:
        if ch == "`":
            tick = not tick
        if ch == "|" and not tick:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def parse(text: str) -> list[dict]:
    releases = [{"release": BASE, "rules": []}]
    current = None
    for line in text.splitlines():
        m = HEADING.match(line)
        if m:
            current = {"release": m.group(1), "rules": []}
            releases.append(current)
            continue
        if line.startswith("## "):
            current = None
            continue
        if current is None or not line.startswith("|"):
            continue
        cells = _cells(line)
        first = cells[0]
        if first in ("rule", "") or set(first) <= set("-: "):
            continue
        pr = cells[3] if len(cells) > 3 and cells[3] not in ("—", "-", "") else None
        for rid in RULE_ID.findall(first.replace("*new*", "")):
            current["rules"].append({"id": rid, "what": cells[1], "where": cells[2] if len(cells) > 2 else "",
                                     "pr": pr})
    return releases


def render(releases: list[dict]) -> str:
    return json.dumps({"base": BASE, "releases": releases}, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render(parse(SOURCE.read_text()))
    if "--check" in argv:
        return 0 if TARGET.exists() and TARGET.read_text() == text else 1
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
