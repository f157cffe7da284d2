#!/usr/bin/env bash
# The main job on the embedded demo models: installs what is missing, builds the
# `specpipe` binary and generates text, printing the text and a summary line.
# Extra arguments go to `specpipe generate` (try --help).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j"$(nproc)" --target specpipe
exec "$root/build/apps/specpipe" generate "$@"
