#!/usr/bin/env bash
# The commands that made tests/data/vllm-X.Y.Z/ for the releases run here (0.20.0, 0.24.0,
# 0.28.0, 0.32.0): the unmodified vLLM of that release, in its own venv, asked by
# make_release_results.py (the 0.34.0 oracle of shared/oracle34, adapted per release API).
#
#   REF=/folder/for/venvs bash tests/data/releases/make_results.sh 0.24.0 [step ...]
#
# Steps (default: all): venv public examples gemma flags pack (and, for 0.20.0 only, mla)
#   venv     python3.11 -m venv $REF/venvs/vX; pip install the release's wheel, letting pip pick
#            the torch the release pins (a CUDA build), with transformers pinned to the newest
#            release the wheel allows up to 5.23.0 (enginecfg's own): 5.23.0 for 0.20.0-0.28.0,
#            5.19.0 for 0.32.0 (it requires < 5.20)
#   public   the 340 cases of ../vllm-0.34.0/public.json (34 fixture configs x 10 argument sets)
#   examples the README's example models (cases/examples.json)
#   gemma    releases before 0.28.0 read Gemma 4's two head sizes from the text config's global
#            `head_dim`/`global_head_dim`, which transformers 5.15 and later refuse to answer for
#            these configs (AmbiguousGlobalPerLayerAttributeError); their Gemma 4 cases (public
#            and examples) are re-run with transformers 5.5.4 (the newest 5.5 release, the line
#            vLLM 0.19.0's fixtures used for Gemma 4) in front of the venv's and spliced in
#            (`spliced` in the file says which)
#   flags    `vllm serve`'s option table (tools/dump_vllm_serve_flags.py, as for 0.19.0/0.34.0)
#   pack     gzip the answers into tests/data/vllm-X/ (compact JSON, then gzip -n -9)
# Each of public/examples takes 15-40 minutes on two busy cores; run one at a time, niced.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
ORACLE="$(cd "$REPO/../shared/oracle34" && pwd)"
V=${1:?release, e.g. 0.24.0}; shift
PY="${REF:?set REF}/venvs/v$V/bin/python"
OUT="$REF/out/$V"; CACHE="$REF/cache-$V"; DEST="$REPO/tests/data/vllm-$V"
TAG="$(echo "$V" | awk -F. '{printf "%d%02d", $1, $2}')"
mkdir -p "$OUT" "$DEST"
run() { (cd "$OUT" && nice -n 10 "$PY" "$HERE/make_release_results.py" "$@" --cache-dir "$CACHE"); }
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(venv public examples gemma flags pack)
for s in "${steps[@]}"; do
  case $s in
    venv)
      tf=transformers==5.23.0; [ "$V" = 0.32.0 ] && tf=transformers==5.19.0
      python3.11 -m venv "$REF/venvs/v$V"
      pip download "vllm==$V" --no-deps -d "$REF/wheels/$V"
      # the registry's own torch (a CUDA build), never a local CPU wheel a pip config points at
      mkdir -p "$REF/no-find-links"
      PIP_FIND_LINKS="$REF/no-find-links" "$REF/venvs/v$V/bin/pip" install \
          "$(ls "$REF"/wheels/"$V"/*.whl)" "$tf"
      "$REF/venvs/v$V/bin/pip" install --no-deps --target "$REF/tf554-overlay" \
          transformers==5.5.4 huggingface_hub==1.5.0 tokenizers==0.22.2 ;;
    public)   run "$ORACLE/cases/public.json" -o "$OUT/public.json" ;;
    examples) run "$HERE/cases/examples.json" -o "$OUT/examples.json" ;;
    gemma)
      case $V in 0.20.*|0.21.*|0.22.*|0.23.*|0.24.*|0.25.*|0.26.*|0.27.*)
        why="Gemma 4 configs with transformers 5.5.4: this release reads the global head_dim, which transformers >= 5.15 refuses for per-layer Gemma 4 configs"
        run "$ORACLE/cases/public.json" -o "$OUT/gemma-tf554.json" --only gemma \
            --extra-path "$REF/tf554-overlay" --splice-into "$OUT/public.json" --why "$why"
        run "$HERE/cases/examples.json" -o "$OUT/examples-gemma-tf554.json" --only gemma \
            --extra-path "$REF/tf554-overlay" --splice-into "$OUT/examples.json" --why "$why" ;;
      esac ;;
    mla)      # only 0.20.0: its first run predates the MLA-workspace stand-in of
              # make_release_results.py (import_with_workspaces_on_meta); deepseek-v2-lite-like
              # then failed on FlashInfer MLA's import-time CUDA allocation, an oracle artefact
      run "$ORACLE/cases/public.json" -o "$OUT/deepseek-mla.json" --only deepseek \
          --splice-into "$OUT/public.json" \
          --why "re-run with the MLA-workspace stand-in (FlashInfer MLA allocates a CUDA workspace when imported)" ;;
    flags)    (cd "$OUT" && "$PY" "$REPO/tools/dump_vllm_serve_flags.py" dump-oracle "$ORACLE" \
                  "$DEST/vllm_serve_flags.json" > "$OUT/flags.log" 2>&1) \
                || echo "the flag dump failed: $OUT/flags.log" >&2 ;;
    pack)
      # in the order of public.json, each `config_dir` as public.json writes it (a run may ask
      # the same cases in another order, e.g. by argument set, and by absolute folder)
      "$PY" - "$ORACLE/cases/public.json" "$OUT/public.json" <<'PY'
import json, sys
asked = json.load(open(sys.argv[1]))
answers = json.load(open(sys.argv[2]))
by_name = {r["name"]: r for r in answers["results"]}
results = []
for case in asked:
    if case["name"] in by_name:
        results.append(dict(by_name[case["name"]], config_dir=case["config_dir"]))
answers["results"] = results
with open(sys.argv[2], "w") as f:
    f.write(json.dumps(answers, separators=(",", ":"), default=str) + "\n")
PY
      gzip -n -9 -c "$OUT/public.json" > "$DEST/public-$TAG.json.gz"
      if [ -f "$OUT/examples.json" ]; then
        gzip -n -9 -c "$OUT/examples.json" > "$DEST/examples-$TAG.json.gz"
      fi ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
