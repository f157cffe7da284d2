#!/usr/bin/env bash
# On the GPU machine after tools/gpu/bundle.sh: where a demo-pair decode step spends its
# time. Nsight Systems (when installed) times every kernel of a short speculative run as
# it really runs (graphs, no serialisation) and sums them by name; Nsight Compute times
# a window of launches one by one (gpu__time_duration) as a fallback and a cross-check.
# Outputs (reports, CSV, a summary) go to $OUT (or gpu-out/).
# Environment: PROFILE_ARGS (specpipe_gpu_generate arguments), NCU_SKIP / NCU_COUNT
# (launches to skip / time), PROFILE_TIMEOUT (seconds per tool), PROFILE_SYNTHETIC (a
# synthetic shape, e.g. llama3-8b, profiled too; CONTEXT, NCU_SYN_SKIP / NCU_SYN_COUNT).
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate profile
args=${PROFILE_ARGS:---cases 2 --repeat 1}
limit=${PROFILE_TIMEOUT:-150}

nsys_bin="$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n1 || true)"
if [[ -n "$nsys_bin" ]]; then
  # shellcheck disable=SC2086
  timeout "$limit" "$nsys_bin" profile --force-overwrite true --cuda-graph-trace node -o "$out/demo" \
    "$exe" $args >"$out/nsys_run.json" 2>"$out/nsys.stderr"
  echo "nsys exit: $?"
  "$nsys_bin" stats --force-export true --report cuda_gpu_kern_sum --format csv --output "$out/demo" \
    "$out/demo.nsys-rep" >/dev/null 2>>"$out/nsys.stderr"
  head -n 25 "$out"/demo_cuda_gpu_kern_sum*.csv 2>/dev/null | cut -c1-220
else
  echo "nsys: not installed"
fi

summarize() {
  python3 - "$1" <<'PY' || true
import csv, collections, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, body = rows[0], rows[1:]
ki, vi = head.index("Kernel Name"), head.index("Metric Value")
tot = collections.defaultdict(lambda: [0, 0.0])
for r in body:
    name = r[ki].split("(")[0][:70]
    tot[name][0] += 1
    tot[name][1] += float(r[vi].replace(",", "")) / 1e3
all_us = sum(v[1] for v in tot.values())
for name, (n, us) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
    print(f"{us:9.1f} us {100 * us / all_us:5.1f}% {n:5d} x {us / n:6.2f} us  {name}")
PY
}

ncu_bin="$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -n1 || true)"
if [[ -n "$ncu_bin" ]]; then
  # shellcheck disable=SC2086
  timeout "$limit" "$ncu_bin" --metrics gpu__time_duration.sum --csv --launch-skip "${NCU_SKIP:-3000}" \
    --launch-count "${NCU_COUNT:-400}" "$exe" --no-timing --cases 1 >"$out/ncu.csv" 2>"$out/ncu.stderr"
  echo "ncu exit: $?"
  summarize "$out/ncu.csv"
else
  echo "ncu: not installed"
fi

# PROFILE_SYNTHETIC=llama3-8b: the same per-kernel table for a synthetic model's decode.
if [[ -n "${PROFILE_SYNTHETIC:-}" && -n "$ncu_bin" ]]; then
  timeout "$limit" "$ncu_bin" --metrics gpu__time_duration.sum --csv --launch-skip "${NCU_SYN_SKIP:-1500}" \
    --launch-count "${NCU_SYN_COUNT:-300}" "$exe" --synthetic "$PROFILE_SYNTHETIC" --context "${CONTEXT:-512}" \
    --iters 3 >"$out/ncu_synthetic.csv" 2>"$out/ncu_synthetic.stderr"
  echo "ncu synthetic exit: $?"
  summarize "$out/ncu_synthetic.csv"
fi
