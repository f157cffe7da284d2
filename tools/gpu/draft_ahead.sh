#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: draft-ahead
# (slots.drafter.draft_ahead, pipeline/model_drafter.h) through the actor engine on the
# device, checked and timed in one call.
#   1. speculative_golden_test on the device: outputs exact with draft-ahead off and on,
#      and the rounds of the draft-ahead suite as the per-kernel one's (GOLDEN=0 skips);
#   2. `specpipe bench --device cuda:0` for each config below, in rounds (A B C A B C ...)
#      so that drift of the machine hits them alike; medians of each run's repeats;
#   3. compute-sanitizer memcheck of one draft-ahead golden case set (MEMCHECK=0 skips).
# Outputs go to $OUT (or gpu-out/). Exit status: non-zero if a check failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe draft_ahead
gpu_engine_env
status=0

if [[ "${GOLDEN:-1}" != 0 ]]; then
  timeout "${SUITE_TIMEOUT:-300}" "$bundle/bin/speculative_golden_test" --gtest_brief=1 \
    >"$out/speculative_golden_test.txt" 2>&1
  rc=$?
  echo "speculative_golden_test exit: $rc ($(grep -E '^\[  (PASSED|FAILED)' "$out/speculative_golden_test.txt" | tr '\n' ' '))"
  [[ $rc -eq 0 ]] || { status=1; grep -E "Failure|FAILED|error|Expected|Which" "$out/speculative_golden_test.txt" | head -n 30; }
fi

# The configs compared (CONFIGS, in this order each round): auto (the defaults: on with a
# device, the per-kernel draft forward), ahead_off, ahead_on (the same as auto on a
# device), fused_off / fused_on (the fused draft kernel, models.draft_fused_step, with
# draft-ahead off / on: then on half the SMs), ahead_<N> (fused, on, the draft kernel on N
# blocks, e.g. ahead_132 on every SM of an H100), kernels_off / kernels_on (the per-kernel
# draft forward named explicitly), scv_off / scv_on (the SCV plugin choosing gamma,
# draft-ahead off / on).
config_yaml() {
  case "$1" in
    auto) printf 'version: 1\n' ;;  # the defaults: on with a device, the per-kernel draft forward
    ahead_off) printf 'version: 1\nslots: {drafter: {draft_ahead: off}}\n' ;;
    ahead_on) printf 'version: 1\nslots: {drafter: {draft_ahead: on}}\n' ;;
    fused_off) printf 'version: 1\nmodels: {draft_fused_step: true}\nslots: {drafter: {draft_ahead: off}}\n' ;;
    fused_on) printf 'version: 1\nmodels: {draft_fused_step: true}\nslots: {drafter: {draft_ahead: on}}\n' ;;
    kernels_off) printf 'version: 1\nmodels: {draft_fused_step: false}\nslots: {drafter: {draft_ahead: off}}\n' ;;
    kernels_on) printf 'version: 1\nmodels: {draft_fused_step: false}\nslots: {drafter: {draft_ahead: on}}\n' ;;
    scv_off | scv_on)  # SCV's per-round gamma (examples/pipelines/scv.yaml) without / with draft-ahead
      printf 'version: 1\nplugins: {scv: {path: specpipe_scv, config: {max_gamma: 8}}}\n'
      printf 'slots: {drafter: {type: model, gamma: 4, draft_ahead: %s}, verify_plan: {type: scv}}\n' "${1#scv_}" ;;
    ahead_*) printf 'version: 1\nmodels: {draft_fused_step: true, draft_fused_blocks: %s}\nslots: {drafter: {draft_ahead: on}}\n' \
                    "${1#ahead_}" ;;
    *) echo "draft_ahead.sh: unknown config $1" >&2; return 1 ;;
  esac
}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for cfg in ${CONFIGS:-ahead_off auto}; do
    config_yaml "$cfg" >"$out/$cfg.yaml" || { status=1; continue; }
    # shellcheck disable=SC2086
    timeout "${BENCH_TIMEOUT:-240}" "$exe" bench --device "$SPECPIPE_TEST_DEVICE" --config "$out/$cfg.yaml" \
      --json "$out/bench_${cfg}_$round.json" ${BENCH_ARGS:---repeat 3 --no-ngram --gammas 3,4,5} \
      >"$out/bench_${cfg}_$round.txt" 2>&1 || status=1
    echo "== $cfg, round $round"
    cat "$out/bench_${cfg}_$round.txt"
  done
done

if [[ "${MEMCHECK:-1}" != 0 ]]; then
  gpu_memcheck draft_ahead "draft-ahead, gamma 4" "${MEMCHECK_TIMEOUT:-300}" "$bundle/bin/speculative_golden_test" \
    --gtest_brief=1 --gtest_filter='*DraftAheadKeepsEveryRound/2' || status=1
fi
exit $status
