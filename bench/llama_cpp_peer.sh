#!/usr/bin/env bash
# llama.cpp as the CPU peer: installs llama-cpp-python (which compiles llama.cpp for this
# CPU with its default native flags, the way its users build it) and gguf from PyPI into
# a git-ignored virtual environment, then for each checkpoint converts it to GGUF and
# times llama.cpp against specpipe in one run: same prompts, token counts and threads,
# plain and speculative (prompt lookup vs n-gram), greedy tokens compared, the decode
# step and a 5-token verify window against the memory floor measured in the same run.
#
#   bench/llama_cpp_peer.sh [demo|qwen3-0.6b|all]     (default: all)
#
# Environment: BUILD (build dir with specpipe and cpu_floor_bench; default build),
# VENV (.venv-peer), THREADS (2), REPEAT (3), OUT (build/peer: GGUF files, JSON reports),
# LLAMA_CPP_PYTHON (0.3.36), DEMO_PROMPTS (first N bench prompts for the demo target; 0:
# all 16), SYNTH_TOKENS (tokens per prompt on the 0.6B shape: 32). Results:
# $OUT/<model>.json; docs/BENCHMARKS.md section 1.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}" VENV="${VENV:-.venv-peer}" THREADS="${THREADS:-2}" REPEAT="${REPEAT:-3}"
OUT="${OUT:-build/peer}" VERSION="${LLAMA_CPP_PYTHON:-0.3.36}"
which="${1:-all}"

for exe in "$BUILD/apps/specpipe" "$BUILD/bench/cpu_floor_bench"; do
  [[ -x "$exe" ]] || { echo "llama_cpp_peer: $exe missing: cmake --build $BUILD --target specpipe cpu_floor_bench" >&2; exit 2; }
done
if ! "$VENV/bin/python" -c "import llama_cpp, gguf, sys; sys.exit(llama_cpp.__version__ != '$VERSION')" 2>/dev/null; then
  echo "llama_cpp_peer: installing llama-cpp-python $VERSION and gguf into $VENV (compiles llama.cpp: 10-30 min on 2 cores)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "llama-cpp-python==$VERSION" gguf numpy
fi
mkdir -p "$OUT"
export OMP_NUM_THREADS="$THREADS"  # llama.cpp's OpenMP threads (it sets n_threads too)
# llama.cpp's threads meet at an OpenMP barrier after every operation. With GOMP's default
# (spin, then sleep) a thread spins through its time slice while its partner waits for a
# core, which on this shared 2-core machine made llama.cpp several times slower than
# either engine's CPU time accounts for; passive waits (the default here) sleep at once.
# On a quiet machine set OMP_WAIT_POLICY=default: it leaves GOMP's own setting (spin a
# while, then sleep), what llama.cpp's users get and its best there. Not active: the
# driver keeps llama.cpp loaded while specpipe runs, and actively waiting threads would
# spin through specpipe's rounds.
OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
if [[ "$OMP_WAIT_POLICY" == default ]]; then unset OMP_WAIT_POLICY; else export OMP_WAIT_POLICY; fi
run() {  # name, model dir, extra driver arguments...
  local name="$1" model="$2"; shift 2
  "$VENV/bin/python" bench/peer/llama_cpp_peer.py --model "$model" --specpipe "$BUILD/apps/specpipe" \
    --floor-bench "$BUILD/bench/cpu_floor_bench" --threads "$THREADS" --repeat "$REPEAT" --work "$OUT" \
    --json "$OUT/$name.json" "$@"
}
if [[ "$which" == demo || "$which" == all ]]; then
  run demo-target models/demo-target --num-prompts "${DEMO_PROMPTS:-0}"
fi
if [[ "$which" == qwen3-0.6b || "$which" == all ]]; then
  synth="$OUT/checkpoints/qwen3-0.6b"  # the driver's work dir ($OUT/<name>) must not be the checkpoint
  [[ -f "$synth/model.safetensors" ]] || "$VENV/bin/python" bench/peer/synthetic_checkpoint.py qwen3-0.6b "$synth"
  # 898 MB of weights at ~30 ms a token (and each specpipe bench reloads them): 2 prompts
  # x 32 tokens, one speculative row, keep a round to a few minutes on the shared machine
  run qwen3-0.6b "$synth" --num-prompts 2 --max-tokens "${SYNTH_TOKENS:-32}" --gammas 4 --dtypes bf16 --floor-context 256
fi
