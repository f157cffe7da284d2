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

__global__ void __launch_bounds__(kThreads + 32) attention_head_merge_kernel(AttentionShape s, AttentionBatch b,
                                                                            uint16_t* outb) {
  detail::begin_dependent_kernel();
  __shared__ float red[kThreads / 32 + 1];
  __shared__ float total;
  float* weight = staged_values;           // [chunks]: m_c, then e^(m_c - M)
  float* sums = staged_values + b.max_chunks;  // [chunks]: s_c
  const int32_t h = blockIdx.x, row = blockIdx.y, hd = s.head_dim;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
  const int32_t chunks = attention_chunks(row_info(b, row).keys);
  const float* rec = row_records(s, b, row, h);
  const int64_t stride = hd + 2;
  float m = -INFINITY;
  for (int32_t c = tid; c < chunks; c += blockDim.x) {
    weight[c] = __ldcg(rec + c * stride);
    sums[c] = __ldcg(rec + c * stride + 1);
    m = fmaxf(m, weight[c]);
  }
  m = detail::warp_max(m);
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = red[0];
  for (int w = 1; w < warps; ++w) m = fmaxf(m, red[w]);
  for (int32_t c = tid; c < chunks; c += blockDim.x) weight[c] = expf(weight[c] - m);
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

}  // namespace

cudaError_t launch_head_merge(const AttentionShape& s, const AttentionBatch& b, uint16_t* outb, cudaStream_t stream) {
  const size_t bytes = 2 * size_t(b.max_chunks) * sizeof(float);
  if (s.head_dim > kThreads || bytes > 200 * 1024) return launch_merge(s, b, outb, stream);
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
