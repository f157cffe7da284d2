#include "kernels/cuda/kv_cache.h"

#include <cuda_runtime.h>

namespace specpipe::cuda {
namespace {

__device__ inline void copy_row(const float* k, const float* v, float* pk, float* pv, int64_t floats) {
  for (int64_t d = threadIdx.x; d < floats; d += blockDim.x) {
    pk[d] = k[d];
    pv[d] = v[d];
  }
}

__global__ void kv_scatter_kernel(const float* k, const float* v, int64_t ld, int64_t row_floats,
                                  const int64_t* slots, float* pool_k, float* pool_v, int64_t slot_stride) {
  const int64_t r = blockIdx.x;
  const int64_t s = slots[r] * slot_stride;
  copy_row(k + r * ld, v + r * ld, pool_k + s, pool_v + s, row_floats);
}

__global__ void kv_commit_kernel(const float* k, const float* v, int64_t ld, int64_t row_floats, const int64_t* slots,
                                 const int32_t* first_row, const int32_t* n, const int32_t* accepted, float* pool_k,
                                 float* pool_v, int64_t slot_stride) {
  const int32_t w = blockIdx.y, i = blockIdx.x;
  if (i >= n[w] || i >= accepted[w]) return;
  const int64_t r = int64_t{first_row[w]} + i;
  const int64_t s = slots[r] * slot_stride;
  copy_row(k + r * ld, v + r * ld, pool_k + s, pool_v + s, row_floats);
}

}  // namespace

cudaError_t kv_scatter(const float* k, const float* v, int64_t ld, int64_t row_floats, const int64_t* slots,
                       int32_t rows, float* pool_k, float* pool_v, int64_t slot_stride, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  kv_scatter_kernel<<<rows, 128, 0, stream>>>(k, v, ld, row_floats, slots, pool_k, pool_v, slot_stride);
  return cudaGetLastError();
}

cudaError_t kv_commit_window(const float* staged_k, const float* staged_v, int64_t ld, int64_t row_floats,
                             const int64_t* slots, const int32_t* first_row, const int32_t* n,
                             const int32_t* accepted, int32_t windows, int32_t max_rows, float* pool_k,
                             float* pool_v, int64_t slot_stride, cudaStream_t stream) {
  if (windows <= 0 || max_rows <= 0) return cudaSuccess;
  kv_commit_kernel<<<dim3(max_rows, windows), 128, 0, stream>>>(staged_k, staged_v, ld, row_floats, slots, first_row, n,
                                                                accepted, pool_k, pool_v, slot_stride);
  return cudaGetLastError();
}

}  // namespace specpipe::cuda
