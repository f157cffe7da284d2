#!/usr/bin/env bash
# On the GPU machine, from the repository root: the end-of-stop check of a bundle of HEAD in
# one call (about 5 minutes): every kernel check (no timings), compute-sanitizer memcheck of
# our kernels and the GEMMs, the demo pair's golden continuations and speculation == plain
# (specpipe_gpu_generate), and offload_check.sh (the ring and host tier bit for bit against
# all-on-GPU, offload_engine_test on the device). Here:
#   SPECPIPE_BUNDLE_TOOLS="specpipe_cuda_check specpipe_gpu_generate offload_engine_test \
#     specpipe specpv_test specpv_long_test specpipe_specpv_gpu" \
#   SPECPIPE_BUNDLE_PLUGINS="specpipe_nwor specpipe_scv specpipe_specpv specpipe_faulty_plugin" \
#   SPECPIPE_GPU_BUILD=<build dir> SPECPIPE_BUNDLE=gpu-bundle-final tools/gpu/bundle.sh
# (~10 MB packed with xz -9; the SpecPV tools are for the SpecPV checks run beside this
# script: SUITES="specpv_test specpv_long_test" BENCH=0 MEMCHECK=0 tools/gpu/engine_check.sh).
# There: SPECPIPE_BUNDLE=gpu-bundle-final bash tools/gpu/stop_check.sh
# racecheck is left out: it has not finished the attention group in 240 s since the BF16
# key staging (kernels/cuda/README.md, "Eleventh session").
set -uo pipefail
export SPECPIPE_BUNDLE="${SPECPIPE_BUNDLE:-gpu-bundle-final}"; source tools/gpu/bundle_env.sh; gpu_bundle_env specpipe_cuda_check final; gpu_engine_env
nvidia-smi -L; cat $SPECPIPE_BUNDLE/COMMIT; date -u
B=$SPECPIPE_BUNDLE/bin
$B/specpipe_cuda_check --no-timing > $out/cuda_check.json 2>$out/cc.err; echo "cuda_check rc=$?"
python3 -c "
import json; r=json.load(open('$out/cuda_check.json')); print(json.dumps(r['summary']))
for c in r['checks']:
    if not c['pass']: print('FAIL', c['name'], c.get('error',''))"
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
timeout 200 $san --tool memcheck --error-exitcode 3 --log-file $out/memcheck.log $B/specpipe_cuda_check --no-timing --groups elementwise,kv,attention,gemm,sampling > $out/memcheck.json 2>&1; echo "memcheck rc=$? $(tail -n1 $out/memcheck.log)"
timeout 200 $B/specpipe_gpu_generate --no-timing > $out/gen.out 2>$out/gen.err; echo "gpu_generate rc=$?"; tail -c 1800 $out/gen.out; tail -c 600 $out/gen.err
CHECK_TIMEOUT=200 bash tools/gpu/offload_check.sh 2>&1 | tail -25; echo "offload_check rc=${PIPESTATUS[0]}"
