#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (tool specpipe,
# plugin specpipe_specpv) with the prompt file packed into the bundle (below): SpecPV end
# to end over the host tier at long context (issue 17's goal: exact >= 2x full-verify
# speculation where K/V stream from the host, 128K+), in one `specpipe bench`, so plain
# decoding is run once and every row is compared with it:
#   plain, full-verify speculation (draft model, gamma GAMMA), then one row per entry of
#   ROWS, each a pipeline file (bench --extra-config):
#     <mode>-<budget>            SpecPV exact / approximate with budget B split as in
#                                BENCHMARKS 7 (B/16 sink, B/2 retrieved, B/4 window,
#                                3B/16 buffer, a full round every REFRESH partial ones)
#     <mode>-<budget>-noahead    the same with the drafter's draft-ahead off
#     <mode>-<budget>-ngram      the same with the n-gram drafter (no device drafting)
#     <mode>-<budget>-mass       the same with retrieval by attention mass (retrieval_by:
#                                attention_mass) instead of the plugin's default, Quest's
#                                bound; <mode>-<budget>-quest names the default explicitly
#     full-noahead, full-ngram   full verification with those drafters
#   -> $OUT/specpv_long.json (bench's JSON; JSON=name.json for another name) and a
#   summary on stdout.
# The models: copies of the demo pair (trained at 8K: max_position_embeddings 8192) whose
# config.json extends positions as Hugging Face users do, when CONTEXT + TOKENS pass 8,192:
# rope_parameters {rope_type: SCALING (yarn), factor: FACTOR, original_max_position_embeddings:
# 8192} and max_position_embeddings 8192 x FACTOR (FACTOR: the smallest power of 2 that
# covers the context, unless given). The weights are linked, not copied.
# TARGET_DIR=path: that target instead, as it is (its config.json must cover the context:
# tools/gpu/longctx_finetune.py's output, trained under YaRN x16), the draft stretched as
# above.
# The prompt: PROMPT_FILE (default $bundle/code_prompt.jsonl, made here with
# `python3 tools/gpu/code_prompt.py gpu-bundle-x/code_prompt.jsonl` and packed with the
# bundle: concatenated Python standard-library sources), cut to its first CONTEXT tokens
# by the engine's tokenizer (bench --prompt-tokens; CONTEXT=0 keeps it whole);
# PROMPT=golden7k instead takes the 7,000-token golden prompt and the models as they are.
# The pool: POOL tokens on the GPU (default 4096), the rest of the K/V on the pinned host
# tier (HOST_BYTES, default what CONTEXT + TOKENS + 4,096 tokens need), RING_SLOTS slots,
# scheduler.prefill_chunk 1024; the prefix cache off in every row (SpecPV needs it off).
# Each row: a warm-up on the prompt's first WARMUP tokens (default 512: every row
# prefills the whole prompt once more otherwise), then REPEAT runs (median). Decode tok/s
# excludes the prefill of both models (the draft model's catch-up of the prompt at its
# first proposal counts as prefill); e2e tok/s includes it.
# Exit status: non-zero if the bench failed or an output differs from plain.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe specpv_long_e2e
gpu_engine_env
gpu_environment specpv_long_e2e
status=0

CONTEXT=${CONTEXT:-131072}
TOKENS=${TOKENS:-128}
GAMMA=${GAMMA:-4}
POOL=${POOL:-4096}
REPEAT=${REPEAT:-1}
WARMUP=${WARMUP:-512}
REFRESH=${REFRESH:-4}
ROWS=${ROWS:-exact-2048 approximate-2048}
work="${WORK:-/tmp/specpv_long_e2e}"  # pipeline files, model copies, the bench's log (not in $OUT)
rm -rf "$work"
mkdir -p "$work"

target=demo-target draft=demo-draft
if [[ "${PROMPT:-code}" == golden7k ]]; then
  long_golden_prompts "$work/prompt.jsonl"
  prompt="$work/prompt.jsonl" cut=()
  context=7000
