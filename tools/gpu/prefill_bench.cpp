// The prefill-with-offload benchmark (prefill_bench.h).
#include "tools/gpu/prefill_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvstore/kv_store.h"
#include "kvstore/offload_policy.h"
#include "model/cuda/pinned_host_allocator.h"
#include "tools/gpu/synthetic_models.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {
namespace {

using json = nlohmann::json;

constexpr int32_t kPrefillBlock = 16;

struct PrefillRun {
  double ms = 0;                 // the timed chunks (all but the first)
  int32_t timed_tokens = 0;
  std::vector<float> last_row;   // the last position's logits
  OffloadStats moved;
  RingStats ring;
  size_t device_bytes = 0;
};

/// Prefills `prompt` into a new sequence of `kv`, `chunk` tokens a forward, committing
/// each; with a host tier the reserve first moves the oldest blocks there. The first
/// chunk is not timed (it pays lazy allocations); the rest is, incl. each forward's sync.
PrefillRun prefill(CudaTransformer& m, KvStore& kv, const std::vector<int32_t>& prompt, int32_t chunk) {
  PrefillRun r;
  const SeqId seq = kv.add_sequence({});
  CudaLogits lg;
  Clock::time_point t0{};
  for (size_t at = 0; at < prompt.size(); at += static_cast<size_t>(chunk)) {
    if (at == static_cast<size_t>(chunk)) t0 = Clock::now();
    const auto n = std::min<size_t>(static_cast<size_t>(chunk), prompt.size() - at);
    const std::span<const int32_t> tokens(prompt.data() + at, n);
    const bool last = at + n == prompt.size();
    reserve_offloading(kv, seq, kv.length(seq) + static_cast<int32_t>(n));
    const ForwardWindow w{seq, tokens, last ? LogitsMode::last : LogitsMode::none};
    m.forward({&w, 1}, kv, lg);
    kv.commit(seq, tokens);
    if (at >= static_cast<size_t>(chunk)) r.timed_tokens += static_cast<int32_t>(n);
  }
  r.ms = ms_since(t0);
  const std::span<const float> row = lg.row(0, 0);
  r.last_row.assign(row.begin(), row.end());
  r.moved = kv.offload_stats();
  r.ring = m.ring_stats();
  r.device_bytes = m.device_bytes();
  kv.release(seq);
  // Progress on stderr: a run cut short by a time limit still leaves its finished parts.
  std::fprintf(stderr, "prefill of %zu tokens: %.1f ms for the %d timed tokens (%.0f tok/s), %lld blocks to host\n",
               prompt.size(), r.ms, r.timed_tokens, r.timed_tokens / (r.ms / 1e3),
               static_cast<long long>(r.moved.blocks_to_host));
  return r;
}

json run_json(const PrefillRun& r) {
  return {{"prefill_ms", r.ms},
          {"timed_tokens", r.timed_tokens},
          {"tokens_per_s", r.timed_tokens / (r.ms / 1e3)},
          {"blocks_to_host", r.moved.blocks_to_host},
          {"bytes_to_host", r.moved.bytes_to_host},
          {"ring_forwards", r.ring.forwards},
          {"ring_bytes_loaded", r.ring.bytes_loaded},
          {"device_bytes", r.device_bytes}};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

json prefill_bench(const std::string& shape, int32_t context, int32_t chunk, int32_t ring_slots, int32_t pool_tokens,
                   uint64_t seed, CudaTransformerOptions opt) {
  if (chunk < kPrefillBlock || chunk > 16384)
    throw std::invalid_argument("--chunk must be in [16, 16384], got " + std::to_string(chunk));
  json r;
  ModelConfig c = synthetic_model_config(shape);
  if (context + 16 > c.max_position_embeddings) {
    c.max_position_embeddings = context + 16;
    r["positions_raised_to"] = c.max_position_embeddings;
  }
  if (pool_tokens <= 0) pool_tokens = std::max(context / 4, 2 * chunk);
  pool_tokens = std::min(pool_tokens, context);
  r["model"] = shape;
  r["context"] = context;
  r["chunk"] = chunk;
  r["ring_slots"] = ring_slots;
  r["pool_tokens"] = pool_tokens;
  r["kv_dtype"] = std::string(dtype_name(opt.kv_dtype));
  r["device"] = device_name();
  opt.max_tokens = chunk;
  opt.copy_logits = true;
  // A prompt of ids spread over the vocabulary (the cost does not depend on them; the
  // logits compared below do).
  std::vector<int32_t> prompt(static_cast<size_t>(context));
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int32_t>((i * 2654435761u + seed) % static_cast<uint64_t>(c.vocab_size));

  // All on the GPU.
  PrefillRun gpu;
  {
    auto m = CudaTransformer::random(c, seed, (context + chunk) / kPrefillBlock + 4, kPrefillBlock, opt);
    KvStore kv(m->kv_config());
    gpu = prefill(*m, kv, prompt, chunk);
  }
  // Offloaded: the pool holds pool_tokens plus a chunk; the rest goes to the pinned tier
  // (pinned once: both runs use the same model, store and tier, the sequence released
  // between them).
  auto m = CudaTransformer::random(c, seed, (pool_tokens + chunk) / kPrefillBlock + 2, kPrefillBlock, opt);
  KvStoreConfig kc = m->kv_config();
  KvStore kv(kc);
  const HostTierLayout layout{kc.num_layers, kc.num_kv_heads, kc.head_dim, kc.block_size, opt.kv_dtype};
  const int64_t host_bytes = (int64_t{context} / kPrefillBlock + 2) * HostKvTier::block_bytes(layout);
  const auto t_pin = Clock::now();
  kv.attach_host_tier(std::make_unique<HostKvTier>(layout, host_bytes, &cuda::pinned_host_allocator()),
                      host_tier_copier(*m));
  r["host_pin_ms"] = ms_since(t_pin);
  r["host_tier_bytes"] = kv.host_tier()->bytes();
  auto offloaded = [&](bool overlap) {
    const OffloadStats before = kv.offload_stats();
    m->enable_layer_ring(ring_slots, overlap);  // a new ring: its stats from 0
    PrefillRun run = prefill(*m, kv, prompt, chunk);
    run.moved.blocks_to_host -= before.blocks_to_host;
    run.moved.bytes_to_host -= before.bytes_to_host;
    return run;
  };
  const PrefillRun off = offloaded(true);
  const PrefillRun sync = offloaded(false);
  r["gpu"] = run_json(gpu);
  r["offload"] = run_json(off);
  r["seed_sync"] = run_json(sync);
  r["offload_vs_gpu"] = gpu.ms / off.ms;  // tokens/s ratio (same timed tokens)
  r["seed_vs_gpu"] = gpu.ms / sync.ms;
  r["logits_identical"] = {{"offload", same_bits(gpu.last_row, off.last_row)},
                           {"seed_sync", same_bits(gpu.last_row, sync.last_row)}};
  r["note"] = "host wall time of the prefill's chunks after the first (each forward incl. its sync); "
              "offload: pool of pool_tokens + a chunk, the rest moved to the pinned host tier before each chunk, "
              "written back beside the next forward on the copy stream, host K/V streamed through the ring; "
              "seed_sync: the same copies in line on the compute stream";
  return r;
}

}  // namespace specpipe::gpu_tool
