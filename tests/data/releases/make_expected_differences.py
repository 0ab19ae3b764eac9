#!/usr/bin/env python3
"""Write expected_differences.json: for each release run whose rules enginecfg does not all
switch yet (``Release.unwired``), the fields in which each differing case's answer differs from
its oracle's, as ``tests/test_release_oracles.py`` finds them.  The test holds every case to this
list exactly: a new difference (a regression of a wired rule) fails, and so does one that went
away (the list is then written again, with the rule that removed it wired).

    python tests/data/releases/make_expected_differences.py     # from the repository root
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/: the support modules

from release_oracle_support import RUN_RELEASES, answers, cases  # noqa: E402
from test_release_oracles import KNOWN, differing_fields  # noqa: E402

from enginecfg.pipeline import releases  # noqa: E402

out: dict[str, dict[str, list[str]]] = {}
for release in RUN_RELEASES:
    if not answers(release) or not releases.get(release).unwired:
        continue
    found = {case_id: differing_fields(release, case_id, r) for case_id, r in cases(release)}
    differing = {case_id: fields for case_id, fields in found.items() if fields}
    if differing:
        out[release] = differing
(HERE / "expected_differences.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
