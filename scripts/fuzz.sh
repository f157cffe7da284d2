#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/*_fuzz.cpp) with clang, ASan and UBSan into
# build-fuzz/ and runs each for SECONDS (default 60) from a seed corpus made of the
# vendored models' files.
#   scripts/fuzz.sh [--ci] [--build-only] [SECONDS] [HARNESS...]   e.g. scripts/fuzz.sh 600 safetensors
# Objects compile SPECPIPE_JOBS (default: the cores) at a time; the harnesses then run
# that many at a time, each for SECONDS.
# --ci: CI's short run (.ci/run): into build-fuzz-ci/ with -O0 and line tables only, which
# compiled the heaviest sources in a third less CPU time than the campaigns' -O1 -g
# (docs/RELIABILITY.md; the harnesses run slower: what matters in CI's seconds is that
# every harness runs, not execs per second); the same sanitizers and checks.
# --build-only: build, run nothing.
# Corpora grow in build-fuzz/corpus/<harness>/ (SPECPIPE_FUZZ_BUILD: another folder); crashes land in build-fuzz/crashes/
# (libFuzzer's crash-* files): each found one becomes a regression test.
# Needs clang (Debian: apt-get install -y clang); the harnesses compile only the parser
# sources they test, not the whole project.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ci=0 build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) ci=1; shift ;;
    --build-only) build_only=1; shift ;;
    *) break ;;
  esac
done
seconds=${1:-60}
shift || true
harnesses=("$@")
all=(safetensors index config tokenizer_text tokenizer_json pipeline_yaml protocol http)
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")
jobs=${SPECPIPE_JOBS:-$(nproc)}
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/install-deps.sh --fuzz)" >&2; exit 1; }
if [ $ci = 1 ]; then
  build=${SPECPIPE_FUZZ_BUILD:-$root/build-fuzz-ci}
  opt=(-O0 -gline-tables-only)
else
  build=${SPECPIPE_FUZZ_BUILD:-$root/build-fuzz}
  opt=(-O1 -g)
fi
mkdir -p "$build/crashes" "$build/tmp" "$build/logs"
# The harnesses write each input to a file under $TMPDIR (fuzz/fuzz_file.h): keep it here.
export TMPDIR="$build/tmp"

# The sources each harness compiles: the parser and what it calls, nothing else.
common=(core/error.cpp core/dtype.cpp core/mapped_file.cpp model/json_file.cpp)
tokenizer=$(cd "$root" && echo model/tokenizer/*.cpp)
declare -A sources=(
  [safetensors]="model/safetensors.cpp"
  [index]="model/safetensors.cpp"
  [config]="model/config.cpp"
  [tokenizer_text]="$tokenizer"
  [tokenizer_json]="$tokenizer"
  [pipeline_yaml]="pipeline/pipeline_config_yaml.cpp pipeline/pipeline_config_emit.cpp pipeline/pipeline_config.cpp pipeline/gamma.cpp pipeline/config_section.cpp pipeline/plugin_library.cpp model/load_model.cpp model/safetensors.cpp core/device.cpp"
  [protocol]="server/protocol.cpp pipeline/spec_stats.cpp pipeline/generation.cpp $tokenizer"
  [http]="server/http/openai_request.cpp server/http/chat_template.cpp $tokenizer"
)
# Libraries beyond spdlog/fmt, by harness (pkg-config names).
declare -A packages=(
  [tokenizer_text]="libpcre2-8 libutf8proc"
  [tokenizer_json]="libpcre2-8 libutf8proc"
  [pipeline_yaml]="yaml-cpp"
  [protocol]="libpcre2-8 libutf8proc"
  [http]="libpcre2-8 libutf8proc"
)
flags=(-std=c++20 -march="${SPECPIPE_CPU_ARCH:-x86-64-v3}" "${opt[@]}" -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -ffunction-sections -fdata-sections -I"$root" -I"$root/include" -DSPECPIPE_FUZZ_ROOT="\"$root\""
       $(pkg-config --cflags spdlog fmt))

# One object per source, shared by the harnesses (ccache, where installed, keeps them
# across clean builds; SPECPIPE_FUZZ_LAUNCHER= (empty) compiles without it); compiled
# again only when the source is newer.
launcher=${SPECPIPE_FUZZ_LAUNCHER-$(command -v ccache || true)}
object_of() { echo "$build/obj/${1%.cpp}.o"; }
compile() {  # source (relative to the root)
  local o
  o=$(object_of "$1")
  mkdir -p "$(dirname "$o")"
  if [ ! -e "$o" ] || [ -n "$launcher" ] || [ "$root/$1" -nt "$o" ]; then
    CCACHE_BASEDIR="$root" $launcher clang++ "${flags[@]}" -c "$root/$1" -o "$o" || { echo "fuzz.sh: compiling $1 failed" >&2; return 1; }
  fi
}
# A pool of `jobs` background jobs: pool_run CMD... starts one, waiting for a free slot;
# pool_wait waits for all. A failed job makes `pool_failed` 1.
pool_failed=0 pool_running=0
pool_run() {
  if [ $pool_running -ge "$jobs" ]; then wait -n || pool_failed=1; pool_running=$((pool_running - 1)); fi
  "$@" & pool_running=$((pool_running + 1))
}
pool_wait() {
  while [ $pool_running -gt 0 ]; do wait -n || pool_failed=1; pool_running=$((pool_running - 1)); done
}

seed() {  # harness corpus_dir
  case "$1" in
    safetensors)  # headers and the first data bytes: the whole files are megabytes
      for f in "$root"/models/*/*.safetensors; do
        head -c 65536 "$f" > "$2/$(basename "$(dirname "$f")")-$(basename "$f").head"
      done
      python3 - "$2/tiny.safetensors" <<'PY'
import json, struct, sys
header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                     "b": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]},
                     "__metadata__": {"format": "pt"}}).encode()
