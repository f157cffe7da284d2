// gemm_mma_bf16: the weight-streaming tensor-core GEMM for decode-sized m (gemm.h).
//
// Decode reads every weight once per token, so the GEMM is a race to stream W at the
// memory's rate; the few activation rows ride along. W is the mma's A operand (16 output
// features a block), the rows of x are its B operand (8 rows an n-tile), so a
// weight fragment is loaded once for all rows. Batch invariance: a row of x is one B
// column, and an mma's output column depends on its own column only; the k order (the
// warp split, the steps, the fixed cross-warp sum) depends on k alone, never on m or on
// the other rows.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/pdl.cuh"

namespace specpipe::cuda {
namespace {

constexpr int kWarps = 4;          // warps of a block, each a quarter of the k steps
constexpr int kTile = 16;          // output features of a block (the mma's M)
constexpr int kStep = 32;          // k of one step: 4 lanes x 8 bf16 per feature row
constexpr int kUnroll = 4;         // steps whose weights are loaded together
constexpr int kMaxTiles = kMaxMmaRows / 8;

/// Weights are read once per forward: stream them past L1.
__device__ inline uint4 load_stream(const uint16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

/// D += A B for one m16n8k16 (A: 16 features x 16 k, B: 16 k x 8 rows; bf16, f32 sums).
__device__ inline void mma16816(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// One block: features [16 b, 16 b + 16) for rows [0, 8 * kTiles). Lane (g = lane / 4,
/// t = lane % 4) loads bf16 k = s*32 + 8t .. +7 of feature rows g and g + 8, and of x
/// rows 8j + g; the mma's k slots are a permutation of those 32 k, the same for A and B:
/// words 0-1 feed the first mma, words 2-3 the second.
/// kSiluGate: W's rows are gate and up interleaved by 8 (interleave_gate_up), so a lane
/// holds gate and up of MLP feature 8 b + g side by side, and the block writes
/// yb = bf16(silu(gate) * up) to [m, ldy] instead of y (n = W's rows = 2 features).
template <int kTiles, bool kSiluGate>
__global__ void __launch_bounds__(kWarps * 32) gemm_mma_kernel(const uint16_t* __restrict__ x, int64_t ldx,
                                                               const uint16_t* __restrict__ w, int64_t n, int64_t k,
                                                               float* __restrict__ y, uint16_t* __restrict__ yb,
                                                               int64_t ldy, int32_t m) {
  __shared__ float partial[kWarps - 1][kTiles][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t f0 = int64_t{blockIdx.x} * kTile;
  // Rows of W past n read the last row (kept in bounds; their sums are never stored).
  const uint16_t* w_lo = w + min(f0 + g, n - 1) * k + 8 * t;
  const uint16_t* w_hi = w + min(f0 + g + 8, n - 1) * k + 8 * t;
  const int64_t steps = k / kStep;
  // Warp `warp` takes steps warp, warp + kWarps, ...; kUnroll of them per iteration.
  const int64_t per_iter = int64_t{kWarps} * kUnroll;
  const int64_t iters = (steps + per_iter - 1) / per_iter;

  // Two register buffers of kUnroll steps' weights, filled and drained in turn, so one
  // iteration's loads are in flight while the other's are multiplied (a copy from one to
  // the other would wait for the loads to land). One buffer with more warps per SM, and
  // 8 warps per block, were slower on an H100 (kernels/cuda/README.md).
  uint4 buf_lo[2][kUnroll], buf_hi[2][kUnroll];
  auto load_weights = [&](int b, int64_t it) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t s = it * per_iter + u * kWarps + warp;
      if (s < steps) {
        buf_lo[b][u] = load_stream(w_lo + s * kStep);
        buf_hi[b][u] = load_stream(w_hi + s * kStep);
      }
    }
  };
  float acc[kTiles][4] = {};
  auto multiply = [&](int b, int64_t it) {
    // Every x fragment of the iteration first, so their loads overlap (one at a time,
    // each in front of its mma, this kernel was ~10% slower).
    uint4 xb[kUnroll][kTiles];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t s = it * per_iter + u * kWarps + warp;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const int row = 8 * j + g;
        xb[u][j] = make_uint4(0, 0, 0, 0);  // rows past m multiply zeros; their sums are dropped
        if (row < m && s < steps) xb[u][j] = __ldg(reinterpret_cast<const uint4*>(x + row * ldx + s * kStep + 8 * t));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t s = it * per_iter + u * kWarps + warp;
      if (s >= steps) break;
      const uint4& lo = buf_lo[b][u];
      const uint4& hi = buf_hi[b][u];
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        mma16816(acc[j], lo.x, hi.x, lo.y, hi.y, xb[u][j].x, xb[u][j].y);
        mma16816(acc[j], lo.z, hi.z, lo.w, hi.w, xb[u][j].z, xb[u][j].w);
      }
    }
  };
  // Weights do not depend on the kernel before: the first loads are issued before waiting
  // for it (under programmatic dependent launch, while it still runs).
  load_weights(0, 0);
  if (iters > 1) load_weights(1, 1);
  detail::wait_for_prerequisite_grid();
  for (int64_t it = 0; it < iters; it += 2) {
    multiply(0, it);
    if (it + 2 < iters) load_weights(0, it + 2);
    if (it + 1 >= iters) break;
    multiply(1, it + 1);
    if (it + 3 < iters) load_weights(1, it + 3);
  }
  detail::allow_dependent_launch();

