#!/usr/bin/env bash
# Soak: `specpipe serve` (demo pair, CPU, faulty plugin in kv_write, HTTP gateway on)
# under mixed load for SECONDS with CLIENTS clients, then SIGTERM; bench/soak/soak.py
# says what it checks. Exit 0 only if every check held; the JSON report is printed.
#   scripts/soak.sh [--curve] [SECONDS] [CLIENTS] [BUILD_DIR]     e.g. scripts/soak.sh 3600 50 build-soak
# --curve: the ZeroMQ endpoint with CURVE (keys by `specpipe keygen`, one client key per 5
# clients, at least 2), max_inflight_per_client 8, intruders (no CURVE, unknown keys) and bursts
# over a key's share among the behaviours; soak.py checks the refusals in stats.security.
# Needs a build with the specpipe and specpipe_faulty_plugin targets (CUDA not needed) and
# pyzmq (Debian: python3-zmq). SOAK_REPORT=file also writes the report there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
curve=0
if [ "${1:-}" = --curve ]; then curve=1; shift; fi
seconds=${1:-60} clients=${2:-50} build=${3:-$root/build}
curve_args=()
[ $curve = 0 ] || curve_args=(--curve --curve-keys $(( clients / 5 > 2 ? clients / 5 : 2 )) --per-client-limit 8)
specpipe=${SPECPIPE_BIN:-$build/apps/specpipe}
plugin=${SOAK_FAULTY_PLUGIN:-$build/tests/plugins/libspecpipe_faulty_plugin.so}
for f in "$specpipe" "$plugin"; do
  [ -e "$f" ] || { echo "soak.sh: $f not built (cmake --build $build --target specpipe specpipe_faulty_plugin)" >&2; exit 1; }
done
python=
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c "import zmq" 2>/dev/null; then python=$candidate; break; fi
done
[ -n "$python" ] || { echo "soak.sh: needs pyzmq (apt-get install -y python3-zmq)" >&2; exit 77; }
exec "$python" "$root/bench/soak/soak.py" --specpipe "$specpipe" --faulty-plugin "$plugin" \
  --seconds "$seconds" --clients "$clients" "${curve_args[@]}" ${SOAK_REPORT:+--report "$SOAK_REPORT"} ${SOAK_ARGS:-}
