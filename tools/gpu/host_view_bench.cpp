// SpecPV over the host tier: partial vs streamed full verify windows (host_view_bench.h).
#include "tools/gpu/host_view_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "kvstore/kv_store.h"
#include "kvstore/partial_view.h"
#include "model/cuda/pinned_host_allocator.h"
#include "tools/gpu/synthetic_models.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {
namespace {

using json = nlohmann::json;
constexpr int32_t kB = 16;
constexpr int32_t kGpuTail = 2048;  // the newest tokens, in the pool (the GPU tier)

/// Commits `tokens` tokens to `seq` 1,024 at a time (booked: a window's cost does not
/// depend on the values), moving every full block but the newest `keep_blocks` to the
/// host tier after each chunk when `offload`.
void book_tokens(KvStore& kv, SeqId seq, int32_t tokens, bool offload, int32_t keep_blocks) {
  const std::vector<int32_t> ones(1024, 1);
  for (int32_t done = 0; done < tokens;) {
    const int32_t n = std::min(1024, tokens - done);
    kv.reserve(seq, kv.length(seq) + n);
    kv.commit(seq, std::span<const int32_t>(ones).first(static_cast<size_t>(n)));
    done += n;
    const int32_t movable = kv.offloadable_blocks(seq) - keep_blocks;
    if (offload && movable > 0) kv.offload_prefix(seq, movable);
  }
}

}  // namespace

