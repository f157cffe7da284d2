#!/usr/bin/env bash
# `specpipe serve --http-only` as a real process, driven by clients no one here wrote: the
# `openai` package from PyPI (installed into a cached venv; the test is skipped, exit 77,
# when python3's venv/pip or PyPI are unavailable) and curl. Then SIGTERM: exit 0.
set -euo pipefail
trap 'echo "http_clients_test.sh: line $LINENO failed: $BASH_COMMAND" >&2' ERR
specpipe=$1 models=$2 client_py=$3
work=$(mktemp -d)
trap 'kill "${server_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
skip() { echo "SKIP: $*"; exit 77; }

command -v curl >/dev/null || skip "curl is not installed"
venv=${SPECPIPE_OPENAI_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/specpipe/openai-venv}
if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  python3 -m venv "$venv" 2>"$work/venv.log" || skip "python3 -m venv failed: $(tail -1 "$work/venv.log")"
  "$venv/bin/python" -m pip --version >/dev/null 2>&1 || skip "pip is not available in the venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "openai>=1.30,<3" >"$work/pip.log" 2>&1 ||
    skip "pip install openai failed (no PyPI?): $(tail -1 "$work/pip.log")"
fi

# The demo target with a ChatML template, so chat completions are served.
model="$work/demo-chat"
mkdir "$model"
for f in "$models"/demo-target/*; do
  [ "$(basename "$f")" = tokenizer_config.json ] || ln -s "$f" "$model/"
done
cat >"$model/tokenizer_config.json" <<'JSON'
{"eos_token": "<|endoftext|>", "chat_template": "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"}
JSON

SPECPIPE_THREADS=1 "$specpipe" serve --http-only --http 127.0.0.1:0 --model "$model" --draft demo-draft >"$work/serve.log" 2>&1 &
server_pid=$!
address=
for _ in $(seq 300); do
  address=$(sed -n 's|.* on http://\([^ ]*\) .*|\1|p' "$work/serve.log")
  [ -n "$address" ] && break
  sleep 0.1
done
[ -n "$address" ] || { cat "$work/serve.log"; echo "the server did not start"; exit 1; }
base="http://$address"

"$venv/bin/python" "$client_py" "$base/v1" demo-chat

# Each response goes to a file before grep reads it: with pipefail, `curl | grep -q` fails
# whenever grep matches and exits while curl is still writing (SIGPIPE), which a loaded
# machine makes likely for the long /metrics page (it failed a CI run once).
curl -sf "$base/health" >"$work/health.json"
grep -q '"status":"ok"' "$work/health.json"
curl -sfN "$base/v1/completions" -d '{"prompt": "import os", "max_tokens": 8, "stream": true}' >"$work/sse.txt"
grep -q '^data: {' "$work/sse.txt" && tail -2 "$work/sse.txt" | grep -q '^data: \[DONE\]'
code=$(curl -s -o "$work/err.json" -w '%{http_code}' "$base/v1/completions" -d '{"prompt": ')
[ "$code" = 400 ] && grep -q '"code":"malformed_json"' "$work/err.json"
curl -sf "$base/metrics" >"$work/metrics.txt"
grep -q '^specpipe_http_requests_total{route="/v1/completions",code="200"}' "$work/metrics.txt"
echo "curl: ok"

kill -TERM "$server_pid"
wait "$server_pid"
server_pid=
grep -q "specpipe: stopped" "$work/serve.log"
echo "http clients: ok"
