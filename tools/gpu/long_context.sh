#!/usr/bin/env bash
# On the GPU machine, from the repository root, after tools/gpu/bundle.sh: the synthetic
# shapes' decode step and verify windows against context length (issue 16, items 1-2),
# everything on the GPU (the host tier is not on the device yet).
# For each shape of SHAPES and context of CONTEXTS: specpipe_gpu_generate --synthetic
# (random BF16 weights, real shapes; contexts past --prefill-max are booked, not
# prefilled) -> $OUT/long_<shape>_<context>.json, and one table line: decode step (us),
# the floor counting weights only and weights + K/V (device-to-device copy rate of the
# same run), the 5-token window relative to one step, graphs vs eager bits, device memory.
# Environment: SHAPES ("llama3.1-8b qwen3-4b qwen3-0.6b"), CONTEXTS ("8192 32768 131072"),
# ITERS (10), RUN_TIMEOUT (120 s a run), KV_DTYPE (fp32; bf16: the K/V store in BF16).
# Exit status: non-zero if a run failed.
#
# MODE=offload (issue 16, the host tier on the GPU): for each shape and context,
# specpipe_gpu_generate --offload-bench --kv-dtype KV_DTYPE (fp32; bf16 halves the bytes)
# -> $OUT/offload_<shape>_<context>.json and one line:
# decode ms/token with every block on the GPU (graphs; "-" where the pool does not fit),
# with all but the newest POOL_TOKENS (0: a 2,048-token tail, or as many more as the
# host's free memory cannot hold: the GPU tier) on the pinned host tier streamed through
# the ring (RING_SLOTS, 4) and with the copies in line (the seed's synchronous way), the PCIe floor
# (host K/V bytes / pinned H2D rate of the run, 1 GiB buffer), the same bytes copied from
# the host tier alone (copy_ms), ring / floor, overlap efficiency ((sync - ring) /
# min(sync - copy_ms, copy_ms)), GPU
# GiB all-on-GPU vs offloaded, host GiB, tokens on the GPU tier, seconds to pin the tier.
# SHAPES default qwen3-4b there.
#
# MODE=prefill (issue 16 item 5, prefill with offload): for each shape and context,
# specpipe_gpu_generate --prefill-bench --chunk CHUNK (1024, the most a forward takes) --kv-dtype KV_DTYPE
# --prefill-ways WAYS -> $OUT/prefill_<shape>_<context>_<kv>.json and one line: whole-prompt
# prefill tokens/s with every block on the GPU (chunk by chunk) and layer-wise with offload
# (all but the last POOL_TOKENS, 0: a quarter of the context, booked on the pinned host
# tier, each layer's K/V copied there beside the next layer), layer-wise / gpu, layer-wise
# with the copies in line / gpu, and for WAYS with "chunked" the chunk-by-chunk offload
# (moves before each chunk written back beside the next forward, host K/V streamed through
# RING_SLOTS ring slots) and its seed way, as ratios of the chunks after the first; GiB
# moved to the host; and per way whether the last logits and every layer's K/V are the
# same bits as all-on-GPU. SHAPES default "qwen3-4b llama3.1-8b", CONTEXTS "8192", WAYS
# "chunked,layerwise,sync" (the chunked ways stream the host part again for every chunk:
# leave them out past 8K).
set -uo pipefail
source "$(dirname "$0")/bundle_env.sh"
gpu_bundle_env specpipe_gpu_generate long_context
gpu_environment long_context
status=0
# run_tool JSON LIMIT ARGS...: "$exe" ARGS with stdout to JSON and stderr beside it, under
# RUN_TIMEOUT (else LIMIT seconds); sets rc, and status=1 when it failed.
run_tool() {
  local json="$1" limit="$2"
  shift 2
  timeout "${RUN_TIMEOUT:-$limit}" "$exe" "$@" >"$json" 2>"${json%.json}.stderr"
  rc=$?
  [[ $rc -eq 0 ]] || status=1
}
if [[ "${MODE:-}" == prefill ]]; then
  printf '%-12s %4s %8s %10s %10s %8s %8s %8s %8s %8s %s\n' shape kv context gpu_tok/s lw_tok/s lw/gpu lwsync/gpu \
    off/gpu seed/gpu toHostGiB "same bits: logits / K/V (way=yes)"
  for shape in ${SHAPES:-qwen3-4b llama3.1-8b}; do
    for context in ${CONTEXTS:-8192}; do
      json="$out/prefill_${shape}_${context}_${KV_DTYPE:-fp32}.json"
      run_tool "$json" 300 --prefill-bench --synthetic "$shape" --context "$context" --chunk "${CHUNK:-1024}" \
        --ring-slots "${RING_SLOTS:-4}" --kv-dtype "${KV_DTYPE:-fp32}" --pool-tokens "${POOL_TOKENS:-0}" \
        --prefill-ways "${WAYS:-chunked,layerwise,sync}"
      python3 - "$json" "$shape" "$context" <<'PY' || echo "$shape $context: exit $rc, no report ($(tail -n1 "${json%.json}.stderr"))"
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r:
    print(f"{sys.argv[2]:12s} {sys.argv[3]:>8s} error: {r['error']}")
    sys.exit(0)
