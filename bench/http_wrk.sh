#!/usr/bin/env bash
# A load run of the HTTP gateway with wrk (Debian's package; a load tool no one here
# wrote): starts `specpipe serve --http-only` on the demo pair, drives POST
# /v1/completions from CONNECTIONS connections for DURATION seconds, then checks that the
# server still answers /health, that every answer counted in /metrics was a 200 and that
# the KV pool is back to empty.
#   bench/http_wrk.sh [BUILD_DIR]   (env: CONNECTIONS=32 DURATION=30 seconds, WRK_MAX_TOKENS=32, PORT=8123)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
connections=${CONNECTIONS:-32}
seconds=${DURATION:-30}
port=${PORT:-8123}
command -v wrk >/dev/null || { echo "http_wrk: wrk missing (apt-get install wrk)" >&2; exit 2; }

"$build/apps/specpipe" serve --http-only --http "127.0.0.1:$port" >/tmp/http_wrk_server.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done

WRK_MAX_TOKENS=${WRK_MAX_TOKENS:-32} wrk -t2 -c"$connections" -d"${seconds}s" --timeout 60s \
  -s "$root/bench/http_wrk.lua" "http://127.0.0.1:$port"
echo "health after the run: $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^specpipe_http_requests_total|^specpipe_kv|^specpipe_http_completion_tokens_total' || true