  // Sum the warps' partials in warp order, then store: acc[j] holds features g, g + 8
  // (elements 0-1, 2-3) of rows 8j + 2t, 8j + 2t + 1.
  if (warp > 0) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp - 1][j][e][lane] = acc[j][e];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[e] = acc[j][e];
#pragma unroll
      for (int p = 0; p < kWarps - 1; ++p) v[e] += partial[p][j][e][lane];
    }
    if constexpr (kSiluGate) {
      const int64_t f = f0 / 2 + g;  // gate in v[0..1], up in v[2..3]
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int row = 8 * j + 2 * t + e;
        if (row < m && f < n / 2) yb[row * ldy + f] = detail::f32_to_bf16_rne(detail::silu_gate_value(v[e], v[e + 2]));
      }
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 8 * j + 2 * t + (e & 1);
        const int64_t f = f0 + g + (e >= 2 ? 8 : 0);
        if (row < m && f < n) y[row * ldy + f] = v[e];
      }
    }
  }
}

template <int kTiles, bool kSiluGate>
cudaError_t launch(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, float* y, uint16_t* yb,
                   int64_t ldy, int32_t m, cudaStream_t stream, bool overlap_previous) {
  return detail::launch_dependent(gemm_mma_kernel<kTiles, kSiluGate>,
                                  dim3(static_cast<unsigned>((n + kTile - 1) / kTile)), dim3(kWarps * 32), stream,
                                  overlap_previous, x, ldx, w, n, k, y, yb, ldy, m);
}

/// Both entry points: W of n rows, y (float) or yb (the SiLU gate's bf16) of ldy.
template <bool kSiluGate>
cudaError_t gemm_mma(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, float* y, uint16_t* yb,
                     int64_t ldy, int32_t m, cudaStream_t stream, bool overlap_previous) {
  if (k % kStep != 0 || ldx % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  if (m <= 0 || n <= 0) return cudaSuccess;
  // Rows in groups of kMaxMmaRows, each group's rows in the fewest n-tiles that hold them:
  // a row's sums are the same in every variant (see the header comment).
  for (int32_t r0 = 0; r0 < m; r0 += kMaxMmaRows) {
    const int32_t rows = std::min(m - r0, kMaxMmaRows);
    const uint16_t* xr = x + int64_t{r0} * ldx;
    float* yr = y ? y + int64_t{r0} * ldy : nullptr;
    uint16_t* ybr = yb ? yb + int64_t{r0} * ldy : nullptr;
    cudaError_t e;
    if (rows <= 8) e = launch<1, kSiluGate>(xr, ldx, w, n, k, yr, ybr, ldy, rows, stream, overlap_previous);
    else if (rows <= 16) e = launch<2, kSiluGate>(xr, ldx, w, n, k, yr, ybr, ldy, rows, stream, overlap_previous);
    else if (rows <= 32) e = launch<4, kSiluGate>(xr, ldx, w, n, k, yr, ybr, ldy, rows, stream, overlap_previous);
    else e = launch<kMaxTiles, kSiluGate>(xr, ldx, w, n, k, yr, ybr, ldy, rows, stream, overlap_previous);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t gemm_mma_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, float* y,
                          int64_t ldy, int32_t m, cudaStream_t stream, bool overlap_previous) {
  return gemm_mma<false>(x, ldx, w, n, k, y, nullptr, ldy, m, stream, overlap_previous);
}

cudaError_t gemm_mma_silu_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, uint16_t* yb,
                               int64_t ldyb, int32_t m, cudaStream_t stream, bool overlap_previous) {
  if (n % 8 != 0) return cudaErrorInvalidValue;
  return gemm_mma<true>(x, ldx, w, 2 * n, k, nullptr, yb, ldyb, m, stream, overlap_previous);
}

void interleave_gate_up(const uint16_t* gate_up, int64_t n, int64_t k, uint16_t* out) {
  for (int64_t f0 = 0; f0 < n; f0 += 8)
    for (int64_t half = 0; half < 2; ++half)  // 8 gate rows, then the same 8 features' up rows
      for (int64_t i = 0; i < 8; ++i)
        std::copy_n(gate_up + (half * n + f0 + i) * k, k, out + (2 * f0 + 8 * half + i) * k);
}

}  // namespace specpipe::cuda
