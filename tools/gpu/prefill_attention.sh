#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh with
# specpipe_cuda_check and specpipe_gpu_generate: the prefill kernel (kernels/cuda/
# attention_prefill.cu) checked, then timed against the chunk kernel in one call.
# 1. specpipe_cuda_check --groups attention -> $OUT/prefill_check.json: every attention
#    check (PASS / FAIL lines; the prefill kernel against the CPU, the first kernel and the
#    chunk kernel, bit for bit, FP32 and BF16 K/V) and the prefill timings (a 1,024-row
#    chunk at 8K and 32K, prefill kernel vs chunk kernel).
# 2. Only if every check passed: tools/gpu/long_context.sh MODE=prefill with the prefill
#    kernel (SHAPES, CONTEXTS; default "qwen3-4b llama3.1-8b", "8192 32768") and with
#    SPECPIPE_ATTENTION_PREFILL=0 (the chunk kernel: OLD_SHAPES, OLD_CONTEXTS; default the
#    same shapes at 8192; set OLD_CONTEXTS="" to skip). WAYS as long_context.sh
#    (default here "layerwise").
# Exit status: non-zero if a check failed or a run failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_cuda_check prefill_attention
gpu_environment prefill_attention
cat "$out/prefill_attention_environment.txt"
"$exe" --groups attention >"$out/prefill_check.json" 2>"$out/prefill_check.stderr"
rc=$?
python3 - "$out/prefill_check.json" <<'PY' || rc=1
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps(r["summary"]))
for c in r["checks"]:
    if not c["pass"] or "prefill" in c["name"] or c["name"].startswith("attention =="):
        print(("PASS " if c["pass"] else "FAIL ") + c["name"], c.get("error", ""))
for t in r["timings"]:
    if "prefill" in t["name"]:
        print(f"TIME {t['name']}: prefill {t['us']:.0f} us, chunk kernel {t['chunk_kernel_us']:.0f} us, "
              f"{t['speedup']:.2f}x, {t['fma_per_s'] / 1e12:.2f} T FMA/s")
sys.exit(0 if all(c["pass"] for c in r["checks"]) else 1)
PY
echo "check exit: $rc"
[[ $rc -eq 0 ]] || exit 1
status=0
root="$out"
echo "== prefill kernel"
OUT="$root/new" WAYS="${WAYS:-layerwise}" SHAPES="${SHAPES:-qwen3-4b llama3.1-8b}" \
  CONTEXTS="${CONTEXTS:-8192 32768}" MODE=prefill bash tools/gpu/long_context.sh || status=1
if [[ -n "${OLD_CONTEXTS-8192}" ]]; then
  echo "== chunk kernel (SPECPIPE_ATTENTION_PREFILL=0)"
  OUT="$root/old" SPECPIPE_ATTENTION_PREFILL=0 WAYS="${WAYS:-layerwise}" \
    SHAPES="${OLD_SHAPES:-${SHAPES:-qwen3-4b llama3.1-8b}}" CONTEXTS="${OLD_CONTEXTS-8192}" MODE=prefill \
    bash tools/gpu/long_context.sh || status=1
fi
exit $status
