#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (a bundle with
# specpipe): speculative decoding with sampling on the device, next to greedy, through
# `specpipe generate` (one request, the demo pair): for each temperature of TEMPS and each
# mode of MODES, REPEAT runs of MAX_TOKENS tokens (EOS ignored) on each of three code
# prompts; logs each run's decode tokens/s, tokens per target step and the draft / verify
# ms, then prints the medians by (temperature, mode), draft and verify ms a round included.
# Modes: plain; model (the draft model at GAMMA); ngram (n-gram at GAMMA); model_noahead,
# model_fused, model_fused_noahead (the draft model under a pipeline file with
# slots.drafter.draft_ahead off, models.draft_fused_step on, or both).
# Environment: TEMPS ("0 0.8"), MODES ("plain model ngram"), GAMMA (4), MAX_TOKENS (256),
# REPEAT (3), SEED (1), DEVICE (cuda:0), OUT ($OUT or gpu-out/).
# The draft knobs at T 0.8 (BENCHMARKS 8):
#   TEMPS=0.8 REPEAT=2 MODES="plain model model_noahead model_fused model_fused_noahead" bash tools/gpu/sampled_spec.sh
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe sampled_spec
gpu_environment sampled_spec
export SPECPIPE_MODELS="${SPECPIPE_MODELS:-$PWD/models}"
gamma="${GAMMA:-4}"
log="$out/sampled_spec.txt"
: >"$log"
# The draft model's pipeline files: name fused_step draft_ahead
knob() { printf 'version: 1\nmodels:\n  draft_fused_step: %s\nslots:\n  drafter:\n    draft_ahead: %s\n' "$2" "$3" >"$out/$1.yaml"; }
knob noahead false off; knob fused true auto; knob fused_noahead true off
prompts=("def fibonacci(n):" "import os
def list_files(path):" "class Stack:
    def __init__(self):")
for t in ${TEMPS:-0 0.8}; do
  for mode in ${MODES:-plain model ngram}; do
    case $mode in
      plain) args=(--no-spec) ;;
      model) args=(--drafter model --gamma "$gamma") ;;
      model_*) args=(--config "$out/${mode#model_}.yaml" --drafter model --gamma "$gamma") ;;
      ngram) args=(--drafter ngram --gamma "$gamma") ;;
      *) echo "sampled_spec: unknown mode $mode" >&2; exit 2 ;;
    esac
    for ((r = 0; r < ${REPEAT:-3}; ++r)); do
      for ((p = 0; p < ${#prompts[@]}; ++p)); do
        s=$("$exe" generate --device "${DEVICE:-cuda:0}" "${args[@]}" --temperature "$t" --seed "$((${SEED:-1} + p))" \
          --max-tokens "${MAX_TOKENS:-256}" --ignore-eos --prompt "${prompts[$p]}" 2>/dev/null | grep -E "decode:|tokens per target step|^time:" | tr '\n' ' ')
        echo "T=$t mode=$mode prompt=$p run=$r $s" >>"$log"
      done
    done
  done
done
python3 - "$log" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"T=(\S+) mode=(\S+) .*?decode: ([0-9.]+) tok/s", line)
    if not m: print("no stats:", line.strip()); continue
    tps = re.search(r"tokens per target step: ([0-9.]+)", line)
    rounds = re.search(r"rounds: (\d+)", line)
    ms = re.search(r"draft ([0-9.]+) ms \| verify ([0-9.]+) ms", line)
    n = int(rounds.group(1)) if rounds else 0
    draft, verify = (float(ms.group(1)) / n, float(ms.group(2)) / n) if ms and n else (0.0, 0.0)
    rows.setdefault((m.group(1), m.group(2)), []).append((float(m.group(3)), float(tps.group(1)) if tps else 1.0, draft, verify))
med = lambda v, i: statistics.median(x[i] for x in v)
print("| temperature | mode | runs | decode tok/s (median) | x plain | tokens per target step | draft / verify ms a round |")
print("|---|---|---|---|---|---|---|")
for (t, mode), v in rows.items():
    plain = med(rows.get((t, "plain"), v), 0)
    rounds = f"{med(v, 2):.3f} / {med(v, 3):.3f}" if mode != "plain" else "-"
    print(f"| {t} | {mode} | {len(v)} | {med(v, 0):,.0f} | {med(v, 0) / plain:.2f}x | {med(v, 1):.2f} | {rounds} |")
PY
