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

}  // namespace

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
