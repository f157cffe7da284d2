#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (a bundle with
# specpipe): speculative decoding with sampling on the device, next to greedy, through
# `specpipe generate` (one request, the demo pair): for each temperature of TEMPS and each
# mode (plain, the draft model at GAMMA, n-gram at GAMMA), REPEAT runs of MAX_TOKENS tokens
# (EOS ignored) on each prompt of PROMPTS; prints each run's decode tokens/s, tokens per
# target step and the round's draft / verify ms, then the medians by (temperature, mode).
# Environment: TEMPS ("0 0.8"), GAMMA (4), MAX_TOKENS (256), REPEAT (3), SEED (1),
# PROMPTS (three code prompts), DEVICE (cuda:0), OUT ($OUT or gpu-out/).
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe sampled_spec
gpu_environment sampled_spec
export SPECPIPE_MODELS="${SPECPIPE_MODELS:-$PWD/models}"
gamma="${GAMMA:-4}"
log="$out/sampled_spec.txt"
: >"$log"
prompts=("def fibonacci(n):" "import os
def list_files(path):" "class Stack:
    def __init__(self):")
for t in ${TEMPS:-0 0.8}; do
  for mode in plain model ngram; do
    case $mode in
      plain) args=(--no-spec) ;;
      model) args=(--drafter model --gamma "$gamma") ;;
      ngram) args=(--drafter ngram --gamma "$gamma") ;;
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
    rows.setdefault((m.group(1), m.group(2)), []).append((float(m.group(3)), float(tps.group(1)) if tps else 1.0))
print("| temperature | mode | runs | decode tok/s (median) | x plain | tokens per target step |")
print("|---|---|---|---|---|---|")
for (t, mode), v in rows.items():
    med = statistics.median(x[0] for x in v)
    plain = statistics.median(x[0] for x in rows.get((t, "plain"), v))
    print(f"| {t} | {mode} | {len(v)} | {med:,.0f} | {med / plain:.2f}x | {statistics.median(x[1] for x in v):.2f} |")
PY
