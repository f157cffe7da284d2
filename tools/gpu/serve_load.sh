#!/usr/bin/env bash
# `specpipe serve` under load through its ZeroMQ endpoint, one call (issue 18): for each
# mode (plain, the draft model at each gamma of DRAFT_GAMMAS, n-gram, SCV) a server on
# $DEVICE with the demo pair (tools/gpu/serve_load.yaml: 128 sequences per round), driven
# by bench/load_generator --endpoint at each level of CLIENTS (an unreported warm-up of
# one request per client first, then the measured requests), every request's greedy
# token ids recorded. tools/gpu/serve_load_report.py then tabulates tokens/s, TTFT and
# ITL percentiles, checks that every request under load streamed the same tokens as its
# prompt run alone (plain, 1 client), and states the issue's goals.
#
# On the GPU machine, from the repository root (bundle with
#   SPECPIPE_BUNDLE_TOOLS="specpipe load_generator" SPECPIPE_BUNDLE_BENCH=ON tools/gpu/bundle.sh):
#   export SPECPIPE_BUNDLE=<name>; source tools/gpu/bundle_env.sh; gpu_bundle_env specpipe serve_load
#   gpu_engine_env; bash tools/gpu/serve_load.sh
# Here, on the CPU, with a build directory and small counts (the same script):
#   SERVE_BUILD=build-serve DEVICE=cpu CLIENTS="1 4" REQUESTS="1:3 4:1" MAX_TOKENS=12 \
#     DRAFT_GAMMAS=4 OUT=/tmp/serve-cpu bash tools/gpu/serve_load.sh
# Environment: DEVICE (cuda:0), CLIENTS ("1 8 32 128"), REQUESTS (per-client requests by
# level, "1:16 8:4 32:4 128:2": 16 at one client covers every public prompt alone),
# MAX_TOKENS (64), DRAFT_GAMMAS ("2 4 6"), NGRAM_GAMMA (4), MODES ("plain draft ngram scv"),
# SERVE_TIMEOUT (seconds a server may take to start, 120), OUT ($OUT or gpu-out/).
# Exit status: non-zero if a server failed, a request failed or an output differed.
set -uo pipefail
root="$(pwd)"
if [[ -n "${SERVE_BUILD:-}" ]]; then
  specpipe="$SERVE_BUILD/apps/specpipe"
  loadgen="$SERVE_BUILD/bench/load_generator"
  out="${OUT:-gpu-out}"
  mkdir -p "$out"
  export SPECPIPE_PLUGIN_PATH="${SPECPIPE_PLUGIN_PATH:-$(dirname "$(find "$SERVE_BUILD/plugins" -name libspecpipe_scv.so | head -n1)")}"
else
  source "$(dirname "$0")/bundle_env.sh"
  gpu_bundle_env specpipe serve_load
  specpipe="$exe"
  loadgen="$bundle/bin/load_generator"
  export SPECPIPE_PLUGIN_PATH="$root/$bundle/plugins"
fi
[[ -x "$specpipe" && -x "$loadgen" ]] || { echo "serve_load: $specpipe or $loadgen missing" >&2; exit 2; }
export SPECPIPE_MODELS="${SPECPIPE_MODELS:-$root/models}"
device="${DEVICE:-cuda:0}"
read -r -a levels <<<"${CLIENTS:-1 8 32 128}"
requests="${REQUESTS:-1:16 8:4 32:4 128:2}"
max_tokens="${MAX_TOKENS:-64}"
prompts="$root/bench/prompts/public.jsonl"
status=0

per_client() {  # requests per client at level $1, from REQUESTS
  local kv
  for kv in $requests; do [[ "${kv%%:*}" == "$1" ]] && { echo "${kv#*:}"; return; }; done
  echo 2
}

