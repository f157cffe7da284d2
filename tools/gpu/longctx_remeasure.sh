#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (tool specpipe,
# plugin specpipe_specpv): issue 17's re-measure of "a target trained for the context"
# (BENCHMARKS 7b "Next: the re-measure"), several cut points and both targets in one call
# of at most LIMIT seconds (default 580):
#   1. if a PARTS entry needs the trained target and $WORK_MODEL/config.json is not there
#      (or REUSE=0), tools/gpu/longctx_finetune.py trains it as stop 38 did (FINETUNE_ARGS,
#      default the replay `--steps 129,89,37,21`; --eval-prompt CUTS_FILE, whose every line
#      is kept out of the training text and whose first line is the loss's evaluation
#      prompt) -> $OUT/longctx_finetune.log; then its files tarred and split into 15 MiB
#      pieces $OUT/demo-target-long.tar.part-NN with their sha256 in the summary
#      (tools/gpu/join_weights.sh joins them here; WEIGHTS=1 also when it was not trained in this call).
#   2. each PARTS entry TARGET:CONTEXT:LINE (TARGET ft = the trained target, base = the
#      demo target stretched by YaRN x16 as the trained one, untrained; LINE = the line of
#      CUTS_FILE, tools/gpu/cut_prompts.py's prompts, 1 = the evaluation prompt of the
#      earlier runs), in order: tools/gpu/specpv_long_e2e.sh (plain, full-verify, ROWS,
#      default exact-2048; TOKENS new tokens, default 256) on that line cut to CONTEXT
#      tokens, YaRN x16 for every model. Each part's expected time (from the H100 costs
#      of stop 38's calls, below) is printed first; a part whose expected time exceeds
#      the time left is skipped, so the call ends inside LIMIT with what it finished.
#   3. tools/gpu/loop_report.py on each part (the fraction of the continuation in a
#      repeated n-gram loop, LOOP flagged), a table, and every part's bench JSON, the
#      loop report and the training summary merged into $OUT/longctx_remeasure.json.
# $OUT gets at most 5 files (the device returns 8): longctx_remeasure.json,
# longctx_finetune.log and the 3 weight pieces. DRY=1: print the plan and exit. REUSE=0:
# train even if $WORK_MODEL is there; TRAIN=0: never train (the ft parts are left out unless
# $WORK_MODEL is there: a warm machine after a call that trained).
# Exit status: non-zero if a step failed or a lossless row differs from plain.
set -uo pipefail
start=$(date +%s)
LIMIT=${LIMIT:-580}
TOKENS=${TOKENS:-256}
ROWS=${ROWS:-exact-2048}
PARTS=${PARTS:-"ft:130000:2 base:32768:1 ft:32768:1 base:32768:2 ft:32768:2 base:32768:3 ft:32768:3 base:32768:4 ft:32768:4"}
CUTS_FILE=${CUTS_FILE:?CUTS_FILE: tools/gpu/cut_prompts.py output}
[[ -f "$CUTS_FILE" ]] || { echo "longctx_remeasure: $CUTS_FILE missing"; exit 2; }
out="${OUT:-gpu-out}"
mkdir -p "$out"
model="${WORK_MODEL:-/tmp/demo-target-long}"
work="${REMEASURE_WORK:-/tmp/longctx_remeasure}"
rm -rf "$work"
mkdir -p "$work/json"
left() { echo $(( LIMIT - ($(date +%s) - start) )); }
status=0

