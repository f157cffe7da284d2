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
# Here, the bundle (the sync counter is a preload library outside the build, added by hand):
#   SPECPIPE_GPU_BUILD=$PWD/build-serve SPECPIPE_BUNDLE=gpu-bundle-serve SPECPIPE_BUNDLE_BENCH=ON \
#     SPECPIPE_BUNDLE_TOOLS="specpipe load_generator" SPECPIPE_BUNDLE_PLUGINS="specpipe_scv specpipe_nwor" \
#     tools/gpu/bundle.sh
#   gcc -O2 -shared -fPIC -o gpu-bundle-serve/lib/libserve_sync_count.so tools/gpu/serve_sync_count.c -ldl
#   tar -cJf gpu-bundle-serve.tar.xz gpu-bundle-serve
# On the GPU machine, from the repository root (one call; about 30 s of wall time):
#   SPECPIPE_BUNDLE=gpu-bundle-serve bash tools/gpu/serve_load.sh
# An engine change A/B in the same call: pack the old specpipe as bin/specpipe_base, then
#   BASE_EXE=$PWD/gpu-bundle-serve/bin/specpipe_base BASE_MODES="plain draft ngram scv" (after unpacking);
#   a plugin A/B: the old plugins in a folder, BASE_PLUGIN_PATH=that folder
# Here, on the CPU, with a build directory and small counts (the same script):
#   SERVE_BUILD=build-serve DEVICE=cpu CLIENTS="1 4" REQUESTS="1:3 4:1" MAX_TOKENS=12 \
#     DRAFT_GAMMAS=4 OUT=/tmp/serve-cpu bash tools/gpu/serve_load.sh
# Environment: DEVICE (cuda:0), CLIENTS ("1 8 32 128"), REQUESTS (per-client requests by
# level, "1:16 8:4 32:4 128:2": 16 at one client covers every public prompt alone),
# MAX_TOKENS (64), DRAFT_GAMMAS ("2 4 6"), NGRAM_GAMMA (4), MODES ("plain draft ngram scv";
# also scv_line: SCV with the plugin's costs_by_gamma false;
# also draft_fused: the draft model at each gamma of DRAFT_GAMMAS with models.draft_fused_step
# (its steps as one persistent kernel); also draft_noahead: the same with draft-ahead off;
# also plain_mb and draft_mb: two micro-batches in flight, serve_load_micro.yaml; off:
# servers with the draft model that never draft, for what that costs),
# SERVE_TIMEOUT (seconds a server may take to start, 120), LEVEL_TIMEOUT (300), SYNCS,
# BASE_FIRST (1: the BASE_MODES servers before the others), SYNC_SHIM, SYNC_TOKENS ("64 128"), SYNC_REQUESTS (16), BASE_SYNCS (0; 1: count BASE_EXE's
# syncs too), SYNC_SITES (0; N: each counted call's N frames too, syncs_*.txt.sites, named by
# tools/gpu/serve_sync_sites.py with the unstripped build's specpipe; on an H100 the servers
# failed at start with it, see serve_sync_count.c), SCV_LOG_LEVEL (the SCV server's log level, e.g. debug: its plan decisions),
# PACK (below), OUT ($OUT or gpu-out/).
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
      --clients "$level" --requests "$(per_client "$level")" --max-tokens "$max_tokens" --warmup "${warmup_override:-$level}" \
      --record-tokens --json "$out/load_${name}_c$level.json" | tail -n +2 || { echo "serve_load: $name at $level clients failed" >&2; status=1; }
  done
  # The server's CPU time over its start-up and every level, and its threads: a mode whose
  # threads spin takes cores from the clients (128 of them at the top level).
  [[ -r /proc/$pid/stat ]] && awk -v name="$name" -v hz="$(getconf CLK_TCK)" \
    '{printf "== %s: server CPU %.2f s user, %.2f s system, %d threads\n", name, $14 / hz, $15 / hz, $20}' "/proc/$pid/stat"
  kill -TERM "$pid"
  for ((t = 0; t < 150 && $(kill -0 "$pid" 2>/dev/null && echo 1 || echo 0); ++t)); do sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { echo "serve_load: $name: no exit 15 s after SIGTERM, killed" >&2; kill -KILL "$pid"; status=1; }
  wait "$pid" || { echo "serve_load: $name: the server exited with $?" >&2; status=1; }
}