header += b" " * (-len(header) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(header)) + header + bytes(12))
PY
      ;;
    index)
      cp "$root/models/demo-target/model.safetensors.index.json" "$2/demo-target.index.json"
      echo '{"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}}' > "$2/tiny.index.json"
      ;;
    config)
      for f in "$root"/models/*/config.json "$root"/models/*/generation_config.json; do
        cp "$f" "$2/$(basename "$(dirname "$f")")-$(basename "$f")"
      done
      ;;
    *) python3 "$root/fuzz/seeds.py" "$1" "$2" "$root" ;;
  esac
}

harness_sources() { echo "fuzz/${1}_fuzz.cpp" ${sources[$1]} "${common[@]}"; }
for h in "${harnesses[@]}"; do
  [ -n "${sources[$h]:-}" ] || { echo "fuzz.sh: unknown harness '$h' (${!sources[*]})" >&2; exit 1; }
done

# Build: every object once (the harnesses share most), `jobs` at a time, then the links.
declare -A wanted=()
for h in "${harnesses[@]}"; do for f in $(harness_sources "$h"); do wanted[$f]=1; done; done
echo "== compiling ${#wanted[@]} sources, $jobs at a time (${opt[*]})"
for f in "${!wanted[@]}"; do pool_run compile "$f"; done
pool_wait
[ $pool_failed = 0 ] || exit 1
link() {  # harness; linked again only when an object is newer
  local objs=() f bin="$build/${1}_fuzz" stale=0
  for f in $(harness_sources "$1"); do objs+=("$(object_of "$f")"); done
  [ -e "$bin" ] || stale=1
  for f in "${objs[@]}"; do [ "$f" -nt "$bin" ] && stale=1; done
  [ $stale = 1 ] || return 0
  # lld and --gc-sections: a parser's file may hold more than the parser (model/load_model.cpp also
  # builds models); what the harness never reaches is dropped with its references.
  clang++ "${flags[@]}" -fuse-ld=lld -Wl,--gc-sections "${objs[@]}" $(pkg-config --libs spdlog fmt ${packages[$1]:-}) \
    -o "$bin" || { echo "fuzz.sh: linking $1 failed" >&2; return 1; }
}
for h in "${harnesses[@]}"; do pool_run link "$h"; done
pool_wait
[ $pool_failed = 0 ] || exit 1
echo "== built ${harnesses[*]} in $build"
[ $build_only = 0 ] || exit 0

fuzz() {  # harness: one run of SECONDS; exit 1 on a crash
  local corpus="$build/corpus/$1"
  if [ ! -d "$corpus" ]; then mkdir -p "$corpus"; seed "$1" "$corpus"; fi
  # -max_len: headers beyond 64 KiB explore nothing new; -rss_limit: the parsers must not
  # allocate by what the input declares.
  "$build/${1}_fuzz" "$corpus" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
    -artifact_prefix="$build/crashes/$1-" -print_final_stats=1 >"$build/logs/$1.log" 2>&1
}
echo "== fuzzing ${harnesses[*]} for ${seconds}s each, $jobs at a time"
status=0
for h in "${harnesses[@]}"; do pool_run fuzz "$h"; done
pool_wait
for h in "${harnesses[@]}"; do
  # The summary: coverage of the seeds (INITED) and at the end (DONE), execs, any crash.
  echo "== $h"
  grep -E "INITED|DONE|ERROR|SUMMARY|^stat::(number_of_executed_units|peak_rss_mb)|Test unit written" \
    "$build/logs/$h.log" || true
  if ! grep -q "DONE" "$build/logs/$h.log"; then
    status=1
    echo "fuzz.sh: $h failed; the end of $build/logs/$h.log:" >&2
    tail -n 40 "$build/logs/$h.log" >&2
  fi
done
exit $(( status | pool_failed ))
