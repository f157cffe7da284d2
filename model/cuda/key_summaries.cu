#include "model/cuda/key_summaries.h"

namespace specpipe::cuda {
namespace {

// One thread block per pool block, threads over the key's kv_dim floats: each reads its
// column of block_size rows (coalesced across threads).
__global__ void key_block_summaries_kernel(const float* pool_k, int64_t slot_stride, int32_t block_size,
                                           int32_t kv_dim, const int32_t* blocks, float* kmax, float* kmin) {
  const int64_t b = blockIdx.x;
  const float* base = pool_k + static_cast<int64_t>(blocks[b]) * block_size * slot_stride;
  for (int32_t i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    float mx = base[i], mn = base[i];
    for (int32_t r = 1; r < block_size; ++r) {
      const float x = base[r * slot_stride + i];
      mx = fmaxf(mx, x);
      mn = fminf(mn, x);
    }
    kmax[b * kv_dim + i] = mx;
    kmin[b * kv_dim + i] = mn;
  }
}

}  // namespace

cudaError_t key_block_summaries(const float* pool_k, int64_t slot_stride, int32_t block_size, int32_t kv_dim,
                                const int32_t* blocks, int32_t n, float* kmax, float* kmin, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (n < 0 || block_size < 1 || kv_dim < 1) return cudaErrorInvalidValue;
  key_block_summaries_kernel<<<n, 256, 0, stream>>>(pool_k, slot_stride, block_size, kv_dim, blocks, kmax, kmin);
  return cudaGetLastError();
}

}  // namespace specpipe::cuda
