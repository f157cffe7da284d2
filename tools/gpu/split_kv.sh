#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh (tools
# specpipe_cuda_check, specpipe_gpu_generate): the split-KV attention path (issue 16 item 2)
# checked, then timed against the previous paths in the same call.
#   1. specpipe_cuda_check --groups attention (with its timings) for CHECK_SPLITS ("2 3 4 0":
#      the split path built for 2 / 3 / 4 blocks an SM, the default chunk + window kernels): every attention case against
#      the CPU, bitwise against attention_reference, decode == window rows, BF16 store ==
#      FP32 kernels over the same values -> $OUT/attention_check_split{2,3,4,0}.json;
#   2. the demo pair on the device (golden tokens, graphs == eager, speculation == plain):
#      specpipe_gpu_generate --repeat 1 --no-timing -> $OUT/demo.json;
#   3. offload (layer ring, host tier) bit for bit against all-on-GPU, FP32 and BF16 K/V:
#      specpipe_gpu_generate --offload-check -> $OUT/offload_check_{fp32,bf16}.json;
#   4. the read-only bandwidth of this GPU (torch: sum of a 4 GiB tensor, median of 10);
#   5. for SHAPES x CONTEXTS x SPLITS (0: the default paths, SPECPIPE_ATTENTION_SPLIT=0;
#      2 / 3 / 4: split-KV built for that many blocks an SM), specpipe_gpu_generate
#      --synthetic (SPECPIPE_SYNTHETIC_QUICK=1: graphs, windows 1 and 5, context booked)
#      -> $OUT/split_<shape>_<context>_<split>.json and one table line: the decode step,
#      the floor counting weights + K/V at the read-only rate, decode / floor, the
#      5-token window / 1-token step.
# Environment: SHAPES ("llama3.1-8b qwen3-0.6b"), CONTEXTS ("8192 32768 131072"),
# SPLITS ("0 2 3 4"), ITERS (5), KV_DTYPE (fp32), CHECKS (1; 0 skips 1-3), CHECK_SPLITS ("1 0"),
# OFFLOAD_DTYPES ("fp32 bf16"). Steps 2, 3 run the default attention path.
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate split_kv
check="$bundle/bin/specpipe_cuda_check"
gpu_environment split_kv
status=0
if [[ "${CHECKS:-1}" == 1 ]]; then
  for split in ${CHECK_SPLITS:-2 3 4 0}; do
    json="$out/attention_check_split$split.json"
    SPECPIPE_ATTENTION_SPLIT=$((split > 0)) SPECPIPE_ATTENTION_SPLIT_BLOCKS=$split timeout 240 "$check" --groups attention >"$json" 2>"${json%.json}.stderr"
    rc=$?
    [[ $rc -eq 0 ]] || status=1
    python3 - "$(dirname "$0")" "$json" "$split" "$rc" <<'PY' || echo "attention check split=$split: exit $rc, no report"
import sys
sys.path.insert(0, sys.argv[1])
from check_report import summarise
r = summarise(sys.argv[2], f"attention check split={sys.argv[3]}", sys.argv[4])
print("  attention alone, us (8B shape, eager, one launch pair):",
      ", ".join(f"{t['name'].split('context ')[1]}: {t['us']:.1f}" for t in r.get("timings", [])))
PY
  done
  timeout 150 "$exe" --repeat 1 --no-timing >"$out/demo.json" 2>"$out/demo.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || status=1
  echo "demo pair (golden, graphs == eager, speculative == plain): exit $rc"
  for dtype in ${OFFLOAD_DTYPES:-fp32 bf16}; do
    timeout 150 "$exe" --offload-check --synthetic qwen3-0.6b --context 1000 --kv-dtype "$dtype" \
      >"$out/offload_check_$dtype.json" 2>"$out/offload_check_$dtype.stderr"
    rc=$?
    [[ $rc -eq 0 ]] || status=1
    python3 - "$out/offload_check_$dtype.json" "$dtype" "$rc" <<'PY' || echo "offload check $2: exit $3, no report"
import json, sys
r = json.load(open(sys.argv[1]))
for part in ("target", "synthetic"):
    if part in r:
        same = [v["bitwise_identical"] for v in r[part]["variants"]]
        print(f"offload check {sys.argv[2]} {r[part]['model']}: ring variants identical to all-on-GPU {same}, exit {sys.argv[3]}")
if "error" in r:
    print("offload check error:", r["error"])
PY
  done
fi
read_gbps="$(python3 "$(dirname "$0")/read_bandwidth.py")"
echo "read-only bandwidth (torch sum over 4 GiB, median of 10): $read_gbps GB/s"
printf '%-12s %8s %5s %10s %11s %8s %7s\n' shape context split decode_us floor_rd_us vs_floor win5
for shape in ${SHAPES:-llama3.1-8b qwen3-0.6b}; do
  for context in ${CONTEXTS:-8192 32768 131072}; do
    for split in ${SPLITS:-0 2 3 4}; do
      json="$out/split_${shape}_${context}_${split}.json"
      SPECPIPE_ATTENTION_SPLIT=$((split > 0)) SPECPIPE_ATTENTION_SPLIT_BLOCKS=$split SPECPIPE_SYNTHETIC_QUICK=1 timeout 120 "$exe" --synthetic "$shape" \
        --context "$context" --prefill-max 0 --iters "${ITERS:-5}" --kv-dtype "${KV_DTYPE:-fp32}" \
        >"$json" 2>"${json%.json}.stderr"
      rc=$?
      [[ $rc -eq 0 ]] || status=1
      python3 "$(dirname "$0")/synthetic_line.py" "$json" "$read_gbps" "$rc" "$shape" "$context" "$split" ||
        echo "$shape $context $split: exit $rc, no report"
    done
  done
done
# One file for the sweep (the run tool brings back a few files only): every run's JSON
# under its name, then the per-run files and empty logs go.
python3 - "$out" <<'PY'
import glob, json, os, sys
runs = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "split_*.json"))):
    try:
        runs[os.path.basename(f)[:-5]] = json.load(open(f))
    except ValueError:
        continue
    os.remove(f)
json.dump(runs, open(os.path.join(sys.argv[1], "split_kv_sweep.json"), "w"), indent=1)
for f in glob.glob(os.path.join(sys.argv[1], "*.stderr")):
    if os.path.getsize(f) == 0:
        os.remove(f)
PY
exit $status