# Expected seconds, from stop 38's H100 calls (bench/results/specpv_long_trained_h100_2026-11-27.json):
# the fine-tune 187 s (data 19, training 151, loss evaluations ~17); a row's prefill
# (ahead of its decode) a*L + b*L^2 fitted through 32,768 and 130,000 tokens: plain 3.52 /
# 59.9 s, a row with the draft model 4.31 / 73.4 s; decode at 1/rate linear in L between
# plain 217 / 49, full-verify 500 / 181, SpecPV exact 830 / 396 tok/s; 3 s a bench (engines, warm-ups).
expect_part() {  # context rows -> seconds
  python3 - "$1" "$2" "$TOKENS" <<'PY'
import sys
L, rows, tokens = int(sys.argv[1]), sys.argv[2].split(), int(sys.argv[3])
def fit(l, y1, y2, x1=32768, x2=130000):
    # y = a x + b x^2 through (x1, y1), (x2, y2)
    b = (y2 / x2 - y1 / x1) / (x2 - x1); a = y1 / x1 - b * x1
    return max(0.0, a * l + b * l * l)
def lin(l, y1, y2, x1=32768, x2=130000): return y1 + (y2 - y1) * (l - x1) / (x2 - x1)
t = fit(L, 3.52, 59.9) + tokens * max(lin(L, 1 / 217, 1 / 49), 1 / 217)
t += fit(L, 4.31, 73.4) + tokens * max(lin(L, 1 / 500, 1 / 181), 1 / 500)
for r in rows:
    t += fit(L, 4.31, 73.4) + tokens * max(lin(L, 1 / 830, 1 / 396), 1 / 830)
print(round(1.05 * t + 3))
PY
}
need_train=0
for p in $PARTS; do [[ ${p%%:*} == ft ]] && need_train=1; done
[[ "${REUSE:-1}" == 1 && -f "$model/config.json" ]] && need_train=0
if (( need_train )) && [[ "${TRAIN:-auto}" == 0 ]]; then  # TRAIN=0: never train here; the ft parts go
  echo "longctx_remeasure: TRAIN=0 and no $model/config.json: the ft parts are left out"
  PARTS=$(tr ' ' '\n' <<<"$PARTS" | grep -v '^ft:' | tr '\n' ' ')
  need_train=0
fi
echo "longctx_remeasure: plan ($TOKENS new tokens, rows plain full $ROWS, limit $LIMIT s):"
total=0
if (( need_train )); then total=192; echo "  fine-tune + weights: ~192 s (cumulative 192)"; fi
for p in $PARTS; do
  IFS=: read -r which ctx line <<<"$p"
  e=$(expect_part "$ctx" "$ROWS")
  total=$(( total + e ))
  echo "  $p: ~$e s (cumulative $total)"
done
(( total > LIMIT - 10 )) && echo "  (over the limit: the parts at the end are skipped if the time runs short)"
[[ "${DRY:-0}" == 1 ]] && exit 0
nvidia-smi -L 2>&1 | head -n 2

if (( need_train )); then
  timeout $(( $(left) - 60 )) python3 tools/gpu/longctx_finetune.py --out "$model" --eval-prompt "$CUTS_FILE" \
    --json "$work/longctx_finetune.json" ${FINETUNE_ARGS:---steps 129,89,37,21} >"$out/longctx_finetune.log" 2>&1
  rc=$?
  echo "longctx_finetune exit $rc after $(( $(date +%s) - start )) s"
  grep -E '^(data|model|phase|saved|\[)' "$out/longctx_finetune.log"
  [[ $rc -eq 0 ]] || { tail -n 30 "$out/longctx_finetune.log"; status=1; PARTS=$(tr ' ' '\n' <<<"$PARTS" | grep -v '^ft:' | tr '\n' ' '); }
fi
if [[ -f "$model/config.json" ]] && (( need_train )) || [[ "${WEIGHTS:-0}" == 1 && -f "$model/config.json" ]]; then
  tar -C "$(dirname "$model")" -cf - "$(basename "$model")" | split -b 15M -d - "$out/demo-target-long.tar.part-"
  (cd "$out" && sha256sum demo-target-long.tar.part-*) >"$work/weights.sha256"
  echo "weights: $(cat "$work/weights.sha256" | wc -l) pieces, $(cat "$out"/demo-target-long.tar.part-* | wc -c) bytes"
fi

