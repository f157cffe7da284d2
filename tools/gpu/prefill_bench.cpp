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
#include "tools/gpu/kv_digest.h"
#include "tools/gpu/synthetic_models.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {
namespace {

using json = nlohmann::json;

constexpr int32_t kPrefillBlock = 16;

struct PrefillRun {
  double ms = 0;                 // the timed chunks (all but the first)
  int32_t timed_tokens = 0;
  double total_ms = 0;           // the whole prompt (layer-wise: all of it is one call)
  std::vector<float> last_row;   // the last position's logits
  std::vector<uint64_t> kv;      // per-layer digests of the prompt's K/V (kv_digest.h)
  OffloadStats moved;
  RingStats ring;
  size_t device_bytes = 0;
};

/// One chunk's forward of a throwaway sequence: first-call costs (module loading, the
/// GEMM's occupancy queries, lazy buffers) stay out of the timings.
void warm_up(CudaTransformer& m, KvStore& kv, const std::vector<int32_t>& prompt, int32_t chunk) {
  const SeqId seq = kv.add_sequence({});
  const auto n = std::min<size_t>(static_cast<size_t>(chunk), prompt.size());
  kv.reserve(seq, static_cast<int32_t>(n));
  CudaLogits lg;
  const ForwardWindow w{seq, std::span<const int32_t>(prompt.data(), n), LogitsMode::last};
  m.forward({&w, 1}, kv, lg);
  kv.release(seq);
}

/// The run's logits, K/V digests and books; releases the sequence; progress on stderr
/// (a run cut short by a time limit still leaves its finished parts).
void finish_run(PrefillRun& r, const char* way, CudaTransformer& m, KvStore& kv, SeqId seq, const CudaLogits& lg,
                int32_t tokens) {
  const std::span<const float> row = lg.row(0, 0);
  r.last_row.assign(row.begin(), row.end());
  r.kv = kv_digest(m, kv, seq, tokens);
  r.ring = m.ring_stats();
  r.device_bytes = m.device_bytes();
  kv.release(seq);
  std::fprintf(stderr, "%s prefill of %d tokens: %.1f ms (%.0f tok/s), %lld blocks to host\n", way, tokens,
               r.total_ms, tokens / (r.total_ms / 1e3), static_cast<long long>(r.moved.blocks_to_host));
}

/// Prefills `prompt` into a new sequence of `kv`, `chunk` tokens a forward, committing
/// each; with a host tier the reserve first moves the oldest blocks there. ms: the chunks
/// after the first (the existing figure); total_ms: all of them, incl. each forward's sync.
PrefillRun prefill(CudaTransformer& m, KvStore& kv, const std::vector<int32_t>& prompt, int32_t chunk,
                   const char* way) {
  PrefillRun r;
  const OffloadStats before = kv.offload_stats();
  const SeqId seq = kv.add_sequence({});
  CudaLogits lg;
  const Clock::time_point start = Clock::now();
  Clock::time_point t0 = start;
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
  r.total_ms = ms_since(start);
  r.moved.blocks_to_host = kv.offload_stats().blocks_to_host - before.blocks_to_host;
  r.moved.bytes_to_host = kv.offload_stats().bytes_to_host - before.bytes_to_host;
  finish_run(r, way, m, kv, seq, lg, static_cast<int32_t>(prompt.size()));
  return r;
}

/// The layer-wise prefill (CudaTransformer::prefill_layerwise): all but the last
/// pool_tokens (rounded up to whole blocks) booked on the host tier, the rest in the
/// pool; every layer's K/V copied out beside the next layer (overlap) or in line.
PrefillRun prefill_layerwise(CudaTransformer& m, KvStore& kv, const std::vector<int32_t>& prompt, int32_t pool_tokens,
                             bool overlap) {
  PrefillRun r;
  const auto n = static_cast<int32_t>(prompt.size());
  const int32_t host_tokens = std::max(0, n - pool_tokens) / kPrefillBlock * kPrefillBlock;
  const OffloadStats before = kv.offload_stats();
  const SeqId seq = kv.add_sequence({});
  CudaLogits lg;
  const Clock::time_point t0 = Clock::now();
  kv.book_host_prefix(seq, std::span(prompt).first(static_cast<size_t>(host_tokens)));
  kv.reserve(seq, n);
  m.prefill_layerwise(seq, prompt, kv, lg, overlap);
  kv.commit(seq, std::span(prompt).subspan(static_cast<size_t>(host_tokens)));
  r.total_ms = ms_since(t0);
  r.moved.blocks_to_host = kv.offload_stats().blocks_to_host - before.blocks_to_host;
  r.moved.bytes_to_host = kv.offload_stats().bytes_to_host - before.bytes_to_host;
  finish_run(r, overlap ? "layer-wise" : "layer-wise in line", m, kv, seq, lg, n);
  r.ring = {};  // no ring forward (its counts are the chunked ways')
  return r;
}

json run_json(const PrefillRun& r, int32_t tokens) {
  json j = {{"total_ms", r.total_ms},
            {"tokens_per_s_total", tokens / (r.total_ms / 1e3)},
            {"blocks_to_host", r.moved.blocks_to_host},
            {"bytes_to_host", r.moved.bytes_to_host},
            {"ring_forwards", r.ring.forwards},
            {"ring_bytes_loaded", r.ring.bytes_loaded},
            {"device_bytes", r.device_bytes}};
  if (r.timed_tokens > 0) {
    j["prefill_ms"] = r.ms;
    j["timed_tokens"] = r.timed_tokens;
    j["tokens_per_s"] = r.timed_tokens / (r.ms / 1e3);
  }
  return j;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

json prefill_bench(const std::string& shape, int32_t context, int32_t chunk, int32_t ring_slots, int32_t pool_tokens,
                   uint64_t seed, CudaTransformerOptions opt, const std::string& ways) {
  if (chunk < kPrefillBlock || chunk > 16384)
    throw std::invalid_argument("--chunk must be in [16, 16384], got " + std::to_string(chunk));
  const bool chunked = ways.find("chunked") != std::string::npos;
  const bool layerwise = ways.find("layerwise") != std::string::npos;
  const bool layerwise_sync = ways.find("sync") != std::string::npos;
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
  r["ways"] = ways;
  r["kv_dtype"] = std::string(dtype_name(opt.kv_dtype));
  r["device"] = device_name();
  opt.max_tokens = std::min(chunk, 1024);
  opt.copy_logits = true;
  // A prompt of ids spread over the vocabulary (the cost does not depend on them; the
  // logits compared below do).
  std::vector<int32_t> prompt(static_cast<size_t>(context));
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int32_t>((i * 2654435761u + seed) % static_cast<uint64_t>(c.vocab_size));

  // All on the GPU: the reference, chunk by chunk.
  PrefillRun gpu;
  {
    auto m = CudaTransformer::random(c, seed, (context + chunk) / kPrefillBlock + 4, kPrefillBlock, opt);
    KvStore kv(m->kv_config());
    warm_up(*m, kv, prompt, chunk);
    gpu = prefill(*m, kv, prompt, chunk, "all on the GPU");
  }
  // Offloaded: the pool holds pool_tokens plus a chunk; the rest goes to the pinned tier
  // (pinned once: every way uses the same model, store and tier, the sequence released
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
  warm_up(*m, kv, prompt, chunk);
  r["gpu"] = run_json(gpu, context);
  json same_logits, same_kv;
  const auto compare = [&](const char* name, const PrefillRun& run) {
    r[name] = run_json(run, context);
    same_logits[name] = same_bits(gpu.last_row, run.last_row);
    same_kv[name] = gpu.kv == run.kv;
  };
  if (chunked) {
    const auto offloaded = [&](bool overlap, const char* way) {
      m->enable_layer_ring(ring_slots, overlap);  // a new ring: its stats from 0
      return prefill(*m, kv, prompt, chunk, way);
    };
    const PrefillRun off = offloaded(true, "chunked offload");
    const PrefillRun sync = offloaded(false, "chunked, copies in line");
    compare("offload", off);
    compare("seed_sync", sync);
    r["offload_vs_gpu"] = gpu.ms / off.ms;  // tokens/s ratio (same timed tokens)
    r["seed_vs_gpu"] = gpu.ms / sync.ms;
  }
  if (layerwise) {
    const PrefillRun lw = prefill_layerwise(*m, kv, prompt, pool_tokens, true);
    compare("layerwise", lw);
    r["layerwise_vs_gpu"] = gpu.total_ms / lw.total_ms;  // the whole prompt each
  }
  if (layerwise_sync) {
    const PrefillRun lw = prefill_layerwise(*m, kv, prompt, pool_tokens, false);
    compare("layerwise_sync", lw);
    r["layerwise_sync_vs_gpu"] = gpu.total_ms / lw.total_ms;
  }
  r["logits_identical"] = same_logits;
  r["kv_identical"] = same_kv;
  r["note"] = "host wall time; total_ms: the whole prompt after a one-chunk warm-up forward (layer-wise: booking, "
              "the prefill call and its sync, the commit); prefill_ms / tokens_per_s: the chunks after the first. "
              "offload: chunk by chunk, a pool of pool_tokens + a chunk, the rest moved to the pinned host tier before "
              "each chunk, written back beside the next forward on the copy stream, host K/V streamed through the "
              "ring; seed_sync: the same copies in line. layerwise: the whole prompt one layer at a time (chunks of "
              "max_tokens rows), all but the last pool_tokens booked on the host tier, each layer's K/V copied there "
              "on the copy stream while the next layer computes; layerwise_sync: those copies in line. "
              "kv_identical: per-layer digests of the prompt's K/V (pool and host tier) equal to all-on-GPU";
  return r;
}

}  // namespace specpipe::gpu_tool
