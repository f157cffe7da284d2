#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (tools
# specpipe_cuda_check, specpipe_gpu_generate): the gemm_mma variants (kernels/cuda/gemm.h,
# SPECPIPE_GEMM_MMA_VARIANT: 1 deep buffers, 2 persistent blocks, 4 early launch of the
# next kernel, 8 the same for weights of at most 16 MiB only, 64 (with 1) x loaded an
# iteration ahead, 128 the weight loads' wide L2 fetch (L2::256B), 0 none; "default" in
# VARIANTS leaves the variable unset)
# checked, then the decode step timed in each, alternated within one call.
#   1. specpipe_cuda_check --groups gemm: every GEMM against the CPU and its batch
#      invariance, every variant == variant 0 bit for bit, and the Llama-3-8B shapes
#      timed back to back in each variant -> $OUT/gemm_check.json (one line a shape here);
#   2. the demo pair in VARIANTS' last value (golden tokens, graphs == eager,
#      speculation == plain): specpipe_gpu_generate --repeat 1 --no-timing;
#   3. the read-only bandwidth (torch: sum of a 4 GiB tensor, median of 10);
#   4. ROUNDS rounds of SHAPES x CONTEXTS x VARIANTS: specpipe_gpu_generate --synthetic
#      (SPECPIPE_SYNTHETIC_QUICK=1: graphs, windows 1 and 5, context booked), one table
#      line each: decode step, floor (weights + K/V at the read-only rate), ratio, 5-token
#      window / step; the median ratio per (shape, context, variant) at the end.
# Environment: SHAPES ("llama3-8b"), CONTEXTS ("512"), VARIANTS ("0 3"), ROUNDS (2),
# ITERS (10), KV_DTYPE (fp32), CHECKS (1; 0 skips 1-2), READ_GBPS (skips 3; else the rate an
# earlier run left in $OUT/read_gbps.txt), TAG, VARIANT_VAR (the variable step 4 sets:
# SPECPIPE_GEMM_MMA_VARIANT; attention_variants.sh sets SPECPIPE_ATTENTION_VARIANT).
# JSON: $OUT/gemm_variants$TAG.json (every run and the medians).
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate gemm_variants
check="$bundle/bin/specpipe_cuda_check"
gpu_environment gemm_variants
cat "$out/gemm_variants_environment.txt"
status=0
variants="${VARIANTS:-0 3}"
variant_var="${VARIANT_VAR:-SPECPIPE_GEMM_MMA_VARIANT}"
if [[ "${CHECKS:-1}" == 1 ]]; then
  timeout 150 "$check" --groups gemm >"$out/gemm_check.json" 2>"$out/gemm_check.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  python3 - "$(dirname "$0")" "$out/gemm_check.json" "$rc" <<'PY' || echo "gemm check: exit $rc, no report"
import sys
sys.path.insert(0, sys.argv[1])
from check_report import summarise
r = summarise(sys.argv[2], "gemm check", sys.argv[3])
checks = r.get("checks", [])
var = [c for c in checks if "variant" in c.get("name", "")]
print(f"  of which every variant == variant 0 bit for bit: {sum(c.get('pass', False) for c in var)}/{len(var)} pass")
for t in r.get("timings", []):
    v = t.get("mma_pdl_variant_us")
    if v:
        print(f"  {t['name']:32s} floor {t['floor_us']:7.1f} us  pdl us by variant " +
              " ".join(f"{k}: {x:7.1f} ({x / t['floor_us']:.3f}x)" for k, x in v.items()))
    elif "one decode step" in t.get("name", ""):
        print("  step:", ", ".join(f"{k} {x:.3f}" for k, x in t.items() if "x_floor" in k and "pdl" in k))
PY
  last="${variants##* }"
  if [[ $last == default ]]; then unset SPECPIPE_GEMM_MMA_VARIANT; else export SPECPIPE_GEMM_MMA_VARIANT=$last; fi
  timeout 150 "$exe" --repeat 1 --no-timing >"$out/demo.json" 2>"$out/demo.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  echo "demo pair, variant $last (golden, graphs == eager, speculative == plain): exit $rc"
fi
# Measured once a call: a later run of this script in the same $OUT reuses it.
read_gbps="${READ_GBPS:-$(cat "$out/read_gbps.txt" 2>/dev/null || python3 "$(dirname "$0")/read_bandwidth.py" | tee "$out/read_gbps.txt")}"
echo "read-only bandwidth (torch sum over 4 GiB, median of 10): $read_gbps GB/s"
printf '%-12s %8s %7s %5s %10s %11s %8s %7s\n' shape context variant round decode_us floor_rd_us vs_floor win5
for round in $(seq "${ROUNDS:-2}"); do
  for shape in ${SHAPES:-llama3-8b}; do
    for context in ${CONTEXTS:-512}; do
      for variant in $variants; do
        json="$out/gv_${shape}_${context}_${variant}_${round}.json"
        # "default": the variable unset (the build's default variant).
        if [[ $variant == default ]]; then unset "$variant_var"; else export "$variant_var=$variant"; fi
        SPECPIPE_SYNTHETIC_QUICK=1 timeout 120 "$exe" --synthetic "$shape" \
          --context "$context" --prefill-max 0 --iters "${ITERS:-10}" --kv-dtype "${KV_DTYPE:-fp32}" \
          >"$json" 2>"${json%.json}.stderr"
        rc=$?
        [[ $rc -eq 0 ]] || status=1
        python3 "$(dirname "$0")/synthetic_line.py" "$json" "$read_gbps" "$rc" "$shape" "$context" "$variant" "$round" ||
          echo "$shape $context $variant: exit $rc, no report"
      done
    done
  done
done
# One file for the sweep (the run tool brings back a few files only), with the medians.
python3 - "$out" "${TAG:-}" <<'PY'
import collections, glob, json, os, statistics, sys
runs, by = {}, collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "gv_*.json"))):
    try:
        r = json.load(open(f))
    except ValueError:
        continue
    name = os.path.basename(f)[:-5]
    runs[name] = r
    os.remove(f)
    if "graphs" in r:
        _, shape, context, variant, _ = name.split("_")
        by[(shape, context, variant)].append(r["graphs"]["decode_us"] / r["floor_with_kv_read_only_us"])
medians = {"/".join(k): statistics.median(v) for k, v in by.items()}
for k, v in medians.items():
    print(f"median {k}: {v:.3f}x the read-only floor (K/V counted) over {len(by[tuple(k.split('/'))])} runs")
json.dump({"runs": runs, "medians": medians}, open(os.path.join(sys.argv[1], f"gemm_variants{sys.argv[2]}.json"), "w"), indent=1)
for f in glob.glob(os.path.join(sys.argv[1], "*.stderr")):
    if os.path.getsize(f) == 0:
        os.remove(f)
PY
exit $status
