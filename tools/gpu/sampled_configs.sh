#!/usr/bin/env bash
# The draft model's sampled speculation (T 0.8) under pipeline configs: default, drafter.draft_ahead off
# (the draft model's one-row GEMMs launch the next kernel early), the fused draft step, both; plain beside.
# On the GPU machine, from the repository root, with a bundle holding specpipe:
#   SPECPIPE_BUNDLE=gpu-bundle-x REPEAT=2 bash tools/gpu/sampled_configs.sh
set -uo pipefail
export SPECPIPE_BUNDLE="${SPECPIPE_BUNDLE:-gpu-bundle-sampled}"
source tools/gpu/bundle_env.sh
gpu_bundle_env specpipe sampled_configs
export SPECPIPE_MODELS="$PWD/models"
nvidia-smi -L; cat $bundle/COMMIT; date -u
mk() { printf 'version: 1\nmodels:\n  draft_fused_step: %s\nslots:\n  drafter:\n    draft_ahead: %s\n' "$1" "$2" >"$out/$3.yaml"; }
mk false auto default; mk false off noahead; mk true auto fused; mk true off fused_noahead
prompts=("def fibonacci(n):" "import os
def list_files(path):" "class Stack:
    def __init__(self):")
log="$out/sampled_configs.txt"; : >"$log"
for ((r = 0; r < ${REPEAT:-2}; ++r)); do
  for cfg in plain default noahead fused fused_noahead; do
    if [[ $cfg == plain ]]; then args=(--no-spec); else args=(--config "$out/$cfg.yaml" --drafter model --gamma 4); fi
    for ((p = 0; p < 3; ++p)); do
      s=$("$exe" generate --device cuda:0 "${args[@]}" --temperature 0.8 --seed "$((1 + p))" --max-tokens 256 --ignore-eos \
        --prompt "${prompts[$p]}" 2>&1 | grep -E "decode:|tokens per target step|^time:|rror" | tr '\n' ' ')
      echo "cfg=$cfg prompt=$p run=$r $s" >>"$log"
    done
  done
done
python3 - "$log" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"cfg=(\S+) .*?decode: ([0-9.]+) tok/s", line)
    if not m: print("no stats:", line.strip()[:300]); continue
    d = re.search(r"draft ([0-9.]+) ms \| verify ([0-9.]+) ms", line); rr = re.search(r"rounds: (\d+)", line)
    rows.setdefault(m.group(1), []).append((float(m.group(2)), float(d.group(1)) / int(rr.group(1)) if d and rr else 0, float(d.group(2)) / int(rr.group(1)) if d and rr else 0))
plain = statistics.median(x[0] for x in rows.get("plain", [(1, 0, 0)]))
print("| config | runs | decode tok/s (median) | x plain | draft ms a round | verify ms a round |")
for k, v in rows.items():
    med = statistics.median(x[0] for x in v)
    print(f"| {k} | {len(v)} | {med:,.0f} | {med / plain:.2f}x | {statistics.median(x[1] for x in v):.3f} | {statistics.median(x[2] for x in v):.3f} |")
PY
date -u
