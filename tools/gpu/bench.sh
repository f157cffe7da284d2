#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh ran where the
# project builds: the demo pair on the GPU (specpipe_gpu_generate: golden tokens, logits
# vs the CPU forward, speculation gamma 1..8, tok/s, verify-window costs), then the
# Hugging Face baseline (tools/gpu/hf_bench.py: plain and assisted generate), then a short
# compute-sanitizer memcheck of one case. JSON files go to $OUT (or gpu-out/).
# Exit status: non-zero if specpipe_gpu_generate failed.
# Environment: GEN_TIMEOUT, HF_TIMEOUT, MEMCHECK_TIMEOUT (seconds), GEN_ARGS, HF_ARGS.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate bench
{ nvidia-smi -L 2>&1; ldd "$exe"; } >"$out/bench_environment.txt"

status=0
# shellcheck disable=SC2086
timeout "${GEN_TIMEOUT:-240}" "$exe" ${GEN_ARGS:-} >"$out/gpu_generate.json" 2>"$out/gpu_generate.stderr" || status=1
echo "gpu_generate exit: $status"
python3 - "$out/gpu_generate.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
p = r.get("plain", {})
print("pass:", r.get("pass"), "error:", r.get("error"))
print("plain:", {k: p.get(k) for k in ("identical", "near_ties", "mismatches", "worst_logits_vs_cpu", "worst_logits_vs_reference")})
for g, s in r.get("spec", {}).items():
    print("spec", g, {k: s[k] for k in ("output_equals_plain", "accepted_per_round_checked", "accepted_per_round_equal", "mean_accepted")})
t = r.get("timing", {})
if t:
    print("plain tok/s", t["plain"]["tok_s"], "spec best", t["spec_best"])
    print("verify", [(w["n"], round(w["relative"], 3)) for w in t["verify_window_us"]], "draft step us", t["draft_step_us"])
PY

if command -v python3 >/dev/null && python3 -c "import torch, transformers" 2>/dev/null; then
  # shellcheck disable=SC2086
  timeout "${HF_TIMEOUT:-260}" python3 tools/gpu/hf_bench.py --out "$out/hf_bench.json" ${HF_ARGS:-} \
    >"$out/hf_bench.stdout" 2>"$out/hf_bench.stderr"
  echo "hf_bench exit: $?"
  python3 -c "
import json; r = json.load(open('$out/hf_bench.json'))
for k, v in r['runs'].items(): print(k, {x: v.get(x) for x in ('tok_s', 'greedy_identical_to_reference', 'error')})
" || tail -n 5 "$out/hf_bench.stderr"
else
  echo "hf_bench: torch/transformers not importable, skipped"
fi

sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [[ -n "$sanitizer" && "${MEMCHECK_TIMEOUT:-90}" -gt 0 ]]; then
  timeout "${MEMCHECK_TIMEOUT:-90}" "$sanitizer" --tool memcheck --error-exitcode 3 --log-file "$out/gen_memcheck.log" \
    "$exe" --no-timing --cases 1 >"$out/gen_memcheck.json" 2>&1
  echo "compute-sanitizer memcheck (1 case, gamma 1..8) exit: $? ($(tail -n1 "$out/gen_memcheck.log" 2>/dev/null))"
fi
exit $status
