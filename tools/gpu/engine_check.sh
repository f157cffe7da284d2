#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: the actor
# engine on the device (`device: cuda:0`), checked and timed.
#   1. the engine's golden suites with SPECPIPE_TEST_DEVICE=cuda:0: every public case's
#      greedy output and per-round acceptance for gamma 1/2/4/8 and the long prompts
#      (speculative_golden_test), 32 concurrent requests == solo with the KV freed
#      (concurrent_requests_test), the prefix cache's copy-on-write on the device pool (same),
#      the gamma x block x batch property (speculative_property_test), and the strategy
#      plugins on the device: NWOR staging the rounds' rows out of the device pool, SCV,
#      run-time plugin faults falling back with the outputs still exact (plugin_pipeline_test),
#      and RoPE scaling (linear, llama3, yarn) on the device vs transformers (rope_scaling_golden_test);
#   2. `specpipe generate --device cuda:0` on a prompt (statistics printed);
#   3. `specpipe bench --device cuda:0` (plain vs speculative, medians, JSON);
#   4. compute-sanitizer memcheck of the NWOR staging path and a failing commit's fallback
#      (MEMCHECK=0 skips it; BENCH=0 skips 2 and 3). SUITES="a b" runs those suites only
#      (the SpecPV ones: specpv_test, specpv_long_test; tools/gpu/specpv_check.sh).
# Outputs go to $OUT (or gpu-out/). Exit status: non-zero if a suite failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe engine_check
gpu_engine_env
status=0
for t in ${SUITES:-speculative_golden_test concurrent_requests_test speculative_property_test plugin_pipeline_test rope_scaling_golden_test}; do
  timeout "${SUITE_TIMEOUT:-240}" "$bundle/bin/$t" --gtest_brief=1 >"$out/$t.txt" 2>&1
  rc=$?
  echo "$t exit: $rc ($(grep -E '^\[  (PASSED|FAILED)' "$out/$t.txt" | tr '\n' ' '))"
  [[ $rc -eq 0 ]] || { status=1; grep -E "Failure|FAILED|error" "$out/$t.txt" | head -n 20; }
done
if [[ "${BENCH:-1}" != 0 ]]; then  # BENCH=0: the suites only
  "$exe" generate --device "$SPECPIPE_TEST_DEVICE" --prompt "def fibonacci(n):" --max-tokens 64 2>&1 | tail -n 4
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-300}" "$exe" bench --device "$SPECPIPE_TEST_DEVICE" --json "$out/engine_bench.json" \
    ${BENCH_ARGS:-} >"$out/engine_bench.txt" 2>&1 || status=1
  cat "$out/engine_bench.txt"
fi
if [[ "${MEMCHECK:-1}" != 0 ]]; then
  gpu_memcheck nwor "NWOR on the device" "${MEMCHECK_TIMEOUT:-400}" "$bundle/bin/plugin_pipeline_test" --gtest_brief=1 \
    --gtest_filter='Plugins/StrategyMatrix.SpeculativeGreedyEqualsPlain/1:Faults/RuntimeFault.*kv_write_commit*' ||
    status=1
fi
exit $status
