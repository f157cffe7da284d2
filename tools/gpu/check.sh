#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh ran where the
# project builds: runs specpipe_cuda_check from gpu-bundle/ (JSON report), then the same
# checks without timings under compute-sanitizer memcheck and racecheck where
# compute-sanitizer exists. Outputs go to $OUT (or gpu-out/). Exit status: non-zero if
# any step failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_cuda_check check
{ nvidia-smi -L 2>&1; ldd "$exe"; } >"$out/environment.txt"

status=0
"$exe" >"$out/cuda_check.json" 2>"$out/cuda_check.stderr" || status=1
echo "cuda_check exit: $status"
if command -v python3 >/dev/null; then
  python3 - "$out/cuda_check.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({"info": r["info"], "summary": r["summary"]}))
for c in r["checks"]:
    print(("PASS " if c["pass"] else "FAIL ") + c["name"], "max_abs=%s max_rel=%s" % (c.get("max_abs"), c.get("max_rel")),
          c.get("error", ""))
for t in r["timings"]:
    print("TIME", json.dumps(t))
PY
else
  cat "$out/cuda_check.json"
fi

sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [[ -n "$sanitizer" ]]; then
  # memcheck: every group. racecheck (shared-memory hazards) is slow; it skips the cuBLASLt
  # GEMMs, which are not ours, and runs our kernels only.
  for tool in memcheck racecheck; do
    groups="elementwise,kv,attention,gemm,sampling"
    [[ $tool == racecheck ]] && groups="elementwise,kv,attention,sampling"
    timeout 240 "$sanitizer" --tool "$tool" --error-exitcode 3 --log-file "$out/$tool.log" \
      "$exe" --no-timing --groups "$groups" >"$out/$tool.json" 2>&1
    rc=$?
    echo "compute-sanitizer $tool exit: $rc ($(tail -n1 "$out/$tool.log" 2>/dev/null))"
    [[ $rc -eq 0 ]] || status=1
  done
else
  echo "compute-sanitizer: not found, skipped"
fi
exit $status