json host_view_bench(const std::string& shape, int32_t context, int32_t budget, int32_t ring_slots, uint64_t seed,
                     int iters, CudaTransformerOptions opt, bool& ok) {
  json r;
  ModelConfig c = synthetic_model_config(shape);
  c.max_position_embeddings = std::max(c.max_position_embeddings, context + 16);
  const int32_t nb = std::max(3, budget / kB);
  const int32_t sink = std::max(1, nb / 16), recent = std::max(1, nb * 7 / 16), retrieved = nb - sink - recent;
  const int32_t copies = sink + retrieved;  // view blocks on the host tier: copied into the pool
  r["model"] = shape;
  r["context"] = context;
  r["budget"] = budget;
  r["kv_dtype"] = std::string(dtype_name(opt.kv_dtype));
  opt.copy_logits = false;
  const int32_t pool_blocks = (kGpuTail + 1024) / kB + copies + 8;
  auto m = CudaTransformer::random(c, seed, pool_blocks, kB, opt);
  const KvStoreConfig kc = m->kv_config();
  KvStore kv(kc);
  const HostTierLayout layout{kc.num_layers, kc.num_kv_heads, kc.head_dim, kc.block_size, opt.kv_dtype};
  const int64_t host_blocks = (context - kGpuTail) / kB + 2;
  const auto t_pin = Clock::now();
  kv.attach_host_tier(std::make_unique<HostKvTier>(layout, host_blocks * HostKvTier::block_bytes(layout),
                                                   &cuda::pinned_host_allocator()),
                      host_tier_copier(*m));
  r["host_pin_ms"] = ms_since(t_pin);
  // The view copies' pool blocks: a second sequence kept in the pool stands in for
  // them (what a window costs does not depend on which pool blocks it reads).
  const std::vector<int32_t> none;
  const SeqId copy_seq = kv.add_sequence(none);
  book_tokens(kv, copy_seq, copies * kB, false, 0);
  const SeqId seq = kv.add_sequence(none);
  book_tokens(kv, seq, context, true, kGpuTail / kB);
  kv.reserve(seq, context + 5);
  m->enable_layer_ring(ring_slots, true);
  m->set_graphs(true);  // the partial windows (a forward that streams runs eagerly)
  const std::vector<int32_t> toks(5, 1);
  const ForwardWindow full{seq, toks, LogitsMode::all};
  {
    CudaLogits lg;  // the queued moves to the host tier land in front of this one
    const auto t0 = Clock::now();
    m->forward({&full, 1}, kv, lg);
    r["first_forward_ms_incl_moves"] = ms_since(t0);
  }
  const int32_t on_host = kv.host_blocks(seq);
  r["host_tokens"] = int64_t{on_host} * kB;
  r["host_kv_bytes"] = static_cast<double>(on_host) * static_cast<double>(kv.host_tier()->block_bytes());
  const int64_t loaded0 = m->ring_stats().bytes_loaded;
  r["full_us"] = median_forward_us(*m, full, kv, iters);
  r["full_streamed_bytes_per_forward"] =
      static_cast<double>(m->ring_stats().bytes_loaded - loaded0) / static_cast<double>(iters + 3);

  // The view: sink and retrieved blocks from the copies, the recent blocks from the tail.
  const auto table = kv.block_table(seq), copy_table = kv.block_table(copy_seq);
  const int32_t last = (context - 1) / kB;
  std::vector<int32_t> view_pool(copy_table.begin(), copy_table.begin() + copies);
  for (int32_t b = last - recent + 1; b <= last; ++b) view_pool.push_back(table[static_cast<size_t>(b)]);
  PrefixView v;
  for (int32_t l = 0; l < c.num_layers; ++l) v.pool_blocks.push_back(view_pool);
  v.lengths.assign(static_cast<size_t>(c.num_layers),
                   static_cast<int32_t>(view_pool.size() - 1) * kB + (context - last * kB));
  ForwardWindow partial = full;
  partial.view = &v;
  const int64_t loaded1 = m->ring_stats().bytes_loaded;
  r["partial_us"] = median_forward_us(*m, partial, kv, iters);
  const int64_t partial_streamed = m->ring_stats().bytes_loaded - loaded1;
  r["partial_streamed_bytes"] = partial_streamed;
  r["view_tokens"] = v.lengths.front();
  if (partial_streamed != 0) ok = false;
  r["partial_vs_full"] = r["partial_us"].get<double>() / r["full_us"].get<double>();

  // A refresh's copies: layer l's K and V of `copies` host blocks spread over the tier,
  // block by block (what set_view_copies queues), into device memory.
  const HostKvTier& tier = *kv.host_tier();
  const auto bytes = static_cast<size_t>(tier.block_tensor_bytes());
  void* dev = nullptr;
  cuda_check(cudaMalloc(&dev, bytes * static_cast<size_t>(copies) * 2), "cudaMalloc");
  const auto host_table = kv.host_block_table(seq);
  const double copy_ms = stream_ms([&] {
    for (int32_t l = 0; l < c.num_layers; ++l)
      for (int32_t j = 0; j < copies; ++j) {
        const int32_t hb = host_table[static_cast<size_t>(int64_t{j} * on_host / copies)];
        int w = 0;
        for (const void* src : {tier.k_data(l), tier.v_data(l)})
          cuda_check(cudaMemcpyAsync(static_cast<char*>(dev) + (2 * static_cast<size_t>(j) + w++) * bytes,
                                     static_cast<const char*>(src) + static_cast<size_t>(hb) * bytes, bytes,
                                     cudaMemcpyHostToDevice),
                     "view copy");
      }
  });
  cudaFree(dev);
  r["view_copy_ms"] = copy_ms;
  r["view_copy_bytes"] = static_cast<double>(bytes) * 2.0 * copies * c.num_layers;
  r["ring_slots"] = ring_slots;
  r["iters"] = iters;
  r["note"] = "5-token window, host wall time incl. its sync, median of iters after 3 warm-ups; K/V booked, not "
              "prefilled; all but the newest 2,048 tokens on the pinned host tier; full: streamed through the ring "
              "(eager); partial: the view's sink and retrieved blocks read from pool blocks standing in for the view "
              "copies, the recent ones from the GPU tier; view_copy_ms: one refresh's copies from the tier, block by "
              "block and layer by layer";
  kv.release(seq);
  kv.release(copy_seq);
  return r;
}

}  // namespace specpipe::gpu_tool
