// The second launches that merge a row's chunk records (attention_paths.h): the combine
// kernel (a block per (row, query head), from the records) and the merge kernel (a block
// per (row, kv head), merge_row as the chunk kernel's last block). The same bits.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_paths.h"
#include "kernels/cuda/pdl.cuh"

namespace specpipe::cuda::attention_detail {
namespace {

/// Merges a row's chunks (merge_from_records): the second launch of the reference path
/// and of batches without counters. outb != null: BF16 bits there instead of FP32 to b.out.
__global__ void __launch_bounds__(kThreads) attention_combine_kernel(AttentionShape s, AttentionBatch b,
                                                                     uint16_t* outb) {
  detail::begin_dependent_kernel();
  const int32_t row = blockIdx.y, h = blockIdx.x, hd = s.head_dim;
  const int32_t chunks = attention_chunks(row_info(b, row).keys);
  const float* rec = row_records(s, b, row, h);
  for (int d = threadIdx.x; d < hd; d += kThreads)
    store_output(b, outb, int64_t{row} * b.ld_out + int64_t{h} * hd + d, merge_from_records(rec, chunks, hd + 2, d));
}

/// Merges the records of (row, kv head) = (blockIdx.y, blockIdx.x) written by the window
/// kernel: merge_row, as the chunk kernel's last block (scratch_floats of dynamic shared
/// memory for the chunk weights, 0: from the records).
__global__ void __launch_bounds__(kFastThreads) attention_merge_kernel(AttentionShape s, AttentionBatch b,
                                                                   uint16_t* outb, int32_t scratch_floats) {
  detail::begin_dependent_kernel();
  const int32_t kvh = blockIdx.x, row = blockIdx.y;
  merge_row(s, b, outb, row, kvh, attention_chunks(row_info(b, row).keys), staged_values, scratch_floats);
}

/// The split path's merge: a block per (row, query head), hd + 32 threads (hd <= 128), the
/// chunks' max and sum in shared memory (2 x max_chunks floats). The formula and its orders
/// are merge_row's (merge_weights, merged_value): M is the chunks' largest max (a max,
/// whatever the order), S and every out[d] one FMA chain over the chunks in ascending
/// order, so the bits are those of every other path. Faster at long context than
/// merge_row's block per (row, kv head): every head's chains on its own SM, 64 record
/// loads in flight a chain, and S (lane 0 of the last warp) beside the value chains.
constexpr int kHeadMergeLoads = 64;

/// The head merges' chunk weights of (row, query head): every chunk's max and sum from its
/// records `rec` into weight / sums (shared memory), M the largest max (through red, a float a
/// warp), then weight[c] = e^(m_c - M). Each thread's own weights are in place; the others'
/// after a barrier. kBlock: the block's threads when fixed at compile time (0: blockDim.x).
template <int kBlock = 0>
__device__ inline void head_chunk_weights(const float* rec, int64_t stride, int32_t chunks, float* weight, float* sums,
                                          float* red) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float m = -INFINITY;
  for (int32_t c = tid; c < chunks; c += kBlock != 0 ? kBlock : blockDim.x) {
    weight[c] = __ldcg(rec + c * stride);
    sums[c] = __ldcg(rec + c * stride + 1);
    m = fmaxf(m, weight[c]);
  }
  m = detail::warp_max(m);
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = red[0];
  if constexpr (kBlock != 0) {
#pragma unroll
    for (int w = 1; w < kBlock / 32; ++w) m = fmaxf(m, red[w]);
  } else {
    const int warps = blockDim.x / 32;
    for (int w = 1; w < warps; ++w) m = fmaxf(m, red[w]);
  }
  for (int32_t c = tid; c < chunks; c += kBlock != 0 ? kBlock : blockDim.x) weight[c] = expf(weight[c] - m);
}

__global__ void __launch_bounds__(kThreads + 32) attention_head_merge_kernel(AttentionShape s, AttentionBatch b,
                                                                            uint16_t* outb) {
  detail::begin_dependent_kernel();
  __shared__ float red[kThreads / 32 + 1];
  __shared__ float total;
  float* weight = staged_values;           // [chunks]: m_c, then e^(m_c - M)
  float* sums = staged_values + b.max_chunks;  // [chunks]: s_c
  const int32_t h = blockIdx.x, row = blockIdx.y, hd = s.head_dim;
  const int tid = threadIdx.x;
  const int32_t chunks = attention_chunks(row_info(b, row).keys);
  const float* rec = row_records(s, b, row, h);
  const int64_t stride = hd + 2;
  head_chunk_weights(rec, stride, chunks, weight, sums, red);
  __syncthreads();
  if (tid == blockDim.x - 32) {
    float sum = 0.0f;
#pragma unroll 16
    for (int32_t c = 0; c < chunks; ++c) sum = fmaf(weight[c], sums[c], sum);
    total = sum;
  }
  float acc = 0.0f;
  if (tid < hd) {
    const float* value = rec + 2 + tid;
    int32_t c = 0;
    for (; c + kHeadMergeLoads <= chunks; c += kHeadMergeLoads) {
      float x[kHeadMergeLoads];
#pragma unroll
      for (int i = 0; i < kHeadMergeLoads; ++i) x[i] = __ldcg(value + (c + i) * stride);
#pragma unroll
      for (int i = 0; i < kHeadMergeLoads; ++i) acc = fmaf(weight[c + i], x[i], acc);
    }
    for (; c < chunks; ++c) acc = fmaf(weight[c], __ldcg(value + c * stride), acc);
  }
  __syncthreads();
  if (tid < hd) store_output(b, outb, int64_t{row} * b.ld_out + int64_t{h} * hd + tid, acc / total);
}

/// Variant bit 256's head merge: the same chains as attention_head_merge_kernel, spread over
/// a block per (row, query head, 32 dims) of kSliceThreads threads. That kernel's 32 blocks
/// (decode, 32 heads) kept 1 MB of record loads in flight and read at ~0.24 TB/s (ncu at
/// 128K: 68 us a layer, 12.5x the bytes' floor); here every thread copies its share of a
/// batch of kSliceBatch chunks' 32 values (4-byte cp.async into a two-batch ring) while warp
/// 0 runs the slice's 32 value chains over the batch before, and lane 0 of warp 1 S's chain:
/// each chain fmaf over the chunks in ascending order, M a max, so the bits are the same.
///
/// Taken for one-row batches (decode steps) of at least kSlicedMinChunks chunks a row at
/// launch (b.max_chunks): in the 8B step it was faster at 32K and 128K and slower at 8K, and
/// alone slower for 5-row windows (kernels/cuda/README.md "Eighteenth session, chunk").
constexpr int kSliceDims = 32;
constexpr int kSliceThreads = 256;
constexpr int kSliceBatch = 256;
constexpr int32_t kSlicedMinChunks = 256;

__device__ inline void copy_async4(void* to_shared, const void* from_global) {
  const auto to = static_cast<unsigned>(__cvta_generic_to_shared(to_shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(to), "l"(from_global) : "memory");
}

__global__ void __launch_bounds__(kSliceThreads) attention_head_merge_sliced_kernel(AttentionShape s, AttentionBatch b,
                                                                                   uint16_t* outb) {
  detail::begin_dependent_kernel();
  __shared__ float red[kSliceThreads / 32];
  __shared__ float total;
  float* weight = staged_values;                 // [max_chunks]: m_c, then e^(m_c - M)
  float* sums = staged_values + b.max_chunks;    // [max_chunks]: s_c
  float* ring = sums + b.max_chunks;             // [2][kSliceBatch][kSliceDims]: the values
  const int32_t hd = s.head_dim, slices = hd / kSliceDims;
  const int32_t h = blockIdx.x / slices, d0 = blockIdx.x % slices * kSliceDims, row = blockIdx.y;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int32_t chunks = attention_chunks(row_info(b, row).keys);
  const float* rec = row_records(s, b, row, h);
  const int64_t stride = hd + 2;
  const int32_t batches = (chunks + kSliceBatch - 1) / kSliceBatch;
  const auto issue = [&](int32_t k) {  // batch k's values into ring half k % 2, one commit group
    if (k < batches) {
      const int32_t c0 = k * kSliceBatch, n = min(kSliceBatch, chunks - c0);
      float* to = ring + (k % 2) * kSliceBatch * kSliceDims;
      for (int i = tid; i < n * kSliceDims; i += kSliceThreads)
        copy_async4(to + i, rec + (c0 + i / kSliceDims) * stride + 2 + d0 + i % kSliceDims);
    }
    copy_async_commit();
  };
  issue(0);
  head_chunk_weights<kSliceThreads>(rec, stride, chunks, weight, sums, red);
  float acc = 0.0f, sum = 0.0f;
  for (int32_t k = 0; k < batches; ++k) {
    issue(k + 1);  // into the half batch k - 1 left (consumed before the last barrier)
    copy_async_wait_prior<1>();
    __syncthreads();  // batch k everyone's, and (k == 0) the weights
    const int32_t c0 = k * kSliceBatch, end = min(chunks, c0 + kSliceBatch);
    const float* values = ring + (k % 2) * kSliceBatch * kSliceDims + lane;
    if (warp == 0) {
#pragma unroll 16
      for (int32_t c = c0; c < end; ++c) acc = fmaf(weight[c], values[(c - c0) * kSliceDims], acc);
    } else if (tid == 32) {
#pragma unroll 16
      for (int32_t c = c0; c < end; ++c) sum = fmaf(weight[c], sums[c], sum);
    }
    __syncthreads();  // batch k read before its half is refilled
  }
  copy_async_wait_all();  // the empty group past the last batch
  if (tid == 32) total = sum;
  __syncthreads();
  if (warp == 0) store_output(b, outb, int64_t{row} * b.ld_out + int64_t{h} * hd + d0 + lane, acc / total);
}

}  // namespace

cudaError_t launch_head_merge(const AttentionShape& s, const AttentionBatch& b, uint16_t* outb, cudaStream_t stream) {
  const size_t bytes = 2 * size_t(b.max_chunks) * sizeof(float);
  if (s.head_dim > kThreads || bytes > 200 * 1024) return launch_merge(s, b, outb, stream);
  // Variant bit 256: the merge over 32-dim slices (head_dim a multiple of 32) for long decode rows.
  const size_t sliced_bytes = bytes + 2 * size_t{kSliceBatch} * kSliceDims * sizeof(float);
  if ((attention_variant() & kAttentionStreamTight) != 0 && s.head_dim % kSliceDims == 0 && b.total_tokens == 1 &&
      b.max_chunks >= kSlicedMinChunks && sliced_bytes <= 200 * 1024) {
    if (const cudaError_t e = allow_dynamic_shared(attention_head_merge_sliced_kernel, sliced_bytes); e != cudaSuccess)
      return e;
    return detail::launch_dependent_shared(attention_head_merge_sliced_kernel,
                                           dim3(s.num_heads * (s.head_dim / kSliceDims), b.total_tokens),
                                           dim3(kSliceThreads), sliced_bytes, stream, true, s, b, outb);
  }
  if (const cudaError_t e = allow_dynamic_shared(attention_head_merge_kernel, bytes); e != cudaSuccess) return e;
  const int threads = (s.head_dim + 31) / 32 * 32 + 32;
  return detail::launch_dependent_shared(attention_head_merge_kernel, dim3(s.num_heads, b.total_tokens),
                                         dim3(threads), bytes, stream, true, s, b, outb);
}

cudaError_t launch_combine(const AttentionShape& s, const AttentionBatch& b, uint16_t* outb, cudaStream_t stream) {
  return detail::launch_dependent(attention_combine_kernel, dim3(s.num_heads, b.total_tokens), dim3(kThreads), stream,
                                  true, s, b, outb);
}

cudaError_t launch_merge(const AttentionShape& s, const AttentionBatch& b, uint16_t* outb, cudaStream_t stream) {
  // The merge's chunk weights in shared memory when they fit the default 48 KB.
  const int32_t group = s.num_heads / s.num_kv_heads;
  const int64_t weights = 2 * int64_t{group} * (b.max_chunks + 1);
  const int32_t scratch = weights * sizeof(float) <= 48 * 1024 ? static_cast<int32_t>(weights) : 0;
  if (const cudaError_t e = allow_dynamic_shared(attention_merge_kernel, size_t(scratch) * sizeof(float));
      e != cudaSuccess)
    return e;
  return detail::launch_dependent_shared(attention_merge_kernel, dim3(s.num_kv_heads, b.total_tokens),
                                         dim3(kFastThreads), size_t(scratch) * sizeof(float), stream, true, s, b, outb,
                                         scratch);
}

}  // namespace specpipe::cuda::attention_detail