# run_mode NAME CONFIG [serve options...]: one server, every level, then SIGTERM.
run_mode() {
  local name="$1" config="$2" log="$out/serve_$1.log" address="" pid t level
  shift 2
  "$specpipe" serve --config "$config" --device "$device" --endpoint 'tcp://127.0.0.1:*' "$@" >"$log" 2>&1 &
  pid=$!
  for ((t = 0; t < ${SERVE_TIMEOUT:-120} * 10; ++t)); do
    address="$(grep -o -m1 'tcp://127\.0\.0\.1:[0-9]*' "$log" 2>/dev/null || true)"
    [[ -n "$address" ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$address" ]]; then
    echo "serve_load: $name: the server did not start" >&2
    tail -n 20 "$log" >&2
    kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    status=1
    return
  fi
  echo "== $name: $(head -n1 "$log") ($(( t / 10 )).$(( t % 10 )) s to start)"
  for level in "${levels[@]}"; do
    timeout "${LEVEL_TIMEOUT:-300}" "$loadgen" --endpoint "$address" --label "$name" --prompts "$prompts" \
      --clients "$level" --requests "$(per_client "$level")" --max-tokens "$max_tokens" --warmup "$level" \
      --record-tokens --json "$out/load_${name}_c$level.json" | tail -n +2 || { echo "serve_load: $name at $level clients failed" >&2; status=1; }
  done
  kill -TERM "$pid"
  for ((t = 0; t < 150 && $(kill -0 "$pid" 2>/dev/null && echo 1 || echo 0); ++t)); do sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { echo "serve_load: $name: no exit 15 s after SIGTERM, killed" >&2; kill -KILL "$pid"; status=1; }
  wait "$pid" || { echo "serve_load: $name: the server exited with $?" >&2; status=1; }
}

here="$(dirname "$0")"
[[ "$device" == cpu ]] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>/dev/null
date -u +%FT%TZ >"$out/date.txt"
for mode in ${MODES:-plain draft ngram scv}; do
  case "$mode" in
    plain) run_mode plain "$here/serve_load.yaml" --no-spec ;;
    draft) for g in ${DRAFT_GAMMAS:-2 4 6}; do run_mode "draft_g$g" "$here/serve_load.yaml" --drafter model --gamma "$g"; done ;;
    ngram) run_mode "ngram_g${NGRAM_GAMMA:-4}" "$here/serve_load.yaml" --drafter ngram --gamma "${NGRAM_GAMMA:-4}" ;;
    scv) run_mode scv "$here/serve_load_scv.yaml" ;;
    *) echo "serve_load: unknown mode $mode" >&2; exit 2 ;;
  esac
done
# Host syncs per round (SYNCS=1, the default on a device, where Nsight Systems is found):
# one server with the draft model at gamma 4 under nsys's CUDA API trace, one client,
# the 16 public prompts one after another; the CUDA API summary counts every
# synchronising call (stream / event / device syncs and synchronous copies) from start-up
# to shutdown, and the requests' final stats count the rounds: an upper bound per round
# (prefill and start-up syncs included).
nsys_bin="${NSYS:-}"
[[ -n "$nsys_bin" ]] || nsys_bin="$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n1)"
if [[ "${SYNCS:-$([[ $device == cpu ]] && echo 0 || echo 1)}" == 1 ]]; then
  if [[ -n "$nsys_bin" ]]; then
    specpipe_plain="$specpipe"
    specpipe="$out/nsys_specpipe.sh"
    printf '#!/usr/bin/env bash\nexec "%s" profile --trace=cuda --sample=none --cpuctxsw=none --force-overwrite=true -o "%s" "%s" "$@"\n' \
      "$nsys_bin" "$out/syncs_draft_g4" "$specpipe_plain" >"$specpipe"
    chmod +x "$specpipe"
    levels=(1)
    requests="1:16"
    run_mode syncs_draft_g4 "$here/serve_load.yaml" --drafter model --gamma 4
    specpipe="$specpipe_plain"
    "$nsys_bin" stats --report cuda_api_sum --format csv --output "$out/syncs_draft_g4" "$out/syncs_draft_g4.nsys-rep" >/dev/null 2>&1 \
      || echo "serve_load: nsys stats failed" >&2
  else
    echo "serve_load: no nsys here: host syncs not counted" >&2
  fi
fi
python3 "$here/serve_load_report.py" "$out" || status=1
# The device returns a few files only: the per-run JSON (token ids included) and the
# servers' logs travel as one archive (PACK=0 keeps them loose; the default on the CPU).
if [[ "${PACK:-$([[ $device == cpu ]] && echo 0 || echo 1)}" == 1 ]]; then
  (cd "$out" && tar -cJf serve_load_runs.tar.xz load_*.json serve_*.log && rm -f load_*.json serve_*.log)
fi
exit $status
