#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: offload on the
# device (issue 16).
#   1. specpipe_gpu_generate --offload-check: the demo target and a synthetic shape
#      (SHAPE, qwen3-0.6b) with a CONTEXT-token prompt (1000): prefill chunks, decode
#      steps, a verify window and a rollback into the host tier with the oldest blocks on
#      the pinned host tier, streamed through the device ring (2 and 3 slots, copy stream
#      and in line), bit for bit equal to all-on-GPU; ring_slots 1 and unpinnable host
#      memory refused with one clear error each, the model serving after
#      -> $OUT/offload_check.json;
#   With KV_DTYPE=bf16 the same with a BF16 K/V store (pool, ring, host tier), and the
#   BF16 store's logits against the FP32 store's (teacher forced, bounded);
#   2. the engine's offload suite on the device (offload_engine_test with
#      SPECPIPE_TEST_DEVICE=cuda:0: every strategy through a 256-token pool and a host
#      tier == the golden tokens, sampled and long requests == without offload).
# Exit status: non-zero if either failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate offload_check
gpu_engine_env
status=0
timeout "${CHECK_TIMEOUT:-300}" "$exe" --offload-check --synthetic "${SHAPE:-qwen3-0.6b}" --context "${CONTEXT:-1000}" \
  --kv-dtype "${KV_DTYPE:-fp32}" >"$out/offload_check.json" 2>"$out/offload_check.stderr"
rc=$?
[[ $rc -eq 0 ]] || status=1
python3 - "$out/offload_check.json" "$rc" <<'PY' || { echo "offload_check: exit $rc, no report"; tail -n 5 "$out/offload_check.stderr"; }
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r:
    print("offload_check error:", r["error"])
for part in ("target", "synthetic"):
    if part not in r:
        continue
    p = r[part]
    for v in p["variants"]:
        print(f"{p['model']:22s} slots {v['ring_slots']} overlap {str(v['overlap']):5s}: identical {v['bitwise_identical']} "
              f"({p['rows_compared']} rows), ring forwards {v['ring_forwards']}, to host {v['blocks_to_host']}, "
              f"back {v['blocks_to_pool']}")
    print(f"{p['model']:22s} errors: {json.dumps(p['errors'])}")
    if "vs_fp32_kv" in p:
        e = p["vs_fp32_kv"]
        print(f"{p['model']:22s} {p['kv_dtype']} K/V vs fp32: max |dlogit| {e['max_abs_logit_diff']:.4g} (largest logit "
              f"{e['max_abs_logit']:.3g}, tol {e['tolerance_of_max_logit']} of it), mean {e['mean_abs_logit_diff']:.3g}, "
              f"argmax same {e['argmax_identical_rows']}/{e['rows_compared']}, pass {e['pass']}")
print("offload_check pass:", r.get("pass"), "exit", sys.argv[2])
PY
t=offload_engine_test
[[ "${KV_DTYPE:-fp32}" == bf16 ]] && export SPECPIPE_TEST_KV_DTYPE=bf16  # the suite's pipelines too
timeout "${SUITE_TIMEOUT:-300}" "$bundle/bin/$t" --gtest_brief=1 >"$out/$t.txt" 2>&1
rc=$?
echo "$t exit: $rc ($(grep -E '^\[  (PASSED|FAILED)' "$out/$t.txt" | tr '\n' ' '))"
[[ $rc -eq 0 ]] || { status=1; grep -E "Failure|FAILED|error|Expected|Which is|actual" "$out/$t.txt" | head -n 30; }
exit $status
