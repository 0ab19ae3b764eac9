#!/usr/bin/env python3
"""Write timeline.json from TIMELINE.md: {release: [rule ids]} in release order.

    python tests/data/releases/make_timeline_json.py          # rewrite timeline.json
    python tests/data/releases/make_timeline_json.py --check  # exit 1 if it is stale

A release is a `## X.Y.Z` heading; its rules are the ids in the first column of the table rows
under it, up to the next `## ` heading (`| C4a | ...`, `| C1b / F1a | ...`, `| S4, S5, S6 | ...`).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADING = re.compile(r"^## (\d+\.\d+\.\d+)\s*$")
RULE_ID = re.compile(r"\b[CBSKFG]-?\d+(?:\.\d+)?[a-z]?\b")


def parse(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    release = None
    for line in text.splitlines():
        m = HEADING.match(line)
        if m:
            release = m.group(1)
            out[release] = []
            continue
        if line.startswith("## "):
            release = None
            continue
        if release is None or not line.startswith("|"):
            continue
        first = line.split("|")[1].strip()
        if first in ("rule", "") or set(first) <= set("-: "):
            continue
        out[release].extend(RULE_ID.findall(first.replace("*new*", "")))
    return out


def render(timeline: dict[str, list[str]]) -> str:
    lines = ["{"]
    items = list(timeline.items())
    for i, (rel, ids) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        lines.append(f' "{rel}": {json.dumps(ids)}{comma}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = render(parse((HERE / "TIMELINE.md").read_text()))
    target = HERE / "timeline.json"
    if "--check" in argv:
        return 0 if target.exists() and target.read_text() == text else 1
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
