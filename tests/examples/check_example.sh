#!/usr/bin/env bash
# Runs one example pipeline and checks what it generated, not only how much:
#   check_example.sh SPECPIPE EXAMPLE.yaml PROMPT
# Greedy pipelines must produce exactly the text of plain greedy decoding of the demo
# target (`generate --no-spec`, no config): speculation, plugins, n-gram drafting and
# offload are lossless. A sampling pipeline (temperature > 0) cannot be compared with plain
# decoding token by token (the draws differ); it must give the same text twice with the
# same seed, and a different text with another seed. Both runs must generate 12 tokens.
set -euo pipefail
specpipe=$1 example=$2 prompt=$3
run() { "$specpipe" --threads 1 generate --max-tokens 12 --prompt "$prompt" "$@"; }
text() { sed '/^---$/,$d' <<<"$1"; }  # what was generated: everything before the statistics
out=$(run --config "$example")
grep -q "generated: 12 " <<<"$out" || { echo "FAIL: $example did not generate 12 tokens:"; echo "$out"; exit 1; }
if grep -qE '^\s*temperature:\s*[0-9.]*[1-9]' "$example"; then
  again=$(run --config "$example")
  other=$(run --config "$example" --seed 12345)
  [[ "$(text "$out")" == "$(text "$again")" ]] || { echo "FAIL: same seed, different text:"; echo "$out"; echo "$again"; exit 1; }
  [[ "$(text "$out")" != "$(text "$other")" ]] || { echo "FAIL: another seed gave the same text:"; echo "$out"; exit 1; }
  echo "ok: $example samples deterministically per seed"
else
  plain=$(run --no-spec)
  if [[ "$(text "$out")" != "$(text "$plain")" ]]; then
    echo "FAIL: $example differs from plain greedy decoding"
    echo "--- $example:"; echo "$out"; echo "--- plain:"; echo "$plain"; exit 1
  fi
  echo "ok: $example equals plain greedy decoding"
fi
echo "$out"
