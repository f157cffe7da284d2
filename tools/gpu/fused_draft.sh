#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: the fused draft
# step (model/cuda/fused_step.h) against the per-kernel draft, in one call.
#   1. specpipe_gpu_generate --fused-draft: golden tokens, speculation == plain for gamma
#      1..8 with the fused drafter, the fused draft's logits and tokens against the
#      per-kernel draft (fused_draft_vs_kernels), timings (plain, speculative, draft step)
#   2. specpipe_gpu_generate without it: the same timings, same machine, same call
#   3. compute-sanitizer memcheck of one case with the fused drafter; racecheck only with
#      RACECHECK=1 (on an H100 it ran past 240 s for one case, past 540 s with
#      --fused-blocks 8, and with --kernel-name kns=fused_step_kernel the sanitizer
#      itself failed: "Internal Sanitizer Error")
# JSON and logs go to $OUT (or gpu-out/). FUSED_ARGS adds options to both runs (e.g.
# --fused-blocks 64), SKIP_TIMING=1 leaves the timings out, SANITIZE=0 the sanitizers.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate fused_draft
status=0
timing=()
[[ "${SKIP_TIMING:-0}" == 1 ]] && timing=(--no-timing)
# shellcheck disable=SC2086
timeout "${GEN_TIMEOUT:-240}" "$exe" --fused-draft "${timing[@]}" ${FUSED_ARGS:-} >"$out/fused.json" \
  2>"$out/fused.stderr" || status=1
echo "fused run exit: $status"
if [[ "${SKIP_TIMING:-0}" != 1 ]]; then
  # shellcheck disable=SC2086
  timeout "${GEN_TIMEOUT:-240}" "$exe" --cases 16 ${BASE_ARGS:-} >"$out/kernels.json" 2>"$out/kernels.stderr" ||
    status=1
  echo "per-kernel run exit: $status"
fi
python3 - "$out" <<'PY' || true
import json, os, sys
out = sys.argv[1]
for name in ("fused.json", "kernels.json"):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        continue
    try:
        r = json.load(open(path))
    except Exception as e:
        print(name, "unreadable:", e)
        continue
    print("==", name, "pass:", r.get("pass"), "error:", r.get("error"), "fused:", r.get("draft_fused_step"))
    p = r.get("plain", {})
    print(" plain:", {k: p.get(k) for k in ("identical", "near_ties", "mismatches")})
    for g, s in r.get("spec", {}).items():
        print(" spec", g, {k: s[k] for k in ("output_equals_plain", "accepted_per_round_equal", "mean_accepted")})
    if "fused_draft_vs_kernels" in r:
        f = dict(r["fused_draft_vs_kernels"])
        f.pop("divergences", None)
        print(" fused vs kernels:", f)
    t = r.get("timing", {})
    if t:
        print(" plain tok/s", round(t["plain"]["tok_s"]), "spec best", t["spec_best"])
        print(" draft step us", t["draft_step_us"], "chain4 us/token", t["draft_chain4_us_per_token"])
        print(" spec by gamma", {g: round(v["tok_s"]) for g, v in t["spec"].items()})
PY
sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [[ -n "$sanitizer" && "${SANITIZE:-1}" != 0 ]]; then
  tools=(memcheck)
  [[ "${RACECHECK:-0}" == 1 ]] && tools+=(racecheck)
  for tool in "${tools[@]}"; do
    timeout "${SANITIZER_TIMEOUT:-240}" "$sanitizer" --tool "$tool" --error-exitcode 3 \
      --log-file "$out/fused_$tool.log" "$exe" --fused-draft --no-timing --cases 1 >"$out/fused_$tool.json" 2>&1
    echo "compute-sanitizer $tool (fused draft, 1 case, gamma 1..8) exit: $? ($(tail -n1 "$out/fused_$tool.log" 2>/dev/null))"
  done
fi
exit $status
