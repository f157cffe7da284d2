#pragma once
/// Fixed-order reductions over one thread block (internal to kernels/cuda).
///
/// The order depends only on the block size, never on the data or the grid: a warp
/// butterfly (every lane ends with the same bits, since a + b == b + a exactly), then the
/// warps' partial results added in warp order by every thread.
#include <cuda_runtime.h>

namespace specpipe::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

/// Sum over a block of kThreads threads (a multiple of 32); every thread gets the result.
/// `scratch` holds kThreads / 32 floats of shared memory.
template <int kThreads>
__device__ inline float block_sum(float v, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024);
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float total = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) total += scratch[w];
  __syncthreads();  // scratch may be reused at once
  return total;
}

template <int kThreads>
__device__ inline float block_max(float v, float* scratch) {
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float m = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, scratch[w]);
  __syncthreads();
  return m;
}

inline cudaError_t launch_status() { return cudaGetLastError(); }

}  // namespace specpipe::cuda::detail