for p in $PARTS; do
  IFS=: read -r which ctx line <<<"$p"
  e=$(expect_part "$ctx" "$ROWS")
  if (( $(left) < e + 10 )); then echo "== $p: skipped, ~$e s needed, $(left) s left"; continue; fi
  echo "== $p: $which target, line $line cut to $ctx tokens (~$e s expected, $(left) s left)"
  sed -n "${line}p" "$CUTS_FILE" >"$work/cut$line.jsonl"
  [[ -s "$work/cut$line.jsonl" ]] || { echo "$CUTS_FILE has no line $line"; status=1; continue; }
  target=()
  [[ $which == ft ]] && target=(TARGET_DIR="$model")
  t0=$(date +%s)
  env "${target[@]}" OUT="$work/json" FACTOR=16 CONTEXT="$ctx" TOKENS="$TOKENS" ROWS="$ROWS" PROMPT_FILE="$work/cut$line.jsonl" \
    JSON="$which-$ctx-$line.json" BENCH_TIMEOUT=$(( $(left) - 8 )) bash tools/gpu/specpv_long_e2e.sh || status=1
  echo "$p $e $(( $(date +%s) - t0 ))" >>"$work/walls.txt"
done

python3 tools/gpu/loop_report.py "$work"/json/*.json --tokenizer models/demo-target/tokenizer.json --show 120 --json "$work/loops.json" || true
python3 - "$work" "$out" "$CUTS_FILE" "$TOKENS" "$ROWS" <<'PY' || status=1
import json, os, pathlib, sys
work, out, cuts, tokens, rows = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
starts = [json.loads(l).get("start") for l in open(cuts) if l.strip()]
loops = json.load(open(work / "loops.json")) if (work / "loops.json").exists() else {}
doc = {"tokens": tokens, "rows": rows, "cuts_file": cuts, "cut_starts": starts, "parts": {}}
walls = {}
if (work / "walls.txt").exists():
    for l in open(work / "walls.txt"):
        name, expected, wall = l.split()
        walls[name] = (int(expected), int(wall))
print(f"{'part, row':26s} {'start':16s} {'full dec':>9s} {'row dec':>9s} {'ratio':>6s} {'rounds p/f':>10s} {'rollbacks':>9s} {'loop':>5s} {'tail':>5s} {'= plain':>7s} {'exp/wall s':>10s}")
for name, (expected, wall) in walls.items():
    which, ctx, line = name.split(":")
    path = work / "json" / f"{which}-{ctx}-{line}.json"
    entry = {"target": which, "context": int(ctx), "line": int(line), "start": starts[int(line) - 1],
             "expected_s": expected, "wall_s": wall}
    if path.exists():
        b = json.load(open(path))
        entry["bench"] = b
        entry["loops"] = loops.get(str(path), [])
        res = {r["drafter"]: r for r in b["results"]}
        full = res.get("draft model")
        for r in b["results"]:
            if r["drafter"] in ("plain", "draft model") or not full:
                continue
            v = r.get("verify_view") or {"partial_rounds": 0, "full_rounds": r["rounds"], "rollbacks": 0, "rolled_back_tokens": 0}
            lp = entry["loops"][0] if entry["loops"] else {}
            print(f"{name + ' ' + r['drafter']:26.26s} {entry['start']:16.16s} {full['tok_per_s']:9.1f} {r['tok_per_s']:9.1f} "
                  f"{r['tok_per_s'] / full['tok_per_s']:5.2f}x {v['partial_rounds']:4d}/{v['full_rounds']:<5d} "
                  f"{v['rollbacks']:4d} ({v['rolled_back_tokens']:3d}) {100 * lp.get('loop_fraction', 0):4.0f}% {lp.get('periodic_tail', 0):5d} "
                  f"{str(r['identical_to_plain']):>7s} {expected:4d}/{wall:<4d}" + ("  LOOP" if lp.get("loop") else ""))
    else:
        print(f"{name:26s} no JSON (failed or cut short; expected {expected} s, ran {wall} s)")
    doc["parts"][name] = entry
if (work / "longctx_finetune.json").exists():
    doc["finetune"] = json.load(open(work / "longctx_finetune.json"))
if (work / "weights.sha256").exists():
    doc["weights_sha256"] = dict(reversed(l.split()) for l in open(work / "weights.sha256"))
json.dump(doc, open(out / "longctx_remeasure.json", "w"), indent=1)
print(f"-> {out / 'longctx_remeasure.json'}")
PY
echo "longctx_remeasure: $(( $(date +%s) - start )) s in all, status $status"
exit $status
