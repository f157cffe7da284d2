#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (with
# specpipe_specpv_gpu): Quest scores on the device (model/cuda/key_summaries.h) against
# the CPU's (kvstore/block_summaries.h) bit for bit, and the device path (sums and scores
# of every layer, the scores to the host) timed against the host path it replaces (the
# query rows to the host, summed and scored there), for each QUEST_RUNS shape:context pair
# (QUEST_ROWS query rows, QUEST_ITERS iterations) -> $OUT/quest_<shape>_<context>.json.
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
      f"{b['scores_differing']} top {b['layers_with_other_top_blocks']} (pass {r['pass']}, {r['device']})")
PY
done
exit $status
