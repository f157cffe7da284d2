#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (tools
# specpipe_cuda_check, specpipe_gpu_generate): the attention variants (kernels/cuda/attention.h,
# SPECPIPE_ATTENTION_VARIANT: bit 1 the head merge, bit 2 BF16 keys staged by cp.async, bit 4
# the chunk kernel built for two blocks an SM, bit 8 its lean scores and value sums, bit 16
# that for three blocks an SM, bit 32 the window kernel's paired build, bit 64 its fast build, bit 128 its tight build)
# checked, then timed against each other and against an
# earlier build (BASE_BUNDLE) in one call.
#   1. the chunk kernels' registers, shared memory and spills as built (cuobjdump; those
#      whose mangled name matches CHUNK_KERNELS, a grep -E pattern);
#   2. specpipe_cuda_check --groups attention under each of CHECK_VARIANTS (the last one
#      with its timings): every attention case against the CPU, bitwise against
#      attention_reference, decode == window rows, BF16 store == FP32 kernels; the timings
#      run the 8B shape's decode and 5-token window at 4K-128K, FP32 and BF16 K/V, in every
#      variant (each variant's bits == variant 0's) -> one line a case here (the variants
#      in SHOW_VARIANTS, all when unset);
#   3. split_kv.sh's checks on the default variant (SPECPIPE_ATTENTION_VARIANT when set):
#      the demo pair (golden tokens, graphs == eager, speculation == plain) and the layer
#      ring / host tier bit for bit against all-on-GPU, FP32 and BF16 K/V;
#   4. ROUNDS rounds of gemm_variants.sh's synthetic sweep (CHECKS=0,
#      VARIANT_VAR=SPECPIPE_ATTENTION_VARIANT): FP32 K/V over SHAPES x CONTEXTS, BF16 K/V over
#      BF16_SHAPES x CONTEXTS, first the BASE_BUNDLE build (if set; its default), then this
#      bundle's VARIANTS ("default": the variable unset) -> one table line a run here.
# Everything but the log is packed into $OUT/attention_variants.tgz (the run tool brings
# back a few files only).
# Environment: CHECK_VARIANTS ("0 7"), CHECKS (1; 0 skips 2-3), BASE_BUNDLE, VARIANTS
# ("default"), SHAPES ("llama3.1-8b qwen3-0.6b"), BF16_SHAPES ("llama3.1-8b"; " ": none),
# CONTEXTS ("8192 32768 131072"), ROUNDS (2), ITERS (5), SHOW_VARIANTS, CHUNK_KERNELS (.).
set -uo pipefail
here="$(dirname "$0")"
source "$here/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate attention_variants
check="$bundle/bin/specpipe_cuda_check"
new_bundle="$bundle"
gpu_environment attention_variants
cat "$out/attention_variants_environment.txt"
cuobjdump --dump-resource-usage "$check" 2>/dev/null | grep -A1 'attention_chunk_kernel' | grep -v '^--' | paste - - |
  grep -E "${CHUNK_KERNELS:-.}" | sed -E 's/.*attention_chunk_kernelI(.*)EEvNS.*(REG:[0-9]+).*(SHARED:[0-9]+).*(LOCAL:[0-9]+).*/  chunk kernel <\1>: \2 \3 \4/'
if [[ -n "${BASE_BUNDLE:-}" && -f "$BASE_BUNDLE.tar.xz" && ! -d "$BASE_BUNDLE/bin" ]]; then tar -xJf "$BASE_BUNDLE.tar.xz"; fi
status=0
if [[ "${CHECKS:-1}" == 1 ]]; then
  variants=(${CHECK_VARIANTS:-0 7})
  for v in "${variants[@]}"; do
    timing=--no-timing
    [[ $v == "${variants[-1]}" ]] && timing=
    json="$out/attention_check_v$v.json"
    SPECPIPE_ATTENTION_VARIANT=$v timeout 300 "$check" --groups attention $timing >"$json" 2>"${json%.json}.stderr"
    rc=$?
    [[ $rc -eq 0 ]] || status=1
    SHOW_VARIANTS="${SHOW_VARIANTS:-}" python3 - "$here" "$json" "$v" "$rc" <<'PY' || echo "attention check variant $v: exit $rc, no report"
import os, sys
sys.path.insert(0, sys.argv[1])
from check_report import summarise
r = summarise(sys.argv[2], f"attention check, variant {sys.argv[3]}", sys.argv[4])
show = os.environ["SHOW_VARIANTS"].split()
for t in r.get("timings", []):
    us = t.get("variant_us")
    if us:
        rate = t["variant_kv_read_GBps"]
        print(f"  {t['name'][20:]:30s} us (GB/s) by variant: " +
              " ".join(f"{k}: {x:7.1f} ({rate[k]:5.0f})" for k, x in us.items() if not show or k in show))
PY
  done
  CHECK_SPLITS=" " SHAPES=" " bash "$here/split_kv.sh" | grep -v '^read-only' || status=1
fi
for round in $(seq "${ROUNDS:-2}"); do
  for kv in fp32 bf16; do
    shapes="${SHAPES:-llama3.1-8b qwen3-0.6b}"
    [[ $kv == bf16 ]] && shapes="${BF16_SHAPES:-llama3.1-8b}"
    for which in base new; do
      if [[ $which == base ]]; then
        [[ -n "${BASE_BUNDLE:-}" ]] || continue
        label="${BASE_BUNDLE}" variants=default
      else
        label="${new_bundle}" variants="${VARIANTS:-default}"
      fi
      echo "round $round, $kv K/V, bundle $label ($(cat "$label/COMMIT")), variants $variants"
      SPECPIPE_BUNDLE="$label" CHECKS=0 TAG="_${kv}_${which}_$round" KV_DTYPE=$kv VARIANTS="$variants" \
        CONTEXTS="${CONTEXTS:-8192 32768 131072}" SHAPES="$shapes" VARIANT_VAR=SPECPIPE_ATTENTION_VARIANT \
        ROUNDS=1 ITERS="${ITERS:-5}" bash "$here/gemm_variants.sh" | grep -v '^GPU 0\|^[0-9a-f]\{7\}$\|UTC 20\|^read-only' ||
        status=1
    done
  done
done
(cd "$out" && tar -czf attention_variants.tgz --remove-files $(ls | grep -v '^attention_variants\.\(log\|tgz\)$'))
exit $status
