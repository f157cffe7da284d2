#!/usr/bin/env bash
# SpecPV on the CPU (docs/BENCHMARKS.md section 7): the long golden prompts (3,000 and
# 7,000 tokens, 64 new tokens, EOS ignored) decoded plainly, with full-verification
# speculation (draft model, gamma 4) and with SpecPV partial views of 256 / 512 / 1,024
# tokens in both modes. One `specpipe generate` per configuration and prompt (one
# prefill each; no warm-up), its summary lines in $OUT/<config>-<prompt>.txt.
#
#   bench/specpv_bench.sh [build dir] [out dir]
# Budget split: sink 1/16, retrieval 1/2, window 1/4, buffer 3/16 of the total;
# refresh_interval 4 (a full round after every 4 partial ones).
# RETRIEVAL_BY=quest|attention_mass picks the plugin's retrieval (unset: its default; the
# rows are then named specpv-<budget>-<mode>-<retrieval_by>), MODES="exact" limits the modes.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-/tmp/specpv-bench}
mkdir -p "$OUT"
PLUGIN=$(realpath "$BUILD/plugins/specpv/libspecpipe_specpv.so")
mapfile -t PROMPTS < <(python3 -c '
import json
for line in open("bench/prompts/long.jsonl"):
    print(",".join(map(str, json.loads(line)["prompt_ids"])))')
run() {  # name, yaml, extra args...
  local name=$1 yaml=$2
  shift 2
  printf '%s\n' "$yaml" > "$OUT/$name.yaml"
  for p in "${!PROMPTS[@]}"; do
    "$BUILD/apps/specpipe" generate --config "$OUT/$name.yaml" --prompt-ids "${PROMPTS[$p]}" --max-tokens 64 \
      --ignore-eos "$@" > "$OUT/$name-$p.out" 2>/dev/null || true
    grep -E '^(prompt tokens|rounds|verify_view|time):' "$OUT/$name-$p.out" > "$OUT/$name-$p.txt" || true
    echo "== $name prompt $p"; cat "$OUT/$name-$p.txt"
  done
}
if [[ -z "${SKIP_BASELINE:-}" ]]; then  # SKIP_BASELINE=1: the SpecPV rows only
  run plain "version: 1" --no-spec
  run full "version: 1"
fi
by=${RETRIEVAL_BY:+, retrieval_by: $RETRIEVAL_BY}
for budget in 256 512 1024; do
  for mode in ${MODES:-exact approximate}; do
    run "specpv-$budget-$mode${RETRIEVAL_BY:+-$RETRIEVAL_BY}" "version: 1
plugins:
  specpv:
    path: $PLUGIN
    config: {mode: $mode, sink: $((budget / 16)), retrieval: $((budget / 2)), window: $((budget / 4)), buffer: $((budget * 3 / 16)), refresh_interval: 4$by}
slots:
  verify_view:
    type: specpv"
  done
done
