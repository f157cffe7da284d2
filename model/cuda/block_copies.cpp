// CudaTransformer's block copies (ARCHITECTURE.md section 5): copy-on-write inside the
// pool, blocks moving to and from the pinned host tier, SpecPV's one-layer view copies,
// and the offload write-back when it must run in line. Queued from the KV store's
// threads, applied on the model's stream in front of the next forward, ordered against
// the write-back the layer ring carries (kvstore/write_back.h). The forward itself is in
// cuda_transformer.cpp.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "kvstore/host_tier.h"
#include "model/cuda/cuda_transformer.h"
#include "model/cuda/device_memory.h"
#include "model/cuda/device_ring.h"
#include "model/cuda/transformer_state.h"

namespace specpipe {

void CudaTransformer::queue_block_copy(int32_t src, int32_t dst) {
  const std::lock_guard lock(impl_->copies_mutex);
  impl_->copies.push_back({cuda::TransformerState::CopyKind::pool_to_pool, src, dst});
}

void CudaTransformer::queue_host_copy(bool to_host, int32_t pool_block, int32_t host_block) {
  using Kind = cuda::TransformerState::CopyKind;
  const std::lock_guard lock(impl_->copies_mutex);
  if (to_host) impl_->copies.push_back({Kind::pool_to_host, pool_block, host_block});
  else impl_->copies.push_back({Kind::host_to_pool, host_block, pool_block});
}

void CudaTransformer::queue_host_layer_copy(int32_t layer, int32_t host_block, int32_t pool_block) {
  const std::lock_guard lock(impl_->copies_mutex);
  impl_->copies.push_back({cuda::TransformerState::CopyKind::host_layer_to_pool, host_block, pool_block, layer});
}

void CudaTransformer::enqueue_write_back(const WriteBackBatch& batch, const HostKvTier& host, int32_t layer,
                                         cudaStream_t stream) const {
  const cuda::TransformerState& d = *impl_;
  const auto block_bytes = static_cast<size_t>(host.block_tensor_bytes());
  const auto l = static_cast<size_t>(layer);
  for (const WriteBackBatch::Run& r : batch.runs())
    for (const bool v : {false, true}) {
      const auto* pool = reinterpret_cast<const unsigned char*>(v ? d.pool_v[l] : d.pool_k[l]);
      auto* tier = static_cast<unsigned char*>(const_cast<void*>(v ? host.v_data(layer) : host.k_data(layer)));
      cuda::cuda_try(cudaMemcpyAsync(tier + static_cast<size_t>(r.host_first) * block_bytes,
                               pool + static_cast<size_t>(r.pool_first) * block_bytes,
                               static_cast<size_t>(r.blocks) * block_bytes, cudaMemcpyDeviceToHost, stream),
               "write-back to the host tier");
    }
}

void CudaTransformer::flush_write_back(const HostKvTier* host) {
  cuda::TransformerState& d = *impl_;
  if (d.write_back.empty()) return;
  if (!host) fail(ErrorCode::internal, "CUDA forward: a write-back to the host tier without the host tier it names");
  for (int32_t l = 0; l < config_.num_layers; ++l) enqueue_write_back(d.write_back, *host, l, stream_);
  d.write_back.clear();
}

void CudaTransformer::apply_block_copies(const HostKvTier* host) {
  using Kind = cuda::TransformerState::CopyKind;
  cuda::TransformerState& d = *impl_;
  std::vector<cuda::TransformerState::PendingCopy> copies;
  {
    const std::lock_guard lock(d.copies_mutex);
    if (host) {
      copies.swap(d.copies);
    } else {
      // No tier to copy to or from (block summaries, read_pool): the copies in front of
      // the first host-tier one go now, that one and those behind it wait, in order, for
      // a call that has the tier. Throwing here lost them all once (issue 17: the round's
      // moves to the host never happened and its item went on with token -1).
      const auto first_host = std::find_if(d.copies.begin(), d.copies.end(),
                                           [](const auto& c) { return c.kind != Kind::pool_to_pool; });
      copies.assign(d.copies.begin(), first_host);
      d.copies.erase(d.copies.begin(), first_host);
    }
  }
  const size_t block_bytes = static_cast<size_t>(d.block_size) * static_cast<size_t>(config_.kv_dim()) *
                            dtype_size(d.kv_dtype);
  if (host && host->layout().dtype != d.kv_dtype)
    fail(ErrorCode::invalid_argument, "CUDA forward: the host tier holds {} K/V, the pool {}",
         dtype_name(host->layout().dtype), dtype_name(d.kv_dtype));
  for (size_t i = 0; i < copies.size();) {
    const auto [kind, src, dst, layer] = copies[i];
    const bool host_side = kind != Kind::pool_to_pool;
    const bool to_pool = kind == Kind::host_to_pool || kind == Kind::host_layer_to_pool;
    const int32_t pool_block = to_pool ? dst : src;
    const int32_t other = to_pool ? src : dst;
    if (pool_block < 0 || pool_block >= d.num_blocks || other < 0 || (!host_side && other >= d.num_blocks))
      fail(ErrorCode::internal, "CUDA forward: block copy {} -> {} outside the pool of {}", src, dst, d.num_blocks);
    if (host_side && (!host || other >= host->total_blocks()))
      fail(ErrorCode::internal, "CUDA forward: a host tier block copy ({} -> {}) without the host tier it names", src,
           dst);
    if (kind == Kind::host_layer_to_pool && (layer < 0 || layer >= config_.num_layers))
      fail(ErrorCode::internal, "CUDA forward: a view copy of layer {} of {}", layer, config_.num_layers);
    // Offload write-back: with a layer ring the move leaves this in-line queue and goes
    // with the next ring forward's per-layer jobs, on the copy stream (write_back.h).
    if (kind == Kind::pool_to_host && d.ring) {
      d.write_back.add(src, dst);
      ++i;
      continue;
    }
    // A copy that writes a pool block the pending write-back has still to read, or reads
    // a host block it has still to write, goes after it: the write-back in line first.
    const auto waits_for_write_back = [&](int32_t host_block, int32_t pool) {
      return d.write_back.writes_host(host_block) || d.write_back.reads_pool(pool);
    };
    if ((to_pool && waits_for_write_back(src, dst)) || (kind == Kind::pool_to_pool && d.write_back.reads_pool(dst)))
      flush_write_back(host);
    // Runs of consecutive blocks between the pool and the host tier go as one copy a
    // layer (an offloaded prefix is a run; a layer's view copies often are); pool-to-pool
    // copies one by one (a run there could read a block an earlier copy of it wrote).
    size_t n = 1;
    while (host_side && i + n < copies.size() && copies[i + n].kind == kind && copies[i + n].layer == layer &&
           copies[i + n].src == src + static_cast<int32_t>(n) && copies[i + n].dst == dst + static_cast<int32_t>(n) &&
           dst + static_cast<int32_t>(n) < (kind == Kind::pool_to_host ? host->total_blocks() : d.num_blocks) &&
           src + static_cast<int32_t>(n) < (kind == Kind::pool_to_host ? d.num_blocks : host->total_blocks()) &&
           !(to_pool && waits_for_write_back(src + static_cast<int32_t>(n), dst + static_cast<int32_t>(n))))
      ++n;
    const size_t bytes = n * block_bytes;
    const int32_t first_layer = kind == Kind::host_layer_to_pool ? layer : 0;
    const int32_t end_layer = kind == Kind::host_layer_to_pool ? layer + 1 : config_.num_layers;
    for (int32_t l = first_layer; l < end_layer; ++l)
      for (const bool v : {false, true}) {
        const auto li = static_cast<size_t>(l);
        auto* pool = reinterpret_cast<unsigned char*>(v ? d.pool_v[li] : d.pool_k[li]);
        auto* tier = !host_side ? pool
                                : static_cast<unsigned char*>(const_cast<void*>(v ? host->v_data(l) : host->k_data(l)));
        unsigned char* from = (to_pool ? tier : pool) + static_cast<size_t>(src) * block_bytes;
        unsigned char* to = (kind == Kind::pool_to_host ? tier : pool) + static_cast<size_t>(dst) * block_bytes;
        cuda::cuda_try(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream_), "pool block copy");
      }
    i += n;
  }
}

void CudaTransformer::land_host_copies(const HostKvTier* host) {
  cuda::TransformerState& d = *impl_;
  const std::lock_guard stream_lock(d.stream_mutex);
  settle_launched_chain();
  cuda::cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  apply_block_copies(host);
  flush_write_back(host);  // moves to the host that a ring would carry go now, in line
  cuda::cuda_try(cudaStreamSynchronize(stream_), "landing host tier copies");
}

}  // namespace specpipe
