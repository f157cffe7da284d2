#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh ran where the
# project builds: the demo pair on the GPU (specpipe_gpu_generate: golden tokens, logits
# vs the CPU forward, speculation gamma 1..8, tok/s, verify-window costs; its loop drafts
# on demand), then the actor engine as a user runs it (`specpipe bench --device cuda:0`:
# the mma GEMM and draft-ahead, their defaults on a device), then the Hugging Face
# baseline (tools/gpu/hf_bench.py: plain, static cache + compile, and assisted generate),
# then a short compute-sanitizer memcheck of one case. JSON files go to $OUT (or gpu-out/), and
# bench_summary.json puts the figures of the goals side by side.
# Exit status: non-zero if specpipe_gpu_generate or the engine bench failed.
# Environment: GEN_TIMEOUT, ENGINE_TIMEOUT, HF_TIMEOUT, MEMCHECK_TIMEOUT (seconds),
# GEN_ARGS, ENGINE_ARGS, HF_ARGS.
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
print("launched chain (draft-ahead) == chain:", r.get("launched_chain"))
for g, s in r.get("spec", {}).items():
    print("spec", g, {k: s[k] for k in ("output_equals_plain", "accepted_per_round_checked", "accepted_per_round_equal", "mean_accepted")})
t = r.get("timing", {})
if t:
    print("plain tok/s", t["plain"]["tok_s"], "spec best", t["spec_best"])
    print("verify", [(w["n"], round(w["relative"], 3)) for w in t["verify_window_us"]], "draft step us", t["draft_step_us"])
PY

# The engine: plain and draft-model speculation through the actors, medians of 5 runs,
# on the prompts Hugging Face runs below (the 16 public golden prompts, 96 tokens each), so
# its e2e tok/s (request in to last token out) and HF's wall clock time the same work.
python3 - tests/data/golden-public.json "$out/golden_prompts.jsonl" <<'PY'
import json, sys
with open(sys.argv[2], "w") as f:
    for c in json.load(open(sys.argv[1]))["cases"]:
        f.write(json.dumps({"prompt_ids": c["prompt_ids"], "max_tokens": 96}) + "\n")
PY
# shellcheck disable=SC2086
SPECPIPE_MODELS="$(pwd)/models" timeout "${ENGINE_TIMEOUT:-300}" "$bundle/bin/specpipe" bench --device cuda:0 \
  --prompts "$out/golden_prompts.jsonl" --json "$out/engine_bench.json" \
  ${ENGINE_ARGS:---repeat 5 --no-ngram --gammas 3,4,5} >"$out/engine_bench.txt" 2>&1 || status=1
echo "engine bench exit: $status"
grep -E "^(plain|draft model)" "$out/engine_bench.txt" || tail -n 5 "$out/engine_bench.txt"

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

# The goals' figures side by side (each ratio within this call).
python3 - "$out" <<'PY' || true
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except (OSError, ValueError):
        return {}
gen, engine, hf = load("gpu_generate.json"), load("engine_bench.json"), load("hf_bench.json")
s = {}
t = gen.get("timing", {})
if t:
    s["standalone_plain_tok_s"] = t["plain"]["tok_s"]
    s["standalone_spec_best"] = t["spec_best"]
rows = engine.get("results", [])
plain = next((r for r in rows if r["drafter"] == "plain"), None)
spec = [r for r in rows if r["drafter"] == "draft model" and r["identical_to_plain"]]
if plain:
    s["engine_plain_tok_s"] = plain["tok_per_s"]
if spec:
    best = max(spec, key=lambda r: r["speedup"])
    s["engine_spec_best"] = {k: best[k] for k in ("gamma", "tok_per_s", "speedup", "drafted_ahead", "rounds")}
    s["engine_all_identical_to_plain"] = all(r["identical_to_plain"] for r in rows)
runs = hf.get("runs", {})
for k, v in runs.items():
    if v.get("tok_s"):
        s[f"hf_{k}_tok_s"] = v["tok_s"]
hf_plain = runs.get("plain_bfloat16", {}).get("tok_s")  # the BF16 baseline, as ours
if hf_plain and plain:
    s["engine_plain_over_hf_plain"] = plain["tok_per_s"] / hf_plain
if hf_plain and t:
    s["standalone_plain_over_hf_plain"] = t["plain"]["tok_s"] / hf_plain
# Against the strongest Hugging Face run (eager, static cache + compile or assisted, any
# dtype), wall clock against wall clock: the engine's e2e tok/s, same prompts and tokens.
timed = {k: v["tok_s"] for k, v in runs.items() if v.get("tok_s")}
if timed and plain:
    best_key = max(timed, key=timed.get)
    s["hf_strongest"] = {"run": best_key, "tok_s": timed[best_key]}
    s["engine_plain_e2e_tok_s"] = plain["e2e_tok_per_s"]
    s["engine_plain_e2e_over_hf_strongest"] = plain["e2e_tok_per_s"] / timed[best_key]
    if spec:
        best_e2e = max(spec, key=lambda r: r["e2e_tok_per_s"])
        s["engine_spec_e2e"] = {"gamma": best_e2e["gamma"], "e2e_tok_s": best_e2e["e2e_tok_per_s"]}
        s["engine_spec_e2e_over_hf_strongest"] = best_e2e["e2e_tok_per_s"] / timed[best_key]
# Same work, same answer: the engine's plain tokens against the golden continuations.
try:
    want = [c["target_greedy_96"] for c in json.load(open("tests/data/golden-public.json"))["cases"]]
    got = engine.get("plain_outputs", [])
    if len(got) == len(want):
        s["engine_plain_identical_to_golden"] = sum(g == w[: len(g)] for g, w in zip(got, want))
except (OSError, ValueError, KeyError):
    pass
json.dump(s, open(os.path.join(out, "bench_summary.json"), "w"), indent=2)
print("summary:", json.dumps(s))
PY

sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [[ -n "$sanitizer" && "${MEMCHECK_TIMEOUT:-90}" -gt 0 ]]; then
  timeout "${MEMCHECK_TIMEOUT:-90}" "$sanitizer" --tool memcheck --error-exitcode 3 --log-file "$out/gen_memcheck.log" \
    "$exe" --no-timing --cases 1 >"$out/gen_memcheck.json" 2>&1
  echo "compute-sanitizer memcheck (1 case, gamma 1..8) exit: $? ($(tail -n1 "$out/gen_memcheck.log" 2>/dev/null))"
fi
exit $status
