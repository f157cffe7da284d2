#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: SpecPV (issue 17)
# on the device, checked and timed in one go, each step's output in $OUT as it finishes:
#   1. specpipe_specpv_gpu --check: partial views in the CUDA forward vs the CPU backend's
#      partial view forward (logits within the GPU tolerance), a whole view == the full
#      forward bit for bit, graphed == eager views, query taps, device block summaries ==
#      the pool's keys, bad views refused -> specpv_check.json;
#   1b. Quest scores on the device vs the CPU's, bit for bit, and timed (quest_scores.sh,
#      QUEST_RUNS; QUEST=0 skips) -> quest_<shape>_<context>.json;
#   2. the SpecPV engine suites with a device pipeline (engine_check.sh, SUITES):
#      specpv_test (exact == golden tokens with partial rounds and rollbacks asserted,
#      concurrent requests, approximate labelled, refusals, garbage answers);
#   3. partial vs full verify-window cost on synthetic shapes (BENCH_SHAPES x
#      BENCH_CONTEXTS, budgets BUDGETS) -> view_<shape>_<context>.json and a table, and
#      over a BF16 K/V store (BF16_RUNS shape:context pairs) -> view_bf16_*.json;
#   4. end to end on the demo pair, the 7,000-token golden prompt (E2E_TOKENS new tokens,
#      EOS ignored, median of E2E_REPEAT): `specpipe bench` per config, each with its own
#      plain baseline in the same process: full-verify speculation, SpecPV exact and
#      approximate at E2E_BUDGETS, the prefix cache off in every row -> e2e_<config>.json / .txt;
#   5. specpv_long_test (slow; LONG=0 skips): both long prompts and every golden case.
# At the end everything in $OUT is packed into $OUT/specpv_results.tgz (the rest removed).
# Exit status: non-zero if a check or suite failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_specpv_gpu specpv_check
gpu_engine_env
gpu_environment specpv
status=0

timeout "${CHECK_TIMEOUT:-120}" "$exe" --check --context "${CHECK_CONTEXT:-1000}" >"$out/specpv_check.json" \
  2>"$out/specpv_check.stderr"
rc=$?
[[ $rc -eq 0 ]] || status=1
python3 - "$out/specpv_check.json" "$rc" <<'PY' || echo "check: exit $rc, no report"
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r: print("check error:", r["error"]); sys.exit(0)
v = r["strict_view_vs_cpu"]
print(f"check exit {sys.argv[2]} pass {r['pass']}: whole view == full {r['whole_view_bitwise_equals_full']}, "
      f"strict view vs CPU max {v['max_abs']:.4f} (tol {v['tolerance']}), argmax mismatches {v['argmax_mismatches']}, "
      f"ties {v['near_ties']}, graphs == eager {r['graphed_views_equal_eager']}, taps {r['query_tap']}, "
      f"summaries {r['summaries']}, device retrieval {r.get('device_retrieval')}, errors {r['errors']}")
PY

if [[ "${QUEST:-1}" != 0 ]]; then bash tools/gpu/quest_scores.sh || status=1; fi

SUITES="${SUITES:-specpv_test}" BENCH=0 MEMCHECK=0 bash tools/gpu/engine_check.sh || status=1

printf '%-12s %8s %9s %9s %s\n' shape context full_us noatt_us "budget:partial_us(vs_full)"
for shape in ${BENCH_SHAPES:-llama3.1-8b qwen3-4b}; do
  for context in ${BENCH_CONTEXTS:-8192 32768 131072}; do
    json="$out/view_${shape}_${context}.json"
    timeout "${RUN_TIMEOUT:-90}" "$exe" --bench --synthetic "$shape" --context "$context" \
      --budgets "${BUDGETS:-256,512,1024,2048}" --iters "${ITERS:-10}" >"$json" 2>"${json%.json}.stderr"
    rc=$?
    [[ $rc -eq 0 ]] || status=1
    python3 - "$json" "$shape" "$context" <<'PY' || echo "$shape $context: exit $rc, no report"
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r: print(sys.argv[2], sys.argv[3], "error:", r["error"]); sys.exit(0)
parts = " ".join(f"{p['budget']}:{p['partial_us']:.0f}({p['vs_full']:.3f})" for p in r["partial"] if "partial_us" in p)
print(f"{sys.argv[2]:12s} {sys.argv[3]:>8s} {r['full_us']:9.0f} {r['no_attention_us']:9.0f} {parts}")
PY
  done
done

# Longer contexts over a BF16 K/V store (half the bytes: what fits one H100 beside the
# weights): shape:context pairs.
for pair in ${BF16_RUNS:-llama3.1-8b:131072 llama3.1-8b:262144 qwen3-4b:262144 qwen3-4b:524288}; do
  shape=${pair%%:*} context=${pair##*:}
  json="$out/view_bf16_${shape}_${context}.json"
  timeout "${RUN_TIMEOUT:-90}" "$exe" --bench --synthetic "$shape" --context "$context" --kv-dtype bf16 \
    --budgets "${BUDGETS:-256,512,1024,2048}" --iters "${ITERS:-10}" >"$json" 2>"${json%.json}.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  python3 - "$json" "$shape" "$context" <<'PY' || echo "$shape $context bf16: exit $rc, no report"
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r: print(sys.argv[2], sys.argv[3], "bf16 error:", r["error"]); sys.exit(0)
parts = " ".join(f"{p['budget']}:{p['partial_us']:.0f}({p['vs_full']:.3f})" for p in r["partial"] if "partial_us" in p)
print(f"{sys.argv[2]:12s} {sys.argv[3]:>8s} {r['full_us']:9.0f} {r['no_attention_us']:9.0f} {parts} bf16")
PY
done

# End to end: the 7,000-token prompt only.
long_golden_prompts "$out/long7k.jsonl"
e2e() {  # name, yaml
  printf '%s\n' "$2" >"$out/e2e_$1.yaml"
  timeout "${E2E_TIMEOUT:-120}" "$bundle/bin/specpipe" bench --config "$out/e2e_$1.yaml" --device "$SPECPIPE_TEST_DEVICE" \
    --prompts "$out/long7k.jsonl" --max-tokens "${E2E_TOKENS:-128}" --gammas 4 --repeat "${E2E_REPEAT:-3}" \
    --json "$out/e2e_$1.json" >"$out/e2e_$1.txt" 2>&1
  echo "== e2e $1 exit $?"
  grep -E '^(plain|draft model|verify_view)' "$out/e2e_$1.txt"
}
# The prefix cache is off in every row: SpecPV turns it off (blocks filled under partial
# views are never shared), and a cached prompt would give the other rows a free prefill.
e2e full "version: 1
kv: {prefix_cache: false}"
for budget in ${E2E_BUDGETS:-256 512 1024}; do
  for mode in exact approximate; do
    e2e "specpv-$budget-$mode" "version: 1
kv: {prefix_cache: false}
$(specpv_yaml "$budget" "$mode")"
  done
done

if [[ "${LONG:-1}" != 0 ]]; then
  SUITES=specpv_long_test SUITE_TIMEOUT="${LONG_TIMEOUT:-240}" BENCH=0 MEMCHECK=0 bash tools/gpu/engine_check.sh || status=1
fi
# Everything in one archive (what comes back from the GPU machine is capped in files).
tar -czf /tmp/specpv_results.tgz -C "$out" . && find "$out" -maxdepth 1 -type f -delete &&
  mv /tmp/specpv_results.tgz "$out/"
exit $status
