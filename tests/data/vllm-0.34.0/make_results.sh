#!/usr/bin/env bash
# The commands that made results/*.json: the unmodified vLLM 0.34.0 oracle of
# shared/oracle34 (run_oracle34.py, its emulated-CUDA platform plugin), through
# make_results_device.py (three more GPU stand-ins, needed on capability 10.0; see its
# docstring), run with a venv built
# as shared/oracle34/README.md says (vLLM 0.34.0 wheel, its requirements with
# flashinfer-python==0.7.4 in place of the 0.7.3 pin, transformers 5.22.2 resolved).
#
#   REF=/path/holding/venv34 bash tests/data/vllm-0.34.0/make_results.sh [step ...]
#
# Steps (default: all): extra-h200 public-b200 public-a100 subset-l40s subset-h100
#                       mla-h200 mla-b200 mla-a100 probes-h200 offline-b200
# Each takes 10-20 minutes on two cores. The device is emulated: only the device queries
# (name, capability, memory, SM count) are answered; backend choice, kernel block sizes and
# every decision are vLLM's own code. The KV budgets are explicit (2, 17, 64, 500 GiB).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ORACLE="$(cd "$HERE/../../../../shared/oracle34" && pwd)"
PY="${REF:?set REF to the folder holding venv34}/venv34/bin/python"
CACHE="${ORACLE34_CACHE:-$REF/o34/cache}"
OUT="$HERE/results"
run() {  # run NAME CASES [oracle options...]; the result is committed gzipped
  local name=$1 cases=$2; shift 2
  (cd "$ORACLE" && nice "$PY" "$HERE/make_results_device.py" "$cases" -o "$OUT/$name.json" \
      --cache-dir "$CACHE" --all-logs "$@")
  gzip -n -9 -f "$OUT/$name.json"
}
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(extra-h200 public-b200 public-a100 subset-l40s
  subset-h100 mla-h200 mla-b200 mla-a100 probes-h200 offline-b200)
B200=(--gpu-name "NVIDIA B200" --capability 10.0 --gpu-mem-mib 183359)
A100=(--gpu-name "NVIDIA A100-SXM4-80GB" --capability 8.0 --gpu-mem-mib 81920)
for s in "${steps[@]}"; do
  case $s in
    # the fixtures' other argument sets, on the H200 of public-034.json
    extra-h200)  run extra-h200 "$HERE/cases/extra.json" ;;
    # B200: FlashInfer's TRT-LLM kernels taken as usable (the cubins present, or NVIDIA's
    # artifactory reachable at start-up, as on a deployment with network access)
    public-b200) VLLM_HAS_FLASHINFER_CUBIN=1 ORACLE_VLLM_NUM_SMS=148 run public-b200 \
                   "$ORACLE/cases/public.json" "${B200[@]}" ;;
    public-a100) ORACLE_VLLM_NUM_SMS=108 run public-a100 "$ORACLE/cases/public.json" "${A100[@]}" ;;
    subset-l40s) ORACLE_VLLM_NUM_SMS=142 run subset-l40s "$HERE/cases/subset.json" \
                   --gpu-name "NVIDIA L40S" --capability 8.9 --gpu-mem-mib 46068 ;;
    subset-h100) run subset-h100 "$HERE/cases/subset.json" \
                   --gpu-name "NVIDIA H100 80GB HBM3" --capability 9.0 --gpu-mem-mib 81559 ;;
    # the MLA model no public case builds (cases/mla.json, configs/deepseek-v2-lite-mla)
    mla-h200)    run mla-h200 "$HERE/cases/mla.json" ;;
    mla-b200)    VLLM_HAS_FLASHINFER_CUBIN=1 ORACLE_VLLM_NUM_SMS=148 run mla-b200 \
                   "$HERE/cases/mla.json" "${B200[@]}" ;;
    mla-a100)    ORACLE_VLLM_NUM_SMS=108 run mla-a100 "$HERE/cases/mla.json" "${A100[@]}" ;;
    # Only for the committed public-b200.json: its first run predates stand-in 4 of
    # make_results_device.py, which changes only the ten deepseek-v2-lite-like cases; they were
    # re-run and spliced in (the file's "spliced" entry says so). A fresh public-b200 needs
    # no splice.
    b200-splice-deepseek)
      VLLM_HAS_FLASHINFER_CUBIN=1 ORACLE_VLLM_NUM_SMS=148 run b200-deepseek \
        "$ORACLE/cases/public.json" "${B200[@]}" --only deepseek-v2-lite-like
      gunzip -f "$OUT/public-b200.json.gz" "$OUT/b200-deepseek.json.gz"
      python3 "$HERE/splice_results.py" "$OUT/public-b200.json" "$OUT/b200-deepseek.json" \
        --why "re-run with make_results_device.py stand-in 4 (CUTLASS MLA workspace on meta)"
      gzip -n -9 -f "$OUT/public-b200.json"; rm "$OUT/b200-deepseek.json" ;;
    # B200 without TRT-LLM: no cubins, NVIDIA's artifactory unreachable (cases/offline.json)
    offline-b200) FLASHINFER_CUBINS_REPOSITORY=http://127.0.0.1:9/ ORACLE_VLLM_NUM_SMS=148 \
                    run offline-b200 "$HERE/cases/offline.json" "${B200[@]}" ;;
    # single cases for rules no public case reaches (cases/probes.json)
    probes-h200) run probes-h200 "$HERE/cases/probes.json" ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