g = r["gpu"]
lw = r.get("layerwise", {})
ratio = lambda k: f"{r[k]:8.3f}" if k in r else f"{'-':>8s}"
lw_tps = f"{lw['tokens_per_s_total']:10.0f}" if lw else f"{'-':>10s}"
gib = (lw or r.get("offload", {})).get("bytes_to_host", 0) / 2**30
same = " ".join(f"{w}={r['logits_identical'][w]}/{r['kv_identical'][w]}" for w in r["logits_identical"])
print(f"{sys.argv[2]:12s} {r['kv_dtype']:>4s} {sys.argv[3]:>8s} {g['tokens_per_s_total']:10.0f} {lw_tps} "
      f"{ratio('layerwise_vs_gpu')} {ratio('layerwise_sync_vs_gpu')} {ratio('offload_vs_gpu')} {ratio('seed_vs_gpu')} "
      f"{gib:8.2f} {same}")
PY
    done
  done
  exit $status
fi
if [[ "${MODE:-}" == offload ]]; then
  printf '%-10s %4s %8s %9s %9s %9s %9s %9s %7s %7s %8s %8s %8s %8s %6s %s\n' shape kv context gpu_ms ring_ms sync_ms \
    floor_ms copy_ms ring/fl overlap gpuGiB offGiB hostGiB gpu_tok pin_s H2D/tier_GBps
  for shape in ${SHAPES:-qwen3-4b}; do
    for context in ${CONTEXTS:-8192 32768 131072}; do
      json="$out/offload_${shape}_${context}.json"
      run_tool "$json" 300 --offload-bench --synthetic "$shape" --context "$context" --iters "${ITERS:-5}" \
        --ring-slots "${RING_SLOTS:-4}" --kv-dtype "${KV_DTYPE:-fp32}" --pool-tokens "${POOL_TOKENS:-0}"
      python3 - "$json" "$shape" "$context" <<'PY' || echo "$shape $context: exit $rc, no report ($(tail -n1 "${json%.json}.stderr"))"
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r:
    print(f"{sys.argv[2]:10s} {sys.argv[3]:>8s} error: {r['error']}")
    sys.exit(0)
g, o = r["gpu"], r["offload"]
gpu_ms = f"{g['decode_ms']:9.2f}" if "decode_ms" in g else f"{'-':>9s}"
gpu_gib = f"{g['device_bytes'] / 2**30:8.1f}" if "device_bytes" in g else f"{'-':>8s}"
print(f"{sys.argv[2]:10s} {r.get('kv_dtype', 'f32'):>4s} {sys.argv[3]:>8s} {gpu_ms} {o['ring_ms']:9.2f} {o['sync_ms']:9.2f} "
      f"{o['pcie_floor_ms']:9.2f} {o['tier_copy_only_ms']:9.2f} {o['ring_vs_floor']:7.3f} {o['overlap_efficiency']:7.2f} "
      f"{gpu_gib} {o['device_bytes'] / 2**30:8.1f} {o['host_tier_bytes'] / 2**30:8.1f} {o['gpu_tokens']:8d} "
      f"{r['host_pin_ms'] / 1e3:6.1f} {r['pinned_h2d_GBps']:.1f}/{o['tier_h2d_GBps']:.1f}")
PY
    done
  done
  exit $status
fi
printf '%-12s %8s %10s %9s %9s %8s %8s %7s %7s %s\n' shape context decode_us floor_us +kv_us vs_floor vs+kv win5 GiB "graph==eager"
for shape in ${SHAPES:-llama3.1-8b qwen3-4b qwen3-0.6b}; do
  for context in ${CONTEXTS:-8192 32768 131072}; do
    json="$out/long_${shape}_${context}_${KV_DTYPE:-fp32}.json"
    run_tool "$json" 120 --synthetic "$shape" --context "$context" --iters "${ITERS:-10}" --kv-dtype "${KV_DTYPE:-fp32}"
    python3 - "$json" "$shape" "$context" "$rc" <<'PY' || echo "$shape $context: exit $rc, no report ($(tail -n1 "${json%.json}.stderr"))"
import json, sys
r = json.load(open(sys.argv[1]))
if "error" in r:
    print(f"{sys.argv[2]:12s} {sys.argv[3]:>8s} error: {r['error']}")
    sys.exit(0)
g = r["graphs"]
w5 = next(w["relative"] for w in g["windows"] if w["n"] == 5)
same = all(x["bitwise_identical"] for x in r["graph_vs_eager"])
print(f"{sys.argv[2]:12s} {sys.argv[3]:>8s} {g['decode_us']:10.1f} {r['floor_us']:9.1f} {r['floor_with_kv_us']:9.1f} "
      f"{g['decode_us'] / r['floor_us']:8.3f} {g['decode_us'] / r['floor_with_kv_us']:8.3f} {w5:7.3f} "
      f"{r['device_bytes'] / 2**30:7.1f} {same} exit {sys.argv[4]}")
PY
  done
done
exit $status
