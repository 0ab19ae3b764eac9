#!/usr/bin/env bash
# The held-out 0.34.0 answers (issue 34, items 10 and 13): write the cases, run the real vLLM
# 0.34.0 on them (config time only: --no-build), keep the answers next to the cases.
#   REF: the folder holding venv34 (shared/oracle34/README.md says how to build it)
#   ORACLE34: shared/oracle34 (run_oracle34.py and its platform plugin)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REF="${REF:-/work/ref}"
ORACLE34="${ORACLE34:-$HERE/../../../../../shared/oracle34}"
python3 "$HERE/make_heldout.py"
cd "$ORACLE34"
"$REF/venv34/bin/python" run_oracle34.py "$HERE/cases.json" -o "$HERE/heldout-034.json" --no-build \
    --cache-dir "${ORACLE34_CACHE:-$REF/cache34}"
# no machine paths in the answers: this folder becomes $HELDOUT (the test puts it back)
python3 - "$HERE/heldout-034.json" "$HERE" <<'PY'
import sys
path, here = sys.argv[1], sys.argv[2].rstrip("/")
text = open(path).read().replace(here + "/", "$HELDOUT/")
open(path, "w").write(text)
PY
