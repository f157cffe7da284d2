#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (tool specpipe,
# plugin specpipe_specpv) with the prompt file at PROMPT_FILE (made here with
# `python3 tools/gpu/code_prompt.py FILE`): issue 17's "a target trained for the context",
# in one call of at most LIMIT seconds (default 580):
#   1. tools/gpu/longctx_finetune.py trains the demo target under YaRN x16 on long
#      sequences of site-packages Python (never the standard library, which the prompt
#      is) for TRAIN_SECONDS (default 150) -> $WORK_MODEL (default /tmp/demo-target-long);
#      log and JSON into $OUT (longctx_finetune.log / .json).
#   2. tools/gpu/specpv_long_e2e.sh with TARGET_DIR=that model (the demo draft stretched by
#      YaRN as before) at CONTEXT (default 130000), ROWS (default exact-2048
#      approximate-2048) -> $OUT/specpv_long_ft.json.
#   3. If SMALL_CONTEXT is set (e.g. 32768) and the time left allows (~SMALL_NEED s each,
#      default 90), the same at SMALL_CONTEXT with SMALL_ROWS (default exact-2048) for the
#      stretched-but-not-trained target, then the trained one, so the comparison is within
#      one call; YaRN x16 throughout (the draft, and the untrained target, stretched x16
#      whatever the context, as the trained target is) -> $OUT/specpv_long_base_small.json, $OUT/specpv_long_ft_small.json.
# Exit status: non-zero if a step failed or an output differs from plain.
set -uo pipefail
start=$(date +%s)
LIMIT=${LIMIT:-580}
out="${OUT:-gpu-out}"
mkdir -p "$out"
model="${WORK_MODEL:-/tmp/demo-target-long}"
left() { echo $(( LIMIT - ($(date +%s) - start) )); }
status=0
nvidia-smi -L 2>&1 | head -n 2
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'

timeout $(( $(left) - 300 )) python3 tools/gpu/longctx_finetune.py --out "$model" --seconds "${TRAIN_SECONDS:-150}" \
  --eval-prompt "$PROMPT_FILE" --json "$out/longctx_finetune.json" ${FINETUNE_ARGS:-} >"$out/longctx_finetune.log" 2>&1
rc=$?
echo "longctx_finetune exit $rc after $(( $(date +%s) - start )) s"
grep -E '^(data|model|phase|saved|\[)' "$out/longctx_finetune.log"
[[ $rc -eq 0 ]] || { tail -n 30 "$out/longctx_finetune.log"; exit 1; }

echo "== trained target at ${CONTEXT:-130000} ($(left) s left)"
FACTOR=16 CONTEXT=${CONTEXT:-130000} TARGET_DIR="$model" ROWS="${ROWS:-exact-2048 approximate-2048}" JSON=specpv_long_ft.json \
  BENCH_TIMEOUT=$(( $(left) - 15 )) bash tools/gpu/specpv_long_e2e.sh || status=1

if [[ -n "${SMALL_CONTEXT:-}" ]]; then
  for which in base ft; do
    if (( $(left) < ${SMALL_NEED:-90} )); then echo "== $which at $SMALL_CONTEXT: skipped, $(left) s left"; continue; fi
    echo "== $which target at $SMALL_CONTEXT ($(left) s left)"
    target=()
    [[ $which == ft ]] && target=(TARGET_DIR="$model")
    env "${target[@]}" FACTOR=16 CONTEXT="$SMALL_CONTEXT" ROWS="${SMALL_ROWS:-exact-2048}" JSON="specpv_long_${which}_small.json" \
      BENCH_TIMEOUT=$(( $(left) - 10 )) bash tools/gpu/specpv_long_e2e.sh || status=1
  done
fi
echo "longctx_e2e: $(( $(date +%s) - start )) s in all, status $status"
exit $status
