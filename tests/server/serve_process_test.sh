#!/usr/bin/env bash
# `specpipe serve` as a real process on loopback with examples/pipelines/server.yaml:
# the Python client, the C++ example client and `specpipe client` all get answers; a
# SIGTERM while a request streams still delivers its final message and exits 0.
set -euo pipefail
specpipe=$1 cpp_client=$2 py_client=$3 config=$4
source "$(dirname "$0")/pyzmq_python.sh"  # sets $python
work=$(mktemp -d)
trap 'kill "${server_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint="tcp://127.0.0.1:$port"

SPECPIPE_THREADS=1 "$specpipe" serve --config "$config" --endpoint "$endpoint" >"$work/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do
  "$python" "$py_client" --endpoint "$endpoint" --health --timeout-ms 200 >/dev/null 2>&1 && break
  sleep 0.1
done

"$python" "$py_client" --endpoint "$endpoint" --prompt "def add(a, b):" --max-tokens 16 --stream | tee "$work/py.log"
grep -q "finish: length | tokens: 16" "$work/py.log"
"$cpp_client" "$endpoint" "import os" 8 | tee "$work/cpp.log"
grep -q "finish: length" "$work/cpp.log"
"$specpipe" client --endpoint "$endpoint" --type stats --json | tee "$work/stats.log"
grep -q '"type":"stats"' "$work/stats.log"

# A long streaming request in flight, then SIGTERM. Wait for its first streamed text (the
# client flushes each delta): a fixed sleep let a loaded 2-core CI machine send SIGTERM
# before the client had even connected, and the request then never had an answer.
"$python" "$py_client" --endpoint "$endpoint" --prompt "class C:" --max-tokens 4000 --stream >"$work/long.log" &
client_pid=$!
for _ in $(seq 600); do
  [[ -s "$work/long.log" ]] && break
  sleep 0.1
done
kill -TERM "$server_pid"
wait "$server_pid"  # set -e: a non-zero exit fails the test
server_pid=
wait "$client_pid"
grep -Eq "finish: (cancelled|length|eos)" "$work/long.log"
grep -q "specpipe: stopped" "$work/serve.log"
echo "serve process test: ok"
