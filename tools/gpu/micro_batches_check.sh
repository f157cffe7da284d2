#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh with the tools
# "specpipe load_generator micro_batches_test" (SPECPIPE_BUNDLE_BENCH=ON, plugin
# specpipe_nwor): micro-batches in flight on the device (issue 18 item 3), checked, then
# timed through the server.
#   1. micro_batches_test with SPECPIPE_TEST_DEVICE=cuda:0 (tools/gpu/engine_check.sh):
#      every request's output equal to its solo run with 2-3 rounds in flight; with a
#      draft model the drafts stay on the drafter's device in each round's slot buffer and
#      every round accepts what its request accepts with one micro-batch
#      (DraftsStayOnTheDeviceWithThreeInFlight);
#   2. compute-sanitizer memcheck of that test (MEMCHECK=0 skips it);
#   3. tools/gpu/serve_load.sh with MODES (default "plain plain_mb draft draft_mb",
#      DRAFT_GAMMAS 4): one batch against two micro-batches, tokens/s and the per-round
#      breakdown (draft / verify / commit / messaging / queued).
# Outputs go to $OUT (or gpu-out/). Exit status: non-zero if a step failed.
set -uo pipefail
here="$(dirname "$0")"
status=0
source "$here/bundle_env.sh"
gpu_bundle_env specpipe micro_batches_check
gpu_environment micro_batches_check
cat "$out/micro_batches_check_environment.txt"
SUITES=micro_batches_test BENCH=0 MEMCHECK=0 bash "$here/engine_check.sh" || status=1
if [[ "${MEMCHECK:-1}" != 0 ]]; then
  gpu_engine_env
  gpu_memcheck micro_batches "drafts per slot on the device" "${MEMCHECK_TIMEOUT:-180}" "$bundle/bin/micro_batches_test" \
    --gtest_brief=1 --gtest_filter='MicroBatches.DraftsStayOnTheDeviceWithThreeInFlight' || status=1
fi
SYNCS="${SYNCS:-0}" MODES="${MODES:-plain plain_mb draft draft_mb}" DRAFT_GAMMAS="${DRAFT_GAMMAS:-4}" \
  bash "$here/serve_load.sh" || status=1
exit $status
