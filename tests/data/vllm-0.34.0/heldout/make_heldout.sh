#!/usr/bin/env bash
# The held-out answers (issue 34, items 10 and 13): write the cases, run the real vLLM 0.34.0
# on them (config time only: --no-build) and vLLM 0.19.0 on the subset cases-019.json, and keep
# the answers next to the cases.
#   REF: the folder holding venv34, venv19 and tf523-overlay (shared/oracle*/README.md say how
#        to build them)
#   SHARED: the shared folder (oracle, oracle34, fixtures)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REF="${REF:-/work/ref}"
SHARED="$(cd "${SHARED:-$HERE/../../../../../shared}" && pwd)"
python3 "$HERE/make_heldout.py"
(cd "$SHARED/oracle34" && "$REF/venv34/bin/python" run_oracle34.py "$HERE/cases.json" -o "$HERE/heldout-034.json" \
    --no-build --cache-dir "${ORACLE34_CACHE:-$REF/cache34}")
(cd "$SHARED/oracle" && "$REF/venv19/bin/python" run_oracle.py "$HERE/cases-019.json" --extra-path "$REF/tf523-overlay" \
    -o "$HERE/heldout-019.json" --cache-dir "${ORACLE19_CACHE:-$REF/cache19}")
# no machine paths in the answers: this folder becomes $HELDOUT (the test puts it back), a
# shared fixture is named relative to the shared folder
python3 - "$HERE" "$SHARED" "$HERE/heldout-034.json" "$HERE/heldout-019.json" <<'PY'
import sys
here, shared = sys.argv[1].rstrip("/"), sys.argv[2].rstrip("/")
for path in sys.argv[3:]:
    text = open(path).read().replace(here + "/", "$HELDOUT/").replace(shared + "/", "")
    open(path, "w").write(text)
PY
