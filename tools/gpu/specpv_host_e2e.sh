#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (tools
# specpv_offload_test specpipe_gpu_generate specpipe, plugin specpipe_specpv): SpecPV
# over the host tier on the device (issue 17 item 5), in one go:
#   1. specpv_offload_test with SPECPIPE_TEST_DEVICE=cuda:0: exact SpecPV through a
#      192-token pool and a pinned host tier == the golden tokens, with partial rounds,
#      rollbacks below the host boundary, host-tier blocks read from view copies and 0
#      bytes streamed by partial rounds; the no-room fallback; a view-preparation error
#      failing its request -> $OUT/specpv_offload_test.txt;
#   2. specpipe_gpu_generate --offload-check: a rollback below the host boundary without
#      SpecPV (a host block back to the pool, block summaries asked for while that copy
#      is queued), bit for bit equal to all-on-GPU, ring on the copy stream and in line
#      -> $OUT/offload_check.json;
#   3. end to end (`specpipe bench`, the demo pair, the 7,000-token golden prompt, E2E_TOKENS
#      new tokens, a POOL-token GPU pool so most K/V live on the host tier): plain and
#      full-verify speculation, then SpecPV exact and approximate per budget in E2E_BUDGETS,
#      each with its own plain baseline in the same process -> $OUT/e2e_host_<row>.json.
# Exit status: non-zero if a test, the check or a bench run failed.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpv_offload_test specpv_host_e2e
gpu_engine_env
gpu_environment specpv_host_e2e
status=0

timeout "${SUITE_TIMEOUT:-180}" "$bundle/bin/specpv_offload_test" --gtest_brief=1 >"$out/specpv_offload_test.txt" 2>&1
rc=$?
echo "specpv_offload_test exit: $rc ($(grep -E '^\[  (PASSED|FAILED)' "$out/specpv_offload_test.txt" | tr '\n' ' '))"
[[ $rc -eq 0 ]] || { status=1; grep -E "Failure|FAILED|error|Expected|Which is|actual" "$out/specpv_offload_test.txt" | head -n 30; }

if [[ "${CHECK:-1}" != 0 ]]; then
  timeout "${CHECK_TIMEOUT:-120}" "$bundle/bin/specpipe_gpu_generate" --offload-check --synthetic "${SHAPE:-qwen3-0.6b}" \
    --context "${CONTEXT:-1000}" >"$out/offload_check.json" 2>"$out/offload_check.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  python3 - "$out/offload_check.json" "$rc" <<'PY' || { echo "offload_check: exit $rc, no report"; tail -n 5 "$out/offload_check.stderr"; }
import json, sys
r = json.load(open(sys.argv[1]))
for part in ("target", "synthetic"):
    for v in r.get(part, {}).get("variants", []):
        print(f"offload_check {r[part]['model']:20s} slots {v['ring_slots']} overlap {str(v['overlap']):5s}: identical "
              f"{v['bitwise_identical']}, back to pool {v['blocks_to_pool']}")
print("offload_check pass:", r.get("pass"), "error:", r.get("error"), "exit", sys.argv[2])
PY
fi

long_golden_prompts "$out/long7k.jsonl"
host="version: 1
kv: {tokens: ${POOL:-1536}, prefix_cache: false}
offload: {enable: true, host_bytes: 134217728, ring_slots: 4}"
e2e() {  # name, yaml
  printf '%s\n' "$2" >"$out/e2e_host_$1.yaml"
  timeout "${E2E_TIMEOUT:-120}" "$bundle/bin/specpipe" bench --config "$out/e2e_host_$1.yaml" --device "$SPECPIPE_TEST_DEVICE" \
    --prompts "$out/long7k.jsonl" --max-tokens "${E2E_TOKENS:-128}" --gammas 4 --repeat "${E2E_REPEAT:-3}" --no-ngram \
    --json "$out/e2e_host_$1.json" >"$out/e2e_host_$1.txt" 2>&1
  local rc=$?
  [[ $rc -eq 0 ]] || status=1
  echo "== e2e $1 exit $rc"
  grep -E '^(plain|draft model|verify_view|offload)' "$out/e2e_host_$1.txt" || tail -n 3 "$out/e2e_host_$1.txt"
}
e2e full "$host"
for budget in ${E2E_BUDGETS:-512 1024}; do
  for mode in exact approximate; do
    e2e "specpv-$budget-$mode" "$host
$(specpv_yaml "$budget" "$mode")"
  done
done
# One JSON to bring back: every row's figures (the per-run files stay on the machine).
python3 - "$out" <<'PY' || status=1
import glob, json, os, sys
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(out, "e2e_host_*.json"))):
    d = json.load(open(f))
    rows[os.path.basename(f)[9:-5]] = {"device": d["device"], "plain_step_ms": d["plain_step_ms"], "results": d["results"]}
json.dump(rows, open(os.path.join(out, "specpv_host_e2e.json"), "w"), indent=1)
for name, r in rows.items():
    plain = r["results"][0]
    for x in r["results"][1:]:
        v = x.get("verify_view", {})
        print(f"{name:26s} plain e2e {plain['e2e_tok_per_s']:8.1f} tok/s | spec e2e {x['e2e_tok_per_s']:8.1f} "
              f"({x['e2e_speedup']:.2f}x plain), decode {x['tok_per_s']:8.1f}, verify {x['verify_ms']:.1f} ms, "
              f"identical {x['identical_to_plain']}, view {json.dumps(v)[:300]}")
PY
exit $status
