// The offload benchmark (offload_bench.h).
#include "tools/gpu/offload_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvstore/kv_store.h"
#include "model/cuda/pinned_host_allocator.h"
#include "tools/gpu/synthetic_models.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {
namespace {

using json = nlohmann::json;

constexpr int32_t kBlock = 16;
// The offloaded runs' pool: the GPU-resident tail and the step's window.
constexpr int32_t kTailTokens = 2048;

size_t device_used() {
  size_t free = 0, total = 0;
  cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total - free;
}

/// Median host wall time (ms, incl. the forward's sync) of a one-token decode step at
/// the sequence's end: 1 warm-up, then `iters`.
double step_ms(CudaTransformer& m, KvStore& kv, SeqId seq, int iters) {
  const int32_t token = 1;
  kv.reserve(seq, kv.length(seq) + 1);
  const ForwardWindow w{seq, {&token, 1}, LogitsMode::last};
  CudaLogits lg;
  m.forward({&w, 1}, kv, lg);
  std::vector<double> v;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    m.forward({&w, 1}, kv, lg);
    v.push_back(ms_since(t0));
  }
  return median(v);
}

/// Books `context` committed tokens (no prefill: a step's cost does not depend on the
/// values), a chunk at a time, moving full blocks but the newest to the host tier after
/// each chunk when the store has one, until `host_blocks` of them are there (the rest
/// stays in the pool: the GPU tier).
SeqId book(KvStore& kv, int32_t context, int64_t host_blocks = 0) {
  const std::vector<int32_t> none;
  const SeqId seq = kv.add_sequence(none);
  const std::vector<int32_t> chunk(1024, 1);
  while (kv.length(seq) < context) {
    const auto n = std::min<int32_t>(1024, context - kv.length(seq));
    kv.reserve(seq, kv.length(seq) + n);
    kv.commit(seq, std::span<const int32_t>(chunk).first(static_cast<size_t>(n)));
    const int64_t room = host_blocks - kv.host_blocks(seq);
    const int64_t movable = std::min<int64_t>(kv.offloadable_blocks(seq) - 1, room);
    if (kv.host_tier() && movable > 0) kv.offload_prefix(seq, static_cast<int32_t>(movable));
  }
  return seq;
}

/// Host memory the machine has free (MemAvailable), in bytes; 0 when unknown.
int64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

/// Milliseconds to copy every layer's host-tier K and V of `seq` to the device with
/// nothing else running, from the tier itself (one copy a layer and K/V: the ring's loads
/// without the forward). The ring cannot beat this.
double tier_copy_ms(const KvStore& kv, SeqId seq) {
  const HostKvTier& tier = *kv.host_tier();
  const auto blocks = kv.host_block_table(seq);
  for (size_t i = 1; i < blocks.size(); ++i)
    if (blocks[i] != blocks[i - 1] + 1) throw std::runtime_error("tier_copy_ms: host blocks not in one run");
  const size_t bytes = blocks.size() * static_cast<size_t>(tier.block_tensor_bytes());
  void* dev = nullptr;
  cuda_check(cudaMalloc(&dev, bytes), "cudaMalloc");
  const double ms = stream_ms([&] {
    for (int32_t l = 0; l < tier.layout().num_layers; ++l)
      for (const void* src : {tier.k_data(l), tier.v_data(l)})
        cuda_check(cudaMemcpyAsync(dev,
                                   static_cast<const char*>(src) + int64_t{blocks.front()} * tier.block_tensor_bytes(),
                                   bytes, cudaMemcpyHostToDevice),
                   "tier copy");
  });
  cudaFree(dev);
  return ms;
}

}  // namespace

double pinned_h2d_bandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *host = nullptr, *dev = nullptr;
  cuda_check(cudaHostAlloc(&host, bytes, cudaHostAllocPortable), "cudaHostAlloc");
  cuda_check(cudaMalloc(&dev, bytes), "cudaMalloc");
  std::memset(host, 1, bytes);
  cuda_check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice), "warm-up copy");
  const int reps = 5;
  const double ms = stream_ms([&] {
    for (int i = 0; i < reps; ++i) cuda_check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice), "copy");
  });
  cudaFree(dev);
  cudaFreeHost(host);
  return static_cast<double>(bytes) * reps / (ms / 1e3);
}

