#!/usr/bin/env bash
# On the GPU machine, after tools/gpu/bundle.sh: an A/B of one environment switch on the
# synthetic Llama-3-8B decode step, the variants alternated within one call so the
# machine's drift hits both (single calls differ by up to ~1%).
#   AB_VAR      the variable (e.g. SPECPIPE_CUDA_PDL)         AB_VALUES  its values ("0 1")
#   ROUNDS (3), CONTEXT (512), GEMM (mma)
# Prints each run and the median per value; JSON goes to $OUT (or gpu-out/).
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate synthetic_ab
: "${AB_VAR:?set AB_VAR to the environment variable to vary}"
status=0
for round in $(seq "${ROUNDS:-3}"); do
  for value in ${AB_VALUES:-0 1}; do
    env "$AB_VAR=$value" timeout 120 "$exe" --synthetic llama3-8b --context "${CONTEXT:-512}" --gemm "${GEMM:-mma}" \
      >"$out/ab_${value}_$round.json" 2>"$out/ab_${value}_$round.stderr" || status=1
  done
done
python3 - "$out" "$AB_VAR" <<'PY' || status=1
import collections, glob, json, statistics, sys
out, var = sys.argv[1], sys.argv[2]
by = collections.defaultdict(list)
for f in sorted(glob.glob(f"{out}/ab_*.json")):
    r = json.load(open(f))
    g, value = r["graphs"], f.split("/")[-1].split("_")[1]
    by[value].append(g["decode_vs_floor"])
    print(f"{f.split('/')[-1]:16s} decode {g['decode_us']:.0f} us = {g['decode_vs_floor']:.3f}x floor, window 5 / decode "
          f"{g['windows'][4]['relative']:.3f}, graph == eager {all(x['bitwise_identical'] for x in r['graph_vs_eager'])}")
for value, xs in by.items():
    print(f"{var}={value}: median {statistics.median(xs):.3f}x floor over {len(xs)} runs")
PY
exit $status
