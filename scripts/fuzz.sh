#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/*_fuzz.cpp) with clang, ASan and UBSan into
# build-fuzz/ and runs each for SECONDS (default 60) from a seed corpus made of the
# vendored models' files.
#   scripts/fuzz.sh [SECONDS] [HARNESS...]     e.g. scripts/fuzz.sh 600 safetensors
# Corpora grow in build-fuzz/corpus/<harness>/ (SPECPIPE_FUZZ_BUILD: another folder); crashes land in build-fuzz/crashes/
# (libFuzzer's crash-* files): each found one becomes a regression test.
# Needs clang (Debian: apt-get install -y clang); the harnesses compile only the parser
# sources they test, not the whole project.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
harnesses=("$@")
all=(safetensors index config tokenizer_text tokenizer_json pipeline_yaml protocol http)
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install -y clang)" >&2; exit 1; }
build=${SPECPIPE_FUZZ_BUILD:-$root/build-fuzz}
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
  [pipeline_yaml]="pipeline/pipeline_config_yaml.cpp pipeline/pipeline_config_emit.cpp pipeline/pipeline_config.cpp pipeline/config_section.cpp pipeline/plugin_library.cpp model/load_model.cpp model/safetensors.cpp core/device.cpp"
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
flags=(-std=c++20 -march="${SPECPIPE_CPU_ARCH:-x86-64-v3}" -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -ffunction-sections -fdata-sections -I"$root" -I"$root/include" -DSPECPIPE_FUZZ_ROOT="\"$root\""
       $(pkg-config --cflags spdlog fmt))

# One object per source, shared by the harnesses (ccache, where installed, keeps them
# across clean builds); compiled again only when the source is newer.
launcher=$(command -v ccache || true)
object() {  # source (relative to the root) -> prints its object's path
  local o="$build/obj/${1%.cpp}.o"
  mkdir -p "$(dirname "$o")"
  if [ ! -e "$o" ] || [ -n "$launcher" ] || [ "$root/$1" -nt "$o" ]; then
    CCACHE_BASEDIR="$root" $launcher clang++ "${flags[@]}" -c "$root/$1" -o "$o" >&2 || return 1
  fi
  echo "$o"
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

status=0
for h in "${harnesses[@]}"; do
  [ -n "${sources[$h]:-}" ] || { echo "fuzz.sh: unknown harness '$h' (${!sources[*]})" >&2; exit 1; }
  bin="$build/${h}_fuzz"
  echo "== building $h"
  objs=()
  for f in "fuzz/${h}_fuzz.cpp" ${sources[$h]} "${common[@]}"; do
    o=$(object "$f"); objs+=("$o")
  done
  # lld and --gc-sections: a parser's file may hold more than the parser (model/load_model.cpp also
  # builds models); what the harness never reaches is dropped with its references.
  clang++ "${flags[@]}" -fuse-ld=lld -Wl,--gc-sections "${objs[@]}" $(pkg-config --libs spdlog fmt ${packages[$h]:-}) -o "$bin"
  corpus="$build/corpus/$h"
  if [ ! -d "$corpus" ]; then mkdir -p "$corpus"; seed "$h" "$corpus"; fi
  echo "== fuzzing $h for ${seconds}s"
  # -max_len: headers beyond 64 KiB explore nothing new; -rss_limit: the parsers must not
  # allocate by what the input declares.
  "$bin" "$corpus" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
    -artifact_prefix="$build/crashes/$h-" -print_final_stats=1 >"$build/logs/$h.log" 2>&1 || status=1
  # The summary: coverage of the seeds (INITED) and at the end (DONE), execs, any crash.
  grep -E "INITED|DONE|ERROR|SUMMARY|^stat::(number_of_executed_units|peak_rss_mb)|Test unit written" \
    "$build/logs/$h.log" || true
done
exit $status