here="$(dirname "$0")"
[[ "$device" == cpu ]] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>/dev/null
date -u +%FT%TZ >"$out/date.txt"
# run_modes PREFIX MODE...: each mode's server and levels.
run_modes() {
  local prefix="$1" mode g
  shift
  for mode in "$@"; do
    case "$mode" in
      plain) run_mode "${prefix}plain" "$here/serve_load.yaml" --no-spec ;;
      draft) for g in ${DRAFT_GAMMAS:-2 4 6}; do run_mode "${prefix}draft_g$g" "$here/serve_load.yaml" --drafter model --gamma "$g"; done ;;
      # draft_noahead: the draft model at each gamma of DRAFT_GAMMAS without draft-ahead
      # (slots.drafter.draft_ahead off: no chain beside the verify).
      draft_noahead)
        sed 's/^    max_gamma: 6$/&\n    draft_ahead: "off"/' "$here/serve_load.yaml" >"$out/noahead.yaml"
        for g in ${DRAFT_GAMMAS:-2 4 6}; do run_mode "${prefix}noahead_g$g" "$out/noahead.yaml" --drafter model --gamma "$g"; done ;;
      draft_fused)
        printf 'models:\n  draft_fused_step: true\n' | cat "$here/serve_load.yaml" - >"$out/fused.yaml"
        for g in ${DRAFT_GAMMAS:-2 4 6}; do run_mode "${prefix}fused_g$g" "$out/fused.yaml" --drafter model --gamma "$g"; done ;;
      ngram) run_mode "${prefix}ngram_g${NGRAM_GAMMA:-4}" "$here/serve_load.yaml" --drafter ngram --gamma "${NGRAM_GAMMA:-4}" ;;
      # SCV_LOG_LEVEL=debug: the plugin's decisions in serve_scv.log (a line each time the
      # round's largest gamma changes: batch, costs, planned and plain tokens per ms).
      # scv_line: SCV planning one sequence by the cost line alone (costs_by_gamma false),
      # as before the host measured a round per gamma (an A/B of that in one call).
      scv | scv_line)
        if [[ $mode == scv ]]; then cp "$here/serve_load_scv.yaml" "$out/$mode.yaml"
        else sed 's/^      max_gamma: 6$/&\n      costs_by_gamma: false/' "$here/serve_load_scv.yaml" >"$out/$mode.yaml"; fi
        [[ -n "${SCV_LOG_LEVEL:-}" ]] && printf 'logging:\n  level: %s\n' "$SCV_LOG_LEVEL" >>"$out/$mode.yaml"
        run_mode "${prefix}$mode" "$out/$mode.yaml" ;;
      # Two rounds in flight (scheduler.micro_batches 2, four actor threads: serve_load_micro.yaml).
      plain_mb) run_mode "${prefix}plain_mb2" "$here/serve_load_micro.yaml" --no-spec ;;
      draft_mb) for g in ${DRAFT_GAMMAS:-2 4 6}; do run_mode "${prefix}draft_g${g}_mb2" "$here/serve_load_micro.yaml" --drafter model --gamma "$g"; done ;;
      # What a server with the draft model costs when no round drafts (the SCV-off cost at
      # high batch): the draft model at gamma 0 with and without draft-ahead (its stream
      # priority), and SCV held at gamma 0 by its plugin config (plugin calls, cost model).
      off)
        run_mode "${prefix}off_draft" "$here/serve_load.yaml" --drafter model --gamma 0
        sed 's/^    max_gamma: 6$/&\n    draft_ahead: "off"/' "$here/serve_load.yaml" >"$out/noahead.yaml"
        run_mode "${prefix}off_draft_noahead" "$out/noahead.yaml" --drafter model --gamma 0
        sed 's/^      max_gamma: 6$/      max_gamma: 0/' "$here/serve_load_scv.yaml" >"$out/scv_off.yaml"
        run_mode "${prefix}off_scv" "$out/scv_off.yaml" ;;
      *) echo "serve_load: unknown mode $mode" >&2; exit 2 ;;
    esac
  done
}
# BASE_EXE=path and/or BASE_PLUGIN_PATH=dir, BASE_MODES="ngram scv": the same modes with
# another specpipe binary or other plugins (an A/B of an engine or plugin change in one
# call), reported as base_<mode>; after the other modes, or before them with BASE_FIRST=1
# (alternate it between rounds so neither side always runs second).
run_base_modes() {
  [[ -n "${BASE_EXE:-}${BASE_PLUGIN_PATH:-}" && -n "${BASE_MODES:-}" ]] || return 0
  local specpipe_new="$specpipe" plugins_new="$SPECPIPE_PLUGIN_PATH"
  specpipe="${BASE_EXE:-$specpipe}"
  export SPECPIPE_PLUGIN_PATH="${BASE_PLUGIN_PATH:-$SPECPIPE_PLUGIN_PATH}"
  # shellcheck disable=SC2086
  run_modes base_ $BASE_MODES
  specpipe="$specpipe_new"
  export SPECPIPE_PLUGIN_PATH="$plugins_new"
}
[[ "${BASE_FIRST:-0}" == 1 ]] && run_base_modes
# shellcheck disable=SC2086
run_modes "" ${MODES:-plain draft ngram scv}
[[ "${BASE_FIRST:-0}" == 1 ]] || run_base_modes
# Host syncs per round (SYNCS=1, the default on a device): servers with
# libserve_sync_count.so preloaded (tools/gpu/serve_sync_count.c: counts the synchronising
# CUDA driver calls, written at exit), one client, the 16 public prompts one after
# another, no warm-up, plain and the draft model at gamma 4, each at 64 and 128 new
# tokens: the difference between the two over the difference in rounds (the requests'
# final stats) is the count per decode round, start-up and prefill cancelled out.
shim="${SYNC_SHIM:-$root/${bundle:-gpu-bundle}/lib/libserve_sync_count.so}"
if [[ "${SYNCS:-$([[ $device == cpu ]] && echo 0 || echo 1)}" == 1 ]]; then
  if [[ -f "$shim" ]]; then
    specpipe_plain="$specpipe"
    levels=(1)
    requests="1:${SYNC_REQUESTS:-16}"
    saved_tokens="$max_tokens"
    # With BASE_EXE and BASE_SYNCS=1 the old binary is counted too (modes base_plain,
    # base_draft_g4): syncs per round before / after a change in one call.
    binaries=("=$specpipe_plain")
    [[ -n "${BASE_EXE:-}" && "${BASE_SYNCS:-0}" == 1 ]] && binaries+=("base_=$BASE_EXE")
    for tokens in ${SYNC_TOKENS:-64 128}; do
      max_tokens="$tokens"
      for binary in "${binaries[@]}"; do
        for mode in plain draft_g4; do
          name="syncs_${binary%%=*}${mode}_t$tokens"
          specpipe="$out/sync_specpipe.sh"
          printf '#!/usr/bin/env bash\nSERVE_SYNC_COUNT_FILE="%s" SERVE_SYNC_COUNT_SITES="%s" LD_PRELOAD="%s" exec "%s" "$@"\n' \
            "$out/$name.txt" "${SYNC_SITES:-0}" "$shim" "${binary#*=}" >"$specpipe"
          chmod +x "$specpipe"
          warmup_override=0
          if [[ $mode == plain ]]; then run_mode "$name" "$here/serve_load.yaml" --no-spec
          else run_mode "$name" "$here/serve_load.yaml" --drafter model --gamma 4; fi
          unset warmup_override
        done
      done
    done
    specpipe="$specpipe_plain"
    max_tokens="$saved_tokens"
    rm -f "$out/sync_specpipe.sh"
  else
    echo "serve_load: no $shim: host syncs not counted" >&2
  fi
fi
python3 "$here/serve_load_report.py" "$out" || status=1
# The device returns a few files only: the per-run JSON (token ids included) and the
# servers' logs travel as one archive (PACK=0 keeps them loose; the default on the CPU).
if [[ "${PACK:-$([[ $device == cpu ]] && echo 0 || echo 1)}" == 1 ]]; then
  (cd "$out" && tar -cJf serve_load_runs.tar.xz load_*.json serve_*.log && rm -f load_*.json serve_*.log)
fi
exit $status
