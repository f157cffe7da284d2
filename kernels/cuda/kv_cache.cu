#include "kernels/cuda/kv_cache.h"

#include <cuda_runtime.h>

#include "kernels/cuda/bf16.cuh"

namespace specpipe::cuda {
namespace {

__device__ inline void store(float* to, float x) { *to = x; }
__device__ inline void store(uint16_t* to, float x) { *to = detail::f32_to_bf16_rne(x); }

template <class T>
__device__ inline void copy_row(const float* k, const float* v, T* pk, T* pv, int64_t floats) {
  for (int64_t d = threadIdx.x; d < floats; d += blockDim.x) {
    store(pk + d, k[d]);
    store(pv + d, v[d]);
  }
}

template <class T>
__global__ void kv_scatter_kernel(const float* k, const float* v, int64_t ld, int64_t row_floats,
                                  const int64_t* slots, T* pool_k, T* pool_v, int64_t slot_stride) {
  const int64_t r = blockIdx.x;
  const int64_t s = slots[r] * slot_stride;
  copy_row(k + r * ld, v + r * ld, pool_k + s, pool_v + s, row_floats);
}

template <class T>
__global__ void kv_commit_kernel(const float* k, const float* v, int64_t ld, int64_t row_floats, const int64_t* slots,
                                 const int32_t* first_row, const int32_t* n, const int32_t* accepted, T* pool_k,
                                 T* pool_v, int64_t slot_stride) {
  const int32_t w = blockIdx.y, i = blockIdx.x;
  if (i >= n[w] || i >= accepted[w]) return;
  const int64_t r = int64_t{first_row[w]} + i;
  const int64_t s = slots[r] * slot_stride;
  copy_row(k + r * ld, v + r * ld, pool_k + s, pool_v + s, row_floats);
}

}  // namespace

cudaError_t kv_scatter(const float* k, const float* v, int64_t ld, int64_t row_floats, const int64_t* slots,
                       int32_t rows, void* pool_k, void* pool_v, int64_t slot_stride, DType pool_dtype,
                       cudaStream_t stream) {
  if (pool_dtype != DType::f32 && pool_dtype != DType::bf16) return cudaErrorInvalidValue;
  if (rows <= 0) return cudaSuccess;
  if (pool_dtype == DType::bf16)
    kv_scatter_kernel<<<rows, 128, 0, stream>>>(k, v, ld, row_floats, slots, static_cast<uint16_t*>(pool_k),
                                                static_cast<uint16_t*>(pool_v), slot_stride);
  else
    kv_scatter_kernel<<<rows, 128, 0, stream>>>(k, v, ld, row_floats, slots, static_cast<float*>(pool_k),
                                                static_cast<float*>(pool_v), slot_stride);
  return cudaGetLastError();
}

cudaError_t kv_commit_window(const float* staged_k, const float* staged_v, int64_t ld, int64_t row_floats,
                             const int64_t* slots, const int32_t* first_row, const int32_t* n,
                             const int32_t* accepted, int32_t windows, int32_t max_rows, void* pool_k,
                             void* pool_v, int64_t slot_stride, DType pool_dtype, cudaStream_t stream) {
  if (pool_dtype != DType::f32 && pool_dtype != DType::bf16) return cudaErrorInvalidValue;
  if (windows <= 0 || max_rows <= 0) return cudaSuccess;
  const dim3 grid(max_rows, windows);
  if (pool_dtype == DType::bf16)
    kv_commit_kernel<<<grid, 128, 0, stream>>>(staged_k, staged_v, ld, row_floats, slots, first_row, n, accepted,
                                               static_cast<uint16_t*>(pool_k), static_cast<uint16_t*>(pool_v),
                                               slot_stride);
  else
    kv_commit_kernel<<<grid, 128, 0, stream>>>(staged_k, staged_v, ld, row_floats, slots, first_row, n, accepted,
                                               static_cast<float*>(pool_k), static_cast<float*>(pool_v), slot_stride);
  return cudaGetLastError();
}

}  // namespace specpipe::cuda
