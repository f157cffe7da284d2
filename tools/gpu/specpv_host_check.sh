#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: SpecPV over the
# host tier (issue 17 item 5), in one go, each run's JSON in $OUT:
#   1. specpipe_specpv_gpu --host-bench per RUNS (shape:context:kv_dtype): a 5-token verify
#      window streamed from the pinned host tier (all but the newest 2,048 tokens) vs a
#      partial view of BUDGET tokens read from the pool alone (checked: 0 bytes streamed),
#      and one refresh's view copies -> host_view_<shape>_<context>.json;
#   2. the predicted end-to-end speed-up of exact SpecPV over full-verify speculation at
#      128K-1M from those costs and the demo pair's acceptance -> specpv_host_predict.json
#      and a table (tools/gpu/specpv_host_predict.py).
# Exit status: non-zero if a run failed or a partial window streamed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_specpv_gpu specpv_host_check
gpu_environment specpv_host
status=0
for run in ${RUNS:-llama3.1-8b:32768:bf16 llama3.1-8b:131072:bf16 qwen3-4b:131072:bf16}; do
  IFS=: read -r shape context dtype <<<"$run"
  json="$out/host_view_${shape}_${context}_${dtype}.json"
  timeout "${RUN_TIMEOUT:-90}" "$exe" --host-bench --synthetic "$shape" --context "$context" --kv-dtype "$dtype" \
    --budgets "${BUDGET:-2048}" --ring-slots "${RING_SLOTS:-4}" --iters "${ITERS:-3}" >"$json" 2>"${json%.json}.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  python3 - "$json" <<'PY' || echo "$run: exit $rc, no report"
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r: print(r.get("model"), "error:", r["error"]); sys.exit(0)
print(f"{r['model']:12s} {r['context']:>8d} {r['kv_dtype']}: full (streamed) {r['full_us']/1e3:8.1f} ms, "
      f"partial {r['view_tokens']} tok {r['partial_us']/1e3:6.2f} ms ({r['partial_vs_full']:.4f}x), "
      f"partial streamed {r['partial_streamed_bytes']} B, full streamed {r['full_streamed_bytes_per_forward']/2**30:.2f} GiB, "
      f"view copies {r['view_copy_ms']:.2f} ms ({r['view_copy_bytes']/2**20:.1f} MiB), pass {r['pass']}")
PY
done
python3 tools/gpu/specpv_host_predict.py "$out"/host_view_*.json >"$out/specpv_host_predict.txt" || status=1
cat "$out/specpv_host_predict.txt"
exit $status