else
  prompt="${PROMPT_FILE:-$bundle/code_prompt.jsonl}"
  [[ -f "$prompt" ]] || { echo "specpv_long_e2e: $prompt missing (tools/gpu/code_prompt.py)"; exit 2; }
  cut=(--prompt-tokens "$CONTEXT")
  context=$CONTEXT
fi
if (( context + TOKENS > 8192 )); then
  factor=${FACTOR:-1}
  if [[ -z "${FACTOR:-}" ]]; then while (( 8192 * factor < context + TOKENS + 64 )); do factor=$((factor * 2)); done; fi
  for m in demo-target demo-draft; do
    mkdir -p "$work/models/$m"
    for f in models/$m/*; do [[ "$(basename "$f")" == config.json ]] || ln -sf "$(pwd)/$f" "$work/models/$m/"; done
    python3 - "models/$m/config.json" "$work/models/$m/config.json" "${SCALING:-yarn}" "$factor" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
original = c["max_position_embeddings"]
c["rope_parameters"] = {"rope_theta": c["rope_parameters"]["rope_theta"], "rope_type": sys.argv[3],
                        "factor": float(sys.argv[4]), "original_max_position_embeddings": original}
c["max_position_embeddings"] = original * int(sys.argv[4])
json.dump(c, open(sys.argv[2], "w"), indent=2)
print(f"{sys.argv[2]}: rope_parameters {c['rope_parameters']}, max_position_embeddings {c['max_position_embeddings']}")
PY
  done
  target="$work/models/demo-target" draft="$work/models/demo-draft"
fi
if [[ -n "${TARGET_DIR:-}" ]]; then
  [[ -f "$TARGET_DIR/config.json" ]] || { echo "specpv_long_e2e: $TARGET_DIR/config.json missing"; exit 2; }
  target="$(cd "$TARGET_DIR" && pwd)"
  echo "specpv_long_e2e: target $target (TARGET_DIR, as it is), draft $draft"
fi

host_bytes=${HOST_BYTES:-$(( (context + TOKENS + 4096) * 8192 ))}  # the demo target: 8 KiB of FP32 K/V a token
base="version: 1
models: {target: $target, draft: $draft}
kv: {tokens: $POOL, prefix_cache: false}
offload: {enable: true, host_bytes: $host_bytes, ring_slots: ${RING_SLOTS:-4}}
scheduler: {prefill_chunk: 1024}"
printf '%s\n' "$base" >"$work/base.yaml"
extra=()
for row in $ROWS; do
  IFS=- read -r mode budget variant <<<"$row"
  drafter="slots: {drafter: {type: model}}"
  [[ "$mode" == full ]] && variant=$budget
  [[ "$variant" == noahead ]] && drafter="slots: {drafter: {type: model, draft_ahead: 'off'}}"
  [[ "$variant" == ngram ]] && drafter="slots: {drafter: {type: ngram}}"
  by=""
  [[ "$variant" == quest ]] && by=", retrieval_by: quest"
  [[ "$variant" == mass ]] && by=", retrieval_by: attention_mass"
  yaml="$base"
  if [[ "$mode" == full ]]; then
    yaml+=$'\n'"$drafter"
  else
    b=$budget
    yaml+="
plugins:
  specpv:
    path: $(pwd)/$bundle/plugins/libspecpipe_specpv.so
    config: {mode: $mode, sink: $((b / 16)), retrieval: $((b / 2)), window: $((b / 4)), buffer: $((b * 3 / 16)), refresh_interval: $REFRESH$by}
slots:
  verify_view: {type: specpv}
  drafter: $(sed 's/^slots: {drafter: //; s/}$//' <<<"$drafter")"
  fi
  printf '%s\n' "$yaml" >"$work/$row.yaml"
  extra+=(--extra-config "$work/$row.yaml")
done

echo "specpv_long_e2e: context $context, $TOKENS new tokens, pool $POOL tokens, host tier $host_bytes bytes, rows: plain, full, $ROWS"
start=$(date +%s)
timeout "${BENCH_TIMEOUT:-560}" "$bundle/bin/specpipe" bench --config "$work/base.yaml" --device "$SPECPIPE_TEST_DEVICE" \
  --prompts "$prompt" "${cut[@]}" --max-tokens "$TOKENS" --gammas "$GAMMA" --repeat "$REPEAT" \
  --warmup-tokens "$WARMUP" --no-ngram "${extra[@]}" --json "$out/${JSON:-specpv_long.json}" >"$work/bench.txt" 2>&1
rc=$?
echo "bench exit $rc after $(( $(date +%s) - start )) s"
[[ $rc -eq 0 ]] || { status=1; tail -n 20 "$work/bench.txt"; }
python3 - "$out/${JSON:-specpv_long.json}" <<'PY' || status=1
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["results"]
full = next((r for r in rows if r["drafter"] == "draft model"), None)
def ms_per_round(r, key): return r[key] / max(1, r["rounds"])
for r in rows:
    v = r.get("verify_view", {})
    h = v.get("host_tier", {})
    line = (f"{r['drafter']:24s} decode {r['tok_per_s']:8.1f} tok/s e2e {r['e2e_tok_per_s']:7.2f} prefill {r['prefill_ms']:9.1f} ms "
            f"| rounds {r['rounds']:4d} tok/round {r['tokens_per_target_step']:.2f} accept {100 * r['acceptance_rate']:5.1f}% "
            f"| draft {r['draft_ms']:8.1f} verify {r['verify_ms']:8.1f} msg {r['messaging_ms']:8.1f} commit {r['commit_ms']:6.1f} ms "
            f"| identical {r['identical_to_plain']}")
    if full and r is not full and r["drafter"] != "plain":
        line += f" | vs full: decode {r['tok_per_s'] / full['tok_per_s']:.2f}x e2e {r['e2e_tok_per_s'] / full['e2e_tok_per_s']:.3f}x"
    print(line)
    if v:
        print(f"{'':24s} {v['mode']}: {v['partial_rounds']} partial / {v['full_rounds']} full rounds, acceptance "
              f"{100 * v['partial_acceptance']:.1f}% partial / {100 * v['full_acceptance']:.1f}% full, rollbacks {v['rollbacks']} "
              f"({v['rolled_back_tokens']} tokens), refreshes {v['refreshes']}, forced full {v['forced_full']}; verify ms "
              f"partial {v['partial_verify_ms']:.1f} ({v['partial_verify_ms'] / max(1, v['partial_rounds']):.2f} a round) "
              f"full {v['full_verify_ms']:.1f} ({v['full_verify_ms'] / max(1, v['full_rounds']):.2f} a round); host bytes "
              f"partial {h.get('partial_host_bytes')} full {h.get('full_host_bytes')} view copies {h.get('view_copy_bytes')}, "
              f"fallbacks {h.get('host_fallbacks')}, dropped {h.get('view_dropped_blocks')}")
        if "retrieval" in r:
            print(f"{'':24s} retrieval: {r['retrieval']}")
    elif r["drafter"] != "plain":
        print(f"{'':24s} verify {ms_per_round(r, 'verify_ms'):.2f} ms a round")
    if "offload" in r:
        o = r["offload"]
        print(f"{'':24s} offload: {o.get('bytes_to_host')} B to host, ring {o.get('ring_loads')} loads, "
              f"{o.get('ring_stalls')} stalls ({o.get('ring_stall_ms', 0):.1f} ms), layerwise prefills {o.get('layerwise_prefills')}")
print("all identical to plain:", all(r["identical_to_plain"] for r in rows), "| wall", round(d["wall_s"], 1), "s")
PY
exit $status
