# Sourced by the GPU scripts (check.sh, bench.sh, graph_bench.sh, fused_run.sh) on the GPU
# machine, from the repository root: `gpu_bundle_env <tool> <script name>` checks that
# gpu-bundle/bin/<tool> exists ($SPECPIPE_BUNDLE/bin/<tool> when set: bundle.sh) (tools/gpu/bundle.sh makes it), sets $bundle, $exe and
# $out ($OUT, else gpu-out/, created), and puts the bundle's libraries, then the
# machine's CUDA 13 (cuBLASLt, wherever it lives) on LD_LIBRARY_PATH.
gpu_bundle_env() {
  bundle="${SPECPIPE_BUNDLE:-gpu-bundle}"
  out="${OUT:-gpu-out}"
  # What travels is the packed bundle; unpack it once.
  if [[ -f "$bundle.tar.xz" && ! -d "$bundle/bin" ]]; then tar -xJf "$bundle.tar.xz"; fi
  mkdir -p "$out"
  exe="$bundle/bin/$1"
  [[ -x "$exe" ]] || { echo "$2: $exe missing; run tools/gpu/bundle.sh first" >&2; exit 2; }
  local lib="$bundle/lib" d found
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d "$d" ]] && lib="$lib:$d"
  done
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ldd "$exe" | grep -q "libcublasLt.so.13 => not found"; then
    found="$(find / -xdev -name 'libcublasLt.so.13' 2>/dev/null | head -n1)"
    [[ -n "$found" ]] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
  fi
  return 0
}

# After gpu_bundle_env: the card, the bundle's commit and the time into
# $out/<name>_environment.txt, so each result names what produced it.
gpu_environment() {  # name
  { nvidia-smi -L 2>&1; cat "$bundle/COMMIT" 2>/dev/null; date -u; } >"$out/$1_environment.txt"
}

# For the scripts that run the engine's binaries (engine_check.sh, draft_ahead.sh), after
# gpu_bundle_env: where the tests find the sources, models and plugins, and the device.
gpu_engine_env() {
  local root
  root="$(pwd)"
  export SPECPIPE_SOURCE_DIR="$root" SPECPIPE_MODELS="$root/models" SPECPIPE_TEST_DEVICE="${DEVICE:-cuda:0}"
  export SPECPIPE_PLUGIN_DIR="$root/$bundle/plugins"
}

# After gpu_bundle_env: compute-sanitizer memcheck of a command into
# $out/memcheck_<name>.txt, its summary printed; non-zero when it found errors or failed.
gpu_memcheck() {  # name label timeout command...
  local name="$1" label="$2" limit="$3" sanitizer rc
  shift 3
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  timeout "$limit" "$sanitizer" --tool memcheck --leak-check no --error-exitcode 9 "$@" >"$out/memcheck_$name.txt" 2>&1
  rc=$?
  echo "memcheck ($label) exit: $rc ($(grep -m1 'ERROR SUMMARY' "$out/memcheck_$name.txt"))"
  return $rc
}

# The SpecPV runs' shared pieces (specpv_check.sh, specpv_host_e2e.sh), after gpu_bundle_env:
# the golden prompts of 7,000 tokens or more as a bench prompt file, and the pipeline YAML
# lines that put the bundle's SpecPV plugin in verify_view with a budget B split as in
# BENCHMARKS 7 (B/16 sink, B/2 retrieved, B/4 window, 3B/16 buffer, a full round every 4).
long_golden_prompts() {  # output file
  python3 -c '
import json
for line in open("bench/prompts/long.jsonl"):
    p = json.loads(line)
    if len(p["prompt_ids"]) >= 7000: print(json.dumps(p))' >"$1"
}
specpv_yaml() {  # budget, mode
  local b=$1
  printf '%s\n' "plugins:" "  specpv:" "    path: $(pwd)/$bundle/plugins/libspecpipe_specpv.so" \
    "    config: {mode: $2, sink: $((b / 16)), retrieval: $((b / 2)), window: $((b / 4)), buffer: $((b * 3 / 16)), refresh_interval: 4}" \
    "slots:" "  verify_view:" "    type: specpv"
}
