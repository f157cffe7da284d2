#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (tool
# specpipe_gpu_generate): Nsight Compute's view of the verify-window kernel against the
# decode chunk kernel at the 8B shape (Llama-3.1-8B, synthetic weights, context booked):
# for each (kernel, K/V type, variant) the first launch of that kernel in
# `specpipe_gpu_generate --synthetic llama3.1-8b --context CONTEXT` (layer 0 of the
# first eager window of 5 rows, or of the first decode step), profiled alone
# (--clock-control none: the clocks as they run) with the sections that say where its
# warps wait: speed of light, occupancy, launch, warp states, scheduler, memory, source
# counters (the SASS lines with the most stall samples). The reports' text goes to stdout
# (the lines matching SHOW, a grep -E pattern, when set); the .ncu-rep files and each
# kernel's SASS with per-instruction executions and stall samples (CSV) are packed into
# $OUT/window_profile.tgz.
# Environment: CONTEXT (32768), CASES ("window:fp32:default chunk:fp32:default
# window:bf16:default"; kernel:kv:variant, variant "default" leaves
# SPECPIPE_ATTENTION_VARIANT unset), NCU_TIMEOUT (150 s a case).
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate window_profile
gpu_environment window_profile
cat "$out/window_profile_environment.txt"
ncu_bin="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n1 || true)"
[[ -n "$ncu_bin" ]] || { echo "window_profile: ncu not installed"; exit 2; }
status=0
for case in ${CASES:-window:fp32:default chunk:fp32:default window:bf16:default}; do
  IFS=: read -r kernel kv variant <<<"$case"
  if [[ $variant == default ]]; then unset SPECPIPE_ATTENTION_VARIANT; else export SPECPIPE_ATTENTION_VARIANT=$variant; fi
  name="${kernel}_${kv}_${variant}"
  echo "=== attention_${kernel}_kernel, $kv K/V, variant $variant, context ${CONTEXT:-32768}"
  SPECPIPE_SYNTHETIC_QUICK=1 timeout "${NCU_TIMEOUT:-150}" "$ncu_bin" --clock-control none \
    -k "regex:attention_${kernel}_kernel" -c 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
    --import-source no -f -o "$out/$name" \
    "$exe" --synthetic llama3.1-8b --context "${CONTEXT:-32768}" --prefill-max 0 --iters 1 --kv-dtype "$kv" \
    >"$out/$name.run.json" 2>"$out/$name.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || { status=1; echo "ncu exit $rc"; tail -n 5 "$out/$name.stderr"; }
  [[ -f "$out/$name.ncu-rep" ]] || continue
  "$ncu_bin" --import "$out/$name.ncu-rep" --print-details all 2>&1 | grep -v '^    ---\|^$' | cut -c1-150 |
    grep -E "${SHOW:-.}" | head -n 170
  # Per SASS instruction: executions and stall samples (where the instructions go).
  "$ncu_bin" --import "$out/$name.ncu-rep" --page source --print-source sass --csv >"$out/${name}_sass.csv" 2>&1
done
(cd "$out" && tar -czf window_profile.tgz --remove-files $(ls | grep -v '^window_profile\.tgz$'))
exit $status
