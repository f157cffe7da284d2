#include <cuda_runtime.h>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/gemm.h"

namespace specpipe::cuda {
namespace {

using detail::widen8;

constexpr int kWarpsPerBlock = 4;
constexpr int kRowsPerPass = 8;  // rows sharing one read of a weight fragment

/// A warp per output column; rows in passes of kRowsPerPass (a row's chain is the same in
/// every pass, so m only decides how many passes run).
__global__ void __launch_bounds__(kWarpsPerBlock * 32) gemm_rows_kernel(const uint16_t* x, int64_t ldx,
                                                                        const uint16_t* w, int64_t n, int64_t k,
                                                                        float* y, int64_t ldy, int32_t m) {
  const int lane = threadIdx.x % 32;
  const int64_t col = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  if (col >= n) return;
  const uint16_t* wr = w + col * k;
  for (int32_t r0 = 0; r0 < m; r0 += kRowsPerPass) {
    float acc[kRowsPerPass] = {};
    for (int64_t k0 = int64_t{lane} * 8; k0 < k; k0 += 256) {
      float wf[8];
      widen8(*reinterpret_cast<const uint4*>(wr + k0), wf);
#pragma unroll
      for (int rr = 0; rr < kRowsPerPass; ++rr) {
        if (r0 + rr >= m) break;
        float xf[8];
        widen8(*reinterpret_cast<const uint4*>(x + int64_t{r0 + rr} * ldx + k0), xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[rr] = fmaf(xf[e], wf[e], acc[rr]);
      }
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerPass; ++rr) {
      const float total = detail::warp_sum(acc[rr]);
      if (lane == 0 && r0 + rr < m) y[int64_t{r0 + rr} * ldy + col] = total;
    }
  }
}

}  // namespace

cudaError_t gemm_rows_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, float* y,
                           int64_t ldy, int32_t m, cudaStream_t stream) {
  if (k % 8 != 0 || ldx % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  if (m <= 0 || n <= 0) return cudaSuccess;
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  gemm_rows_kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(x, ldx, w, n, k, y, ldy, m);
  return cudaGetLastError();
}

}  // namespace specpipe::cuda
