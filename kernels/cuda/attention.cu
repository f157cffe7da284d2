// cuda::attention (attention.h): checks the shape, then picks the launch path of a batch
// (attention_paths.h). The kernels live beside it: attention_chunk.cu (a block per row and
// chunk: decode, prefill; the reference), attention_window.cu (verify windows sharing each
// K/V load), attention_split.cu (split-KV for 1..16 rows, opt-in), attention_prefill.cu
// (prefill chunks: each K/V chunk staged once for a tile of rows), attention_merge.cu (the
// second launches), attention_device.cuh (what they share).
#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_paths.h"

namespace specpipe::cuda {
namespace {

using namespace attention_detail;

template <class T>
cudaError_t attention_typed(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                            bool reference, cudaStream_t stream) {
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0 || s.num_heads / s.num_kv_heads > kMaxGroup ||
      s.head_dim <= 0 || s.head_dim > kMaxHeadDim || b.max_chunks <= 0 || b.max_chunks > 65535)
    return cudaErrorInvalidValue;
  if (b.total_tokens <= 0) return cudaSuccess;
  // SPECPIPE_ATTENTION_SPLIT=1: decode and verify windows (up to 16 rows) split-KV, each K/V
  // tile loaded once for all rows and heads of a task, merged by a second kernel.
  if (!reference && use_split_path<T>(s, pool, b)) return launch_split_path<T>(s, pool, b, outb, stream);
  // The default: verify windows on the window kernel (merged by a second kernel; the
  // counters stay zero), decode and prefill on the chunk kernel.
  if (!reference && use_window_path<T>(s, pool, b)) return launch_window_path<T>(s, pool, b, outb, stream);
  // Batches of long windows (prefill chunks): the prefill kernel, then the merge kernel.
  if (!reference && use_prefill_path<T>(s, pool, b)) return launch_prefill_path<T>(s, pool, b, outb, stream);
  if (!reference && b.counters != nullptr && (attention_variant() & kAttentionHeadMerge) != 0) {
    // Variant bit 1: the records merged by a second kernel, a block per (row, query head).
    AttentionBatch two = b;
    two.counters = nullptr;
    const cudaError_t e = launch_chunk_path<T>(s, pool, two, outb, false, stream);
    return e != cudaSuccess ? e : launch_head_merge(s, two, outb, stream);
  }
  const cudaError_t e = launch_chunk_path<T>(s, pool, b, outb, reference, stream);
  if (e != cudaSuccess || (!reference && b.counters != nullptr)) return e;  // merged by the chunk kernel
  return launch_combine(s, b, outb, stream);
}

/// The kernels of the pool's storage type (attention.h: f32 or bf16).
cudaError_t attention_impl(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                           bool reference, cudaStream_t stream) {
  switch (pool.dtype) {
    case DType::f32: return attention_typed<float>(s, pool, b, outb, reference, stream);
    case DType::bf16: return attention_typed<uint16_t>(s, pool, b, outb, reference, stream);
    default: return cudaErrorInvalidValue;
  }
}

/// -1 until read from SPECPIPE_ATTENTION_VARIANT (attention.h).
std::atomic<int> variant_state{-1};

}  // namespace

int attention_variant() {
  int v = variant_state.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("SPECPIPE_ATTENTION_VARIANT");
    v = e != nullptr && *e != '\0' ? std::atoi(e) & (kAttentionVariants - 1) : kDefaultAttentionVariant;
    variant_state.store(v, std::memory_order_relaxed);
  }
  return v;
}

void set_attention_variant(int variant) {
  variant_state.store(variant & (kAttentionVariants - 1), std::memory_order_relaxed);
}

cudaError_t attention(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, cudaStream_t stream) {
  return attention_impl(s, pool, b, nullptr, false, stream);
}

cudaError_t attention_reference(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                cudaStream_t stream) {
  return attention_impl(s, pool, b, nullptr, true, stream);
}

cudaError_t attention_bf16(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                           uint16_t* out_bf16, cudaStream_t stream) {
  return attention_impl(s, pool, b, out_bf16, false, stream);
}

}  // namespace specpipe::cuda
