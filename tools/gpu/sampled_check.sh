#!/usr/bin/env bash
# On the GPU machine, from the repository root: sampled drafts drawn in the draft chain on
# the device (ForwardModel::forward_sampled_chain), checked and timed in one call.
#   1. the chain's sampling kernel against the CPU sampler (specpipe_cuda_check, group
#      sampling: sample_chain_rows' draws and q rows; the kernels' timings);
#   2. the demo draft model's sampled chain against its own forwards with the draw on the
#      host (specpipe_gpu_generate's sampled_chain, 4 cases; again with the fused step),
#      and its draft_chain_timing (a step, a greedy and a sampled chain of 4);
#   3. tools/gpu/sampled_spec.sh (TEMPS, REPEAT) for a base bundle and this one, ROUNDS
#      times alternated: a base bundle's specpipe travels inside this bundle as
#      bin/specpipe_base (xz packs the two binaries together at little cost);
#   4. the engine's sampled verdicts on the device against the host's on the same rows
#      (sampled_verdict_test) and the lossless-sampling chi-square through the engine on
#      the device (sampling_pipeline_test), with SPECPIPE_TEST_DEVICE, last (the longest).
# Here: SPECPIPE_BUNDLE_TOOLS="specpipe specpipe_cuda_check specpipe_gpu_generate sampled_verdict_test sampling_pipeline_test" \
#   SPECPIPE_BUNDLE=gpu-bundle-sampled SPECPIPE_GPU_BUILD=$PWD/build-gpu tools/gpu/bundle.sh, then
#   cp <base>/bin/specpipe gpu-bundle-sampled/bin/specpipe_base and pack it again.
# There: SPECPIPE_BUNDLE=gpu-bundle-sampled bash tools/gpu/sampled_check.sh
set -uo pipefail
export SPECPIPE_BUNDLE="${SPECPIPE_BUNDLE:-gpu-bundle-sampled}"
source tools/gpu/bundle_env.sh
gpu_bundle_env specpipe_cuda_check sampled_check
gpu_engine_env
nvidia-smi -L; cat "$bundle/COMMIT"; date -u
B=$bundle/bin
top=$out
timeout 90 "$B/specpipe_cuda_check" --groups sampling >"$top/cuda_check.json" 2>"$top/cc.err"
echo "cuda_check sampling rc=$?"
python3 -c "
import json; r=json.load(open('$top/cuda_check.json')); print(json.dumps(r['summary']))
for c in r['checks']:
    if 'chain' in c['name'] or not c['pass']: print('PASS' if c['pass'] else 'FAIL', c['name'], c.get('note', c.get('max_rel', '')), c.get('error',''))
for t in r.get('timings', []): print('timing', json.dumps(t))"
for variant in ${GEN_VARIANTS:-plain fused}; do  # the draft model per kernel, then as the fused step
  flag=; [[ $variant == fused ]] && flag=--fused-draft
  timeout 120 "$B/specpipe_gpu_generate" --no-timing --cases 4 $flag >"$top/gen_$variant.json" 2>"$top/gen_$variant.err"
  echo "gpu_generate $variant rc=$?"
  python3 -c "
import json; r=json.load(open('$top/gen_$variant.json'))
print('pass', r.get('pass'), r.get('error', ''), 'fused', r.get('draft_fused_step'), 'sampled_chain', json.dumps(r.get('sampled_chain')), 'launched_chain', json.dumps(r.get('launched_chain')))
print('draft_chain_timing', json.dumps(r.get('draft_chain_timing')))" ||
    tail -c 800 "$top/gen_$variant.err"
done
# The base bundle: its specpipe, this bundle's libraries.
if [[ -x "$B/specpipe_base" ]]; then
  mkdir -p gpu-bundle-sampledbase/bin
  cp "$B/specpipe_base" gpu-bundle-sampledbase/bin/specpipe
  ln -sfn "$PWD/$bundle/lib" gpu-bundle-sampledbase/lib
  cat "$bundle/BASE_COMMIT" >gpu-bundle-sampledbase/COMMIT 2>/dev/null
fi
for ((r = 0; r < ${ROUNDS:-1}; ++r)); do
  for b in ${BUNDLES:-gpu-bundle-sampledbase $bundle}; do
    [[ -x "$b/bin/specpipe" ]] || continue
    echo "== $b ($(cat "$b/COMMIT" 2>/dev/null)) round $r"
    SPECPIPE_BUNDLE=$b OUT="$top/spec_${b}_$r" TEMPS="${TEMPS:-0 0.8}" REPEAT="${REPEAT:-1}" bash tools/gpu/sampled_spec.sh
  done
done
OUT="$top/engine" SUITES="${SUITES:-sampled_verdict_test sampling_pipeline_test}" BENCH=0 MEMCHECK=0 SUITE_TIMEOUT="${SUITE_TIMEOUT:-150}" \
  bash tools/gpu/engine_check.sh
date -u
