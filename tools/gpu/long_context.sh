#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: the synthetic
# shapes' decode step and verify windows against context length (issue 16, items 1-2),
# everything on the GPU (the host tier is not on the device yet).
# For each shape of SHAPES and context of CONTEXTS: specpipe_gpu_generate --synthetic
# (random BF16 weights, real shapes; contexts past --prefill-max are booked, not
# prefilled) -> $OUT/long_<shape>_<context>.json, and one table line: decode step (us),
# the floor counting weights only and weights + K/V (device-to-device copy rate of the
# same run), the 5-token window relative to one step, graphs vs eager bits, device memory.
# Environment: SHAPES ("llama3.1-8b qwen3-4b qwen3-0.6b"), CONTEXTS ("8192 32768 131072"),
# ITERS (10), RUN_TIMEOUT (120 s a run). Exit status: non-zero if a run failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate long_context
{ nvidia-smi -L 2>&1; cat "$bundle/COMMIT" 2>/dev/null; } >"$out/long_context_environment.txt"
status=0
printf '%-12s %8s %10s %9s %9s %8s %8s %7s %7s %s\n' shape context decode_us floor_us +kv_us vs_floor vs+kv win5 GiB "graph==eager"
for shape in ${SHAPES:-llama3.1-8b qwen3-4b qwen3-0.6b}; do
  for context in ${CONTEXTS:-8192 32768 131072}; do
    json="$out/long_${shape}_${context}.json"
    timeout "${RUN_TIMEOUT:-120}" "$exe" --synthetic "$shape" --context "$context" --iters "${ITERS:-10}" \
      >"$json" 2>"${json%.json}.stderr"
    rc=$?
    [[ $rc -eq 0 ]] || status=1
    python3 - "$json" "$shape" "$context" "$rc" <<'PY' || echo "$shape $context: exit $rc, no report ($(tail -n1 "${json%.json}.stderr"))"
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r:
    print(f"{sys.argv[2]:12s} {sys.argv[3]:>8s} error: {r['error']}")
    sys.exit(0)
g = r["graphs"]
w5 = next(w["relative"] for w in g["windows"] if w["n"] == 5)
same = all(x["bitwise_identical"] for x in r["graph_vs_eager"])
print(f"{sys.argv[2]:12s} {sys.argv[3]:>8s} {g['decode_us']:10.1f} {r['floor_us']:9.1f} {r['floor_with_kv_us']:9.1f} "
      f"{g['decode_us'] / r['floor_us']:8.3f} {g['decode_us'] / r['floor_with_kv_us']:8.3f} {w5:7.3f} "
      f"{r['device_bytes'] / 2**30:7.1f} {same} exit {sys.argv[4]}")
PY
  done
done
exit $status
