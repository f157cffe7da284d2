#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh ran where the
# project builds: CUDA graphs and synthetic models (issue 6 items 2 and 3), one pass.
#   1. specpipe_gpu_generate --synthetic llama3-8b: random-weight Llama-3-8B shape, batch 1,
#      decode step vs the bandwidth floor, verify windows n = 1..9, graphs off and on,
#      graph vs eager logits bit for bit            -> synthetic_llama3-8b.json
#   2. the same for qwen3-0.6b, and llama3-8b with cuBLASLt (the default GEMM is mma) and
#      at context 2048
#                                                      -> synthetic_*.json
#   3. the demo pair with graphs (golden tokens, speculation gamma 1..8, graph vs eager
#      identity on every case, tok/s)                  -> gpu_generate_graphs.json
#   4. if time is left: compute-sanitizer memcheck of one case with graphs
# JSON goes to $OUT (or gpu-out/). Environment: CONTEXT (512), SYNTHETIC_RUNS, SYN_TIMEOUT, GEN_TIMEOUT,
# MEMCHECK_TIMEOUT (seconds), GEN_ARGS, MEMCHECK_AFTER (skip memcheck once this many
# seconds have passed). Exit status: non-zero if a step failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate graph_bench
gpu_environment graph_bench

status=0
# Each entry: output name, then the arguments. SYNTHETIC_RUNS (space-separated entries of
# name:arg,arg,...) replaces the default list.
runs="${SYNTHETIC_RUNS:-llama3-8b:--synthetic,llama3-8b qwen3-0.6b:--synthetic,qwen3-0.6b \
llama3-8b-cublaslt:--synthetic,llama3-8b,--gemm,cublaslt llama3-8b-ctx2048:--synthetic,llama3-8b,--context,2048}"
for entry in $runs; do
  model="${entry%%:*}"
  IFS=, read -r -a args <<<"${entry#*:}"
  [[ " ${args[*]} " == *" --context "* ]] || args+=(--context "${CONTEXT:-512}")
  timeout "${SYN_TIMEOUT:-90}" "$exe" "${args[@]}" \
    >"$out/synthetic_$model.json" 2>"$out/synthetic_$model.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  echo "synthetic $model (${args[*]}) exit: $rc (t=${SECONDS}s)"
  python3 - "$out/synthetic_$model.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
print(" error:", r.get("error"), "copy GB/s:", round(r.get("copy_bandwidth_GBps", 0)), "floor us:", round(r.get("floor_us", 0), 1))
for mode in ("eager", "graphs"):
    m = r.get(mode)
    if m:
        print(" ", mode, "decode us", round(m["decode_us"], 1), "vs floor", round(m["decode_vs_floor"], 3),
              "windows", [(w["n"], round(w["relative"], 3)) for w in m["windows"]])
print(" graph vs eager:", r.get("graph_vs_eager"), "goals:", r.get("goals"))
print(" breakdown (graphs):", [{k: round(v, 1) for k, v in b.items()} for b in r.get("breakdown_graphs", [])])
PY
done

# shellcheck disable=SC2086
timeout "${GEN_TIMEOUT:-150}" "$exe" ${GEN_ARGS:-} >"$out/gpu_generate_graphs.json" 2>"$out/gpu_generate_graphs.stderr"
rc=$?
[[ $rc -eq 0 ]] || status=1
echo "gpu_generate (graphs) exit: $rc (t=${SECONDS}s)"
python3 - "$out/gpu_generate_graphs.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
p = r.get("plain", {})
print("pass:", r.get("pass"), "error:", r.get("error"), "graphs:", r.get("graphs"))
print("plain:", {k: p.get(k) for k in ("identical", "near_ties", "mismatches", "worst_logits_vs_cpu")})
for g, s in r.get("spec", {}).items():
    print("spec", g, {k: s[k] for k in ("output_equals_plain", "accepted_per_round_equal", "mean_accepted")})
print("graph vs eager:", {k: v for k, v in r.get("graph_vs_eager", {}).items() if k != "problems"})
t = r.get("timing", {})
if t:
    print("plain tok/s", t["plain"]["tok_s"], "spec best", t["spec_best"])
    print("verify", [(w["n"], round(w["us"], 1), round(w["relative"], 3)) for w in t["verify_window_us"]],
          "draft step us", t["draft_step_us"])
PY

sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [[ -n "$sanitizer" && "$SECONDS" -lt "${MEMCHECK_AFTER:-200}" ]]; then
  timeout "${MEMCHECK_TIMEOUT:-60}" "$sanitizer" --tool memcheck --error-exitcode 3 --log-file "$out/graph_memcheck.log" \
    "$exe" --no-timing --cases 1 >"$out/graph_memcheck.json" 2>&1
  echo "compute-sanitizer memcheck (1 case, graphs) exit: $? ($(tail -n1 "$out/graph_memcheck.log" 2>/dev/null))"
else
  echo "memcheck skipped (t=${SECONDS}s)"
fi
exit $status