json offload_bench(const std::string& shape, int32_t context, int32_t ring_slots, int32_t pool_tokens, uint64_t seed,
                   int iters, CudaTransformerOptions opt) {
  json r;
  ModelConfig c = synthetic_model_config(shape);
  if (context + 16 > c.max_position_embeddings) {
    c.max_position_embeddings = context + 16;  // as synthetic_bench: a step's cost does not depend on the positions
    r["positions_raised_to"] = c.max_position_embeddings;
  }
  r["model"] = shape;
  r["context"] = context;
  r["ring_slots"] = ring_slots;
  r["kv_dtype"] = std::string(dtype_name(opt.kv_dtype));
  r["device"] = device_name();
  const double h2d = pinned_h2d_bandwidth();
  r["pinned_h2d_GBps"] = h2d / 1e9;
  opt.copy_logits = false;
  const int64_t token_bytes = int64_t{2} * c.num_layers * c.kv_dim() * static_cast<int64_t>(dtype_size(opt.kv_dtype));
  r["kv_bytes_per_token"] = token_bytes;
  const int32_t pool_blocks = (context + 64) / kBlock + 4;
  const size_t base_used = device_used();

  // All on the GPU, when the pool fits (graphs on: the production decode step).
  {
    size_t free = 0, total = 0;
    cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    const double need = static_cast<double>(pool_blocks) * kBlock * static_cast<double>(token_bytes) + 24e9;
    if (need < static_cast<double>(free)) {
      auto m = CudaTransformer::random(c, seed, pool_blocks, kBlock, opt);
      KvStore kv(m->kv_config());
      const SeqId seq = book(kv, context);
      const double graphed = step_ms(*m, kv, seq, iters);
      m->set_graphs(false);
      const double eager = step_ms(*m, kv, seq, iters);
      r["gpu"] = {{"decode_ms", graphed},
                  {"decode_eager_ms", eager},
                  {"device_bytes", m->device_bytes()},
                  {"device_used_bytes", device_used() - base_used}};
    } else {
      r["gpu"] = {{"skipped", "the pool does not fit the GPU"}};
    }
  }

  // Offloaded: the pool keeps the newest pool_tokens (the GPU tier), the rest goes to the
  // pinned host tier and streams. pool_tokens 0: a 2,048-token tail, or more where the
  // host cannot hold the rest (MemAvailable less 24 GiB for the process and the system:
  // a 1M-token context of the Qwen3-4B shape in BF16 is 144 GiB, past 128 GiB of RAM).
  if (pool_tokens <= 0) {
    const int64_t host_cap = std::max<int64_t>(0, host_available_bytes() - (int64_t{24} << 30)) / token_bytes;
    pool_tokens = static_cast<int32_t>(std::max<int64_t>(kTailTokens, int64_t{context} - host_cap));
    r["pool_tokens_auto"] = true;
    r["host_available_bytes"] = host_available_bytes();
  }
  pool_tokens = std::min(pool_tokens, context);
  const int64_t host_target_blocks = (int64_t{context} - pool_tokens) / kBlock;
  auto m = CudaTransformer::random(c, seed, (pool_tokens + 1024 + 64) / kBlock + 4, kBlock, opt);
  KvStoreConfig kc = m->kv_config();
  KvStore kv(kc);
  const HostTierLayout layout{kc.num_layers, kc.num_kv_heads, kc.head_dim, kc.block_size, opt.kv_dtype};
  const int64_t host_bytes = (host_target_blocks + 2) * HostKvTier::block_bytes(layout);
  const auto t_alloc = Clock::now();
  kv.attach_host_tier(std::make_unique<HostKvTier>(layout, host_bytes, &cuda::pinned_host_allocator()),
                      host_tier_copier(*m));
  r["host_pin_ms"] = ms_since(t_alloc);
  const SeqId seq = book(kv, context, host_target_blocks);
  const int64_t host_tokens = int64_t{kv.host_blocks(seq)} * kBlock;
  const double host_step_bytes = static_cast<double>(host_tokens) * static_cast<double>(token_bytes);
  const double floor_ms = host_step_bytes / h2d * 1e3;
  m->enable_layer_ring(ring_slots, true);
  const auto t_first = Clock::now();
  {
    // The queued moves to the host tier run in front of this forward; not timed below.
    const int32_t token = 1;
    kv.reserve(seq, kv.length(seq) + 1);
    const ForwardWindow w{seq, {&token, 1}, LogitsMode::last};
    CudaLogits lg;
    m->forward({&w, 1}, kv, lg);
  }
  r["first_forward_ms_incl_moves"] = ms_since(t_first);
  const double copy_only_ms = tier_copy_ms(kv, seq);
  const double ring_ms = step_ms(*m, kv, seq, iters);
  const RingStats rs = m->ring_stats();
  const size_t offload_device = m->device_bytes();
  const size_t offload_used = device_used() - base_used;
  m->enable_layer_ring(ring_slots, false);
  const double sync_ms = step_ms(*m, kv, seq, iters);
  // Overlap: the share of the shorter of compute and copy that the ring hid. compute: the
  // synchronous step less its copies (timed from the tier alone: the 1 GiB buffer's rate
  // varies more from run to run than the tier's).
  const double compute_ms = std::max(0.0, sync_ms - copy_only_ms);
  const double hidden = sync_ms - ring_ms;
  r["offload"] = {{"host_tokens", host_tokens},
                  {"pool_tokens", pool_tokens},
                  {"gpu_tokens", context - host_tokens},
                  {"host_kv_bytes_per_step", host_step_bytes},
                  {"pcie_floor_ms", floor_ms},
                  {"ring_ms", ring_ms},
                  {"sync_ms", sync_ms},
                  {"ring_vs_floor", ring_ms / floor_ms},
                  {"tier_copy_only_ms", copy_only_ms},
                  {"tier_h2d_GBps", host_step_bytes / (copy_only_ms / 1e3) / 1e9},
                  {"ring_vs_tier_copy", ring_ms / copy_only_ms},
                  {"sync_vs_floor", sync_ms / floor_ms},
                  {"compute_estimate_ms", compute_ms},
                  {"overlap_efficiency",
                   std::min(compute_ms, copy_only_ms) > 0 ? hidden / std::min(compute_ms, copy_only_ms) : 0.0},
                  {"ring_loads", rs.loads},
                  {"ring_bytes_loaded", rs.bytes_loaded},
                  {"device_bytes", offload_device},
                  {"ring_device_bytes", m->ring_device_bytes()},
                  {"device_used_bytes", offload_used},
                  {"host_tier_bytes", kv.host_tier()->bytes()}};
  r["note"] = "host wall time per one-token decode step incl. its sync, median of iters; K/V booked, not prefilled; "
              "offload keeps the newest pool_tokens (at least the newest block) on the GPU; pcie_floor = host K/V bytes / pinned H2D rate (1 GiB "
              "buffer); tier_copy_only = the same bytes copied from the host tier alone; "
              "overlap_efficiency = (sync - ring) / min(compute, copy alone), compute = sync - copy alone";
  kv.release(seq);
  return r;
}

}  // namespace specpipe::gpu_tool
