#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (with
# specpipe_specpv_gpu): Quest scores on the device (model/cuda/key_summaries.h) against
# the CPU's (kvstore/block_summaries.h) bit for bit, and the device path (sums, scores and
# top-k blocks of every layer, the chosen blocks to the host) timed against the host path
# it replaces (the query rows to the host, summed, scored and ranked there), for each
# QUEST_RUNS shape:context pair (QUEST_ROWS query rows, QUEST_ITERS iterations)
# -> $OUT/quest_<shape>_<context>.json. Then a whole refresh round (tapped window forward
# + retrieval) the host way vs the device way, the chosen blocks compared, for each
# REFRESH_RUNS pair (REFRESH=0 skips) -> $OUT/refresh_<shape>_<context>.json.
# Exit status: non-zero if a check failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_specpv_gpu quest_scores
gpu_environment quest_scores
status=0
printf '%-12s %8s %7s %10s %10s %10s %8s %s\n' shape context blocks host_ms device_ms kernels_ms speedup bitwise
for pair in ${QUEST_RUNS:-llama3.1-8b:32768 llama3.1-8b:131072 qwen3-4b:32768}; do
  shape=${pair%%:*} context=${pair##*:}
  json="$out/quest_${shape}_${context}.json"
  timeout "${RUN_TIMEOUT:-120}" "$exe" --quest --synthetic "$shape" --context "$context" --rows "${QUEST_ROWS:-133}" \
    --iters "${QUEST_ITERS:-5}" >"$json" 2>"${json%.json}.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  python3 - "$json" "$shape" "$context" <<'PY' || echo "$shape $context: exit $rc, no report"
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r: print(sys.argv[2], sys.argv[3], "error:", r["error"]); sys.exit(0)
b = r["bitwise"]
print(f"{sys.argv[2]:12s} {sys.argv[3]:>8s} {r['blocks']:7d} {r['host_path_ms']:10.3f} {r['device_path_ms']:10.3f} "
      f"{r['device_kernels_ms']:10.3f} {r['host_over_device']:8.1f} sums {b['query_sums_differing']} scores "
      f"{b['scores_differing']} top {b['layers_with_other_top_blocks']} device top-k {b['layers_with_other_device_top_blocks']} "
      f"ties {b['tie_cases_differing']} (pass {r['pass']}, {r['device']})")
PY
done
if [[ "${REFRESH:-1}" != 0 ]]; then
  printf '%-12s %8s %7s %9s %12s %12s %14s %s\n' shape context blocks fwd_ms host_ret_ms dev_ret_ms first_host/dev same
  for pair in ${REFRESH_RUNS:-llama3.1-8b:32768}; do
    shape=${pair%%:*} context=${pair##*:}
    json="$out/refresh_${shape}_${context}.json"
    timeout "${RUN_TIMEOUT:-120}" "$exe" --refresh --synthetic "$shape" --context "$context" --rows "${QUEST_ROWS:-133}" \
      --iters "${QUEST_ITERS:-5}" >"$json" 2>"${json%.json}.stderr"
    rc=$?
    [[ $rc -eq 0 ]] || status=1
    python3 - "$json" "$shape" "$context" <<'PY' || { echo "$shape $context refresh: exit $rc, no report"; tail -n 3 "${json%.json}.stderr"; }
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r: print(sys.argv[2], sys.argv[3], "refresh error:", r["error"]); sys.exit(0)
f, t = r["first_refresh_ms"], r["retrieval_ms"]
print(f"{sys.argv[2]:12s} {sys.argv[3]:>8s} {r['blocks']:7d} {r['untapped_forward_ms']:9.2f} {t['host']:12.2f} "
      f"{t['device']:12.2f} {f['host']:7.1f}/{f['device']:.1f} layers differing {r['layers_choosing_differently']} "
      f"(refresh ms host {r['refresh_ms']['host']:.2f} device {r['refresh_ms']['device']:.2f}; pass {r['pass']}, {r['device']})")
PY
  done
fi
exit $status
