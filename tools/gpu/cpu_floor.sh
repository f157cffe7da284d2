#!/usr/bin/env bash
# The CPU goals of issue 20 on a quiet machine: the GPU machine's CPU pinned to 2 cores
# (taskset, 2 kernel threads), where the CI VM's CPU is shared with builds. Runs
# bench/cpu_floor_bench on the synthetic Qwen3-0.6B shape (bench/peer/synthetic_checkpoint.py:
# seeded BF16 weights, the demo vocabulary) at 256 tokens of context: a decode step and a
# 5-token verify window against the memory floor measured in the same process (an
# 8-stream read of 1 GiB, bench/memory_bandwidth.h). Each binary named runs ROUNDS
# times, the binaries alternating, so two builds (a baseline and a change) compare in one
# call. docs/BENCHMARKS.md section 1.
#
# A CPU build travels as a plain tarball (no CUDA needed): from a Release build with
# CUDA off, pack bin/cpu_floor_bench[-name] and the non-system libraries it needs (ldd)
# into <dir>/, tar -cJf <dir>.tar.xz <dir>, put it at the repository root, then here:
#   CPU_BUNDLE=<dir> BINS="cpu_floor_bench_main cpu_floor_bench" bash tools/gpu/cpu_floor.sh
# Environment: CORES (default 0,1), ROUNDS (2), REPEAT (5), MIN_MS (250), CONTEXT (256),
# PHASES=1 (cpu_floor_bench --phases: ms per forward of each phase after the timed rounds;
# the binaries must be of e6d8aad or later).
set -euo pipefail
bundle="${CPU_BUNDLE:?CPU_BUNDLE: the unpacked bundle directory}"
cores="${CORES:-0,1}"
rounds="${ROUNDS:-2}"
phases=()
[[ "${PHASES:-0}" == 1 ]] && phases=(--phases)
[[ -d "$bundle" ]] || tar -xJf "$bundle.tar.xz"
export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -n1); pinned to cores $cores; bundle $(cat "$bundle/COMMIT" 2>/dev/null || echo '?')"
model="${TMPDIR:-/tmp}/cpu-floor-qwen3-0.6b"
[[ -f "$model/model.safetensors" ]] || python3 bench/peer/synthetic_checkpoint.py qwen3-0.6b "$model" >/dev/null
for ((r = 1; r <= rounds; ++r)); do
  for bin in ${BINS:-cpu_floor_bench}; do
    echo "== round $r: $bin"
    taskset -c "$cores" "$bundle/bin/$bin" --model "$model" --threads 2 --windows 1,5 \
      --context "${CONTEXT:-256}" --repeat "${REPEAT:-5}" --min-ms "${MIN_MS:-250}" ${phases[@]+"${phases[@]}"}
  done
done
