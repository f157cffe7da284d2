#include "model/cuda/model_ops.h"

namespace specpipe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_bias_kernel(float* y, int64_t ldy, const float* bias, int64_t cols) {
  float* row = y + static_cast<int64_t>(blockIdx.x) * ldy;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) row[c] = row[c] + bias[c];
}

__global__ void residual_add_kernel(float* x, const float* t, const float* bias, int64_t cols, int64_t ld) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * ld;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float add = bias ? t[base + c] + bias[c] : t[base + c];
    x[base + c] = x[base + c] + add;
  }
}

__global__ void gather_rows_kernel(const float* src, const int32_t* index, int64_t cols, int64_t ld, float* dst) {
  const float* s = src + static_cast<int64_t>(index[blockIdx.x]) * ld;
  float* d = dst + static_cast<int64_t>(blockIdx.x) * ld;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

}  // namespace

cudaError_t add_bias(float* y, int64_t ldy, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  add_bias_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(y, ldy, bias, cols);
  return cudaGetLastError();
}

cudaError_t residual_add(float* x, const float* t, const float* bias, int64_t rows, int64_t cols, int64_t ld,
                         cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  residual_add_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, t, bias, cols, ld);
  return cudaGetLastError();
}

cudaError_t gather_rows(const float* src, const int32_t* index, int64_t rows, int64_t cols, int64_t ld, float* dst,
                        cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  gather_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(src, index, cols, ld, dst);
  return cudaGetLastError();
}

}  // namespace specpipe::cuda
