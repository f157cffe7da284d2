#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: the tensor-core
# weight-streaming GEMM (kernels/cuda/gemm_mma.cu, `--gemm mma`) against cuBLASLt, in one
# call.
#   1. specpipe_cuda_check: every kernel check (accuracy and bitwise batch invariance of
#      all GEMMs, the row kernels' fused == unfused bits), then the GEMM group with
#      timings at Llama-3-8B shapes (m = 1, 5, 8, 9, 16)          -> cuda_check*.json
#   2. the synthetic Llama-3-8B decode step vs the bandwidth floor, cuBLASLt and mma
#      alternately (ROUNDS rounds), context CONTEXT (512); mma at 2048 too
#                                                                 -> synthetic_*.json
#   3. the demo pair (golden tokens, speculation == plain for gamma 1..8, tok/s) with
#      each GEMM (GEN=0 skips)                                    -> demo_*.json
#   4. compute-sanitizer memcheck of one demo case with mma (MEMCHECK=0 skips)
# A summary is printed; JSON goes to $OUT (or gpu-out/). Exit status: non-zero if a step failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate gemm_mma
check="$bundle/bin/specpipe_cuda_check"
status=0

timeout 200 "$check" --no-timing >"$out/cuda_check.json" 2>"$out/cuda_check.stderr" || status=1
timeout 200 "$check" --groups gemm >"$out/cuda_check_gemm.json" 2>>"$out/cuda_check.stderr" || status=1
python3 - "$out/cuda_check.json" "$out/cuda_check_gemm.json" <<'PY' || status=1
import json, sys
for f in sys.argv[1:]:
    r = json.load(open(f))
    print(f.split("/")[-1], r["summary"], [c["name"] for c in r["checks"] if not c["pass"]])
for t in json.load(open(sys.argv[2]))["timings"]:
    if "mma_bf16_us" in t:
        print(f"  {t['name']:34s} x floor: lt {t['lt_bf16_x_floor']:.3f}  rows {t['rows_bf16_x_floor']:.3f}  "
              f"mma {t['mma_bf16_x_floor']:.3f}  mma+pdl {t['mma_pdl_bf16_x_floor']:.3f}")
    elif "floor_us" in t:
        print("  one decode step's GEMMs x floor:",
              {k[:-8]: round(v, 3) for k, v in t.items() if k.endswith("_x_floor") and ("@m1_" in k or "@m5_" in k or "@m9_" in k)})
PY

for round in $(seq "${ROUNDS:-2}"); do
  for gemm in cublaslt mma; do
    timeout 120 "$exe" --synthetic llama3-8b --context "${CONTEXT:-512}" --gemm "$gemm" \
      >"$out/synthetic_${gemm}_$round.json" 2>"$out/synthetic_${gemm}_$round.stderr" || status=1
  done
done
timeout 120 "$exe" --synthetic llama3-8b --context 2048 --gemm mma >"$out/synthetic_mma_ctx2048.json" \
  2>"$out/synthetic_mma_ctx2048.stderr" || status=1
python3 - "$out"/synthetic_*.json <<'PY' || status=1
import json, sys
for f in sys.argv[1:]:
    r = json.load(open(f))
    g = r["graphs"]
    print(f"{f.split('/')[-1]:30s} {r.get('gemm')}: decode {g['decode_us']:.0f} us = {g['decode_vs_floor']:.3f}x floor "
          f"(floor {r['floor_us']:.0f} us), eager {r['eager']['decode_us']:.0f} us, window 5 / decode "
          f"{g['windows'][4]['relative']:.3f}, graph == eager {all(x['bitwise_identical'] for x in r['graph_vs_eager'])}, "
          f"breakdown {[(b['n'], round(b['gemms_only_us']), round(b['all_but_gemms_us'])) for b in r['breakdown_graphs']]}")
PY

if [[ "${GEN:-1}" != 0 ]]; then
  for gemm in cublaslt mma; do
    timeout 200 "$exe" --gemm "$gemm" --draft-gemm "$gemm" >"$out/demo_$gemm.json" 2>"$out/demo_$gemm.stderr" || status=1
  done
  python3 - "$out"/demo_*.json <<'PY' || status=1
import json, sys
for f in sys.argv[1:]:
    r = json.load(open(f))
    p, t = r.get("plain", {}), r.get("timing", {})
    spec_ok = all(s["output_equals_plain"] for s in r.get("spec", {}).values())
    print(f"{f.split('/')[-1]}: pass {r.get('pass')}, plain == golden {p.get('identical')}, spec == plain (gamma 1..8) {spec_ok}, "
          f"plain {t.get('plain', {}).get('tok_s', 0):.0f} tok/s, spec best {t.get('spec_best')}")
PY
fi

sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [[ "${MEMCHECK:-1}" != 0 && -n "$sanitizer" ]]; then
  timeout 240 "$sanitizer" --tool memcheck --error-exitcode 3 --log-file "$out/gemm_mma_memcheck.log" \
    "$exe" --no-timing --cases 1 --gemm mma --draft-gemm mma >"$out/gemm_mma_memcheck.json" 2>&1
  rc=$?
  echo "memcheck (1 demo case, mma): exit $rc ($(tail -n1 "$out/gemm_mma_memcheck.log" 2>/dev/null))"
  [[ $rc -eq 0 ]] || status=1
fi
exit $status
