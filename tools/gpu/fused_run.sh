#!/usr/bin/env bash
# On the GPU machine after tools/gpu/bundle.sh: one pass of the kernel checks
# (specpipe_cuda_check with timings, no sanitizers) and tools/gpu/graph_bench.sh for the
# Llama-3-8B shape and the demo pair with graphs. Outputs go to $OUT (or gpu-out/).
# Environment: CHECK_TIMEOUT (90), SYNTHETIC_RUNS, SYN_TIMEOUT (100), GEN_TIMEOUT (170).
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_cuda_check fused_run
status=0
timeout "${CHECK_TIMEOUT:-90}" "$exe" >"$out/cuda_check.json" 2>"$out/cuda_check.stderr" || status=1
echo "cuda_check exit: $status (t=${SECONDS}s)"
python3 - "$out/cuda_check.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps(r.get("summary")))
for c in r["checks"]:
    if not c["pass"] or "fused" in c["name"] or "attention" in c["name"]:
        print(("PASS " if c["pass"] else "FAIL ") + c["name"], c.get("max_rel", ""), c.get("error", ""), c.get("note", ""))
for t in r["timings"]:
    if "attention" in t["name"] or "rms" in t["name"]:
        print("TIME", json.dumps(t))
PY
SYNTHETIC_RUNS="${SYNTHETIC_RUNS:-llama3-8b:--synthetic,llama3-8b}" SYN_TIMEOUT="${SYN_TIMEOUT:-100}" \
  GEN_TIMEOUT="${GEN_TIMEOUT:-170}" MEMCHECK_AFTER=0 bash tools/gpu/graph_bench.sh || status=1
exit $status
