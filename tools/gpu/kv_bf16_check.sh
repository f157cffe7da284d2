#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: the BF16 K/V
# store on the device (issue 16: the 1M-token context needs half the bytes of FP32).
#   1. specpipe_cuda_check --groups elementwise,kv,attention (no timings): among its
#      checks, attention over a BF16 pool and window == the FP32 kernels over the same
#      values widened and == the BF16 reference kernel, bit for bit, every launch; the
#      K/V scatter and qk_norm_rope_kv_bf16 == f32_to_bf16 of the FP32 rows
#      -> $OUT/cuda_check_kv.json;
#   2. offload_check.sh with KV_DTYPE=bf16: offload == all-on-GPU bit for bit with a BF16
#      pool, ring and pinned host tier; the BF16 store's logits against the FP32 store's
#      (bounded); the engine's offload suite with kv.dtype bf16;
#   3. the golden suites with kv.dtype bf16 (SUITES, speculative_golden_test): every
#      public case's greedy output == the golden tokens.
# Exit status: non-zero if any step failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_cuda_check kv_bf16_check
status=0
timeout "${CHECK_TIMEOUT:-240}" "$exe" --no-timing --groups elementwise,kv,attention >"$out/cuda_check_kv.json" \
  2>"$out/cuda_check_kv.stderr" || status=1
python3 - "$out/cuda_check_kv.json" <<'PY' || { status=1; echo "cuda_check: no report"; tail -n 5 "$out/cuda_check_kv.stderr"; }
import json, sys
r = json.load(open(sys.argv[1]))
print("cuda_check summary:", json.dumps(r["summary"]))
for c in r["checks"]:
    if not c["pass"] or "BF16" in c["name"] or "bf16" in c["name"]:
        print(("PASS " if c["pass"] else "FAIL ") + c["name"], "mismatches/max_abs", c.get("max_abs"), c.get("note", ""), c.get("error", ""))
PY
KV_DTYPE=bf16 bash "$(dirname "$0")/offload_check.sh" || status=1
gpu_engine_env
export SPECPIPE_TEST_KV_DTYPE=bf16
for t in ${SUITES:-speculative_golden_test}; do
  timeout "${SUITE_TIMEOUT:-240}" "$bundle/bin/$t" --gtest_brief=1 >"$out/${t}_bf16.txt" 2>&1
  rc=$?
  echo "$t (kv.dtype bf16) exit: $rc ($(grep -E '^\[  (PASSED|FAILED)' "$out/${t}_bf16.txt" | tr '\n' ' '))"
  [[ $rc -eq 0 ]] || { status=1; grep -E "Failure|FAILED|error|Expected|Which is" "$out/${t}_bf16.txt" | head -n 20; }
done
exit $status
