#!/usr/bin/env bash
# vLLM's answers to --runner generate / draft (issue 33 review): the 0.19.0 oracle and the 0.34.0
# oracle (config time only) on cases.json, reduced to the fields the test reads (answers.json).
#   REF: the folder holding venv19, tf523-overlay, venv34 and cache34 (the oracles' READMEs)
#   SHARED: the shared folder holding oracle/ and oracle34/
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
: "${REF:?set REF}" "${SHARED:?set SHARED}"
tmp="$(mktemp -d)"
(cd "$SHARED/oracle" && "$REF/venv19/bin/python" run_oracle.py "$HERE/cases.json" --extra-path "$REF/tf523-overlay" -o "$tmp/019.json")
(cd "$SHARED/oracle34" && "$REF/venv34/bin/python" run_oracle34.py "$HERE/cases.json" --no-build -o "$tmp/034.json" --cache-dir "$REF/cache34")
python3 - "$tmp" "$HERE/answers.json" <<'PY'
import json, sys
tmp, out = sys.argv[1], sys.argv[2]
keep = {}
for release, name in (("0.19.0", "019.json"), ("0.34.0", "034.json")):
    doc = json.load(open(f"{tmp}/{name}"))
    rows = []
    for r in doc["results"] if isinstance(doc, dict) else doc:
        err, final = r.get("error"), r.get("final") or {}
        mc, cc = final.get("model_config") or {}, final.get("cache_config") or {}
        rows.append({"name": r["name"],
                     "error": None if not err else {"type": err.get("type"), "message": str(err.get("message"))[:300]},
                     "runner_type": mc.get("runner_type"), "convert_type": mc.get("convert_type"),
                     "enable_prefix_caching": cc.get("enable_prefix_caching"), "block_size": cc.get("block_size")})
    keep[release] = rows
json.dump(keep, open(out, "w"), indent=1)
PY
