#include "kernels/cuda/elementwise.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/pdl.cuh"

namespace specpipe::cuda {
namespace {

using detail::bf16_bits_to_f32;
using detail::block_max;
using detail::block_sum;
using detail::f32_to_bf16_rne;

// One block per row (per head for the q/k norms); a row's reduction order depends on the
// block size, and the block size on the row width only (by_row_width), so it is the same
// for every row count. Rows of 2,048 floats and more take 1,024 threads: with 128, a
// decode step's one block walked a 4,096-float row 32 elements a thread, three times
// (~10% of an 8B-shape decode step on an H100).
constexpr int kRowThreads = 128;
constexpr int kWideRowThreads = 1024;
constexpr int64_t kWideRow = 2048;

/// Calls launch(std::integral_constant<int, threads>) with the block size for rows of `dim`.
template <class Launch>
cudaError_t by_row_width(int64_t dim, Launch&& launch) {
  if (dim >= kWideRow) return launch(std::integral_constant<int, kWideRowThreads>{});
  return launch(std::integral_constant<int, kRowThreads>{});
}

/// Element `at` of an embedding table of `dtype`, as float32.
__device__ inline float table_value(DType dtype, const void* table, int64_t at) {
  if (dtype == DType::f32) return static_cast<const float*>(table)[at];
  if (dtype == DType::bf16) return bf16_bits_to_f32(static_cast<const uint16_t*>(table)[at]);
  return __half2float(__ushort_as_half(static_cast<const uint16_t*>(table)[at]));
}

__global__ void embedding_kernel(DType dtype, const void* table, int64_t dim, const int32_t* tokens,
                                 float* out, int64_t ld_out) {
  const int64_t row = blockIdx.x;
  const int64_t id = tokens[row];
  float* dst = out + row * ld_out;
  for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) dst[d] = table_value(dtype, table, id * dim + d);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* x, int64_t ldx, const float* weight,
                                                            float eps, int32_t heads, int64_t dim, float* y,
                                                            int64_t ldy) {
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x / heads;
  const int64_t head = blockIdx.x % heads;
  const float* xr = x + row * ldx + head * dim;
  float* yr = y + row * ldy + head * dim;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) acc = fmaf(xr[i], xr[i], acc);
  const float mean = block_sum<kThreads>(acc, scratch) / static_cast<float>(dim);
  const float scale = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) yr[i] = weight[i] * (xr[i] * scale);
}

__global__ void rope_kernel(const float* cos, const float* sin, int32_t head_dim, const int32_t* positions,
                            float* x, int64_t ldx, int32_t heads) {
  const int32_t half = head_dim / 2;
  const int64_t row = blockIdx.x;
  const float* c = cos + int64_t{positions[row]} * half;
  const float* s = sin + int64_t{positions[row]} * half;
  for (int32_t t = threadIdx.x; t < heads * half; t += blockDim.x) {
    const int32_t h = t / half, i = t % half;
    float* v = x + row * ldx + int64_t{h} * head_dim;
    const float a = v[i], b = v[i + half];
    v[i] = a * c[i] - b * s[i];
    v[i + half] = b * c[i] + a * s[i];
  }
}

__global__ void silu_gate_kernel(const float* gate, const float* up, float* out, int64_t n, int64_t ld) {
  const int64_t row = blockIdx.y;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = row * ld + i;
    out[o] = detail::silu_gate_value(gate[o], up[o]);
  }
}

__global__ void f32_to_bf16_kernel(const float* x, int64_t cols, int64_t ldx, uint16_t* y, int64_t ldy) {
  const int64_t row = blockIdx.y;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < cols; i += int64_t{gridDim.x} * blockDim.x)
    y[row * ldy + i] = f32_to_bf16_rne(x[row * ldx + i]);
}

/// Sum of squares of x[0:dim) in rms_norm_kernel's order, then its 1 / rms.
template <int kThreads>
__device__ inline float rms_scale(const float* x, int64_t dim, float eps, float* scratch) {
  float acc = 0.0f;
  // Unrolled: a wide row (4096 floats: 32 steps a thread) waited on one load per step.
  // The chain still adds in the same order, so the bits do not change.
#pragma unroll 8
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) acc = fmaf(x[i], x[i], acc);
  const float mean = block_sum<kThreads>(acc, scratch) / static_cast<float>(dim);
  return 1.0f / sqrtf(mean + eps);
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) rms_norm_bf16_kernel(const float* x, int64_t ldx, const float* weight,
                                                                 float eps, int64_t dim, uint16_t* yb, int64_t ldyb) {
  detail::begin_dependent_kernel();
  __shared__ float scratch[kThreads / 32];
  const float* xr = x + int64_t{blockIdx.x} * ldx;
  uint16_t* yr = yb + int64_t{blockIdx.x} * ldyb;
  const float scale = rms_scale<kThreads>(xr, dim, eps, scratch);
#pragma unroll 8
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) yr[i] = f32_to_bf16_rne(weight[i] * (xr[i] * scale));
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    embedding_rms_norm_bf16_kernel(DType dtype, const void* table, int64_t dim, const int32_t* tokens, float* out,
                                   int64_t ld_out, const float* weight, float eps, uint16_t* yb, int64_t ldyb) {
  detail::begin_dependent_kernel();
  __shared__ float scratch[kThreads / 32];
  const int64_t id = tokens[blockIdx.x];
  float* xr = out + int64_t{blockIdx.x} * ld_out;
  // Each thread writes the elements rms_scale has it read next (same stride): no barrier.
#pragma unroll 8
  for (int64_t d = threadIdx.x; d < dim; d += kThreads) xr[d] = table_value(dtype, table, id * dim + d);
  uint16_t* yr = yb + int64_t{blockIdx.x} * ldyb;
  const float scale = rms_scale<kThreads>(xr, dim, eps, scratch);
#pragma unroll 8
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) yr[i] = f32_to_bf16_rne(weight[i] * (xr[i] * scale));
}

/// Elements a thread of a row kernel holds its norm weights for, loaded before the wait.
constexpr int kPreloaded = 8;

template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    residual_rms_norm_bf16_kernel(float* x, const float* t, const float* bias, int64_t ld, const float* weight,
                                  float eps, int64_t dim, uint16_t* yb, int64_t ldyb) {
  detail::allow_dependent_launch();
  // The norm's weights (no kernel writes them) load while the kernel before still runs,
  // for rows of up to kPreloaded elements a thread; the products are the same.
  const bool preload = dim <= int64_t{kPreloaded} * kThreads;
  float w[kPreloaded];
  if (preload) {
#pragma unroll
    for (int u = 0; u < kPreloaded; ++u) {
      const int64_t i = threadIdx.x + int64_t{u} * kThreads;
      w[u] = i < dim ? weight[i] : 0.0f;
    }
  }
  detail::wait_for_prerequisite_grid();
  __shared__ float scratch[kThreads / 32];
  const int64_t base = int64_t{blockIdx.x} * ld;
  float* xr = x + base;
  // Each thread updates the elements it reads next (same stride), so no barrier is needed.
#pragma unroll 8
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    const float add = bias ? t[base + c] + bias[c] : t[base + c];
    xr[c] = xr[c] + add;
  }
  uint16_t* yr = yb + int64_t{blockIdx.x} * ldyb;
  const float scale = rms_scale<kThreads>(xr, dim, eps, scratch);
  if (preload) {
#pragma unroll
    for (int u = 0; u < kPreloaded; ++u) {
      const int64_t i = threadIdx.x + int64_t{u} * kThreads;
      if (i < dim) yr[i] = f32_to_bf16_rne(w[u] * (xr[i] * scale));
    }
    return;
  }
#pragma unroll 8
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) yr[i] = f32_to_bf16_rne(weight[i] * (xr[i] * scale));
}

__global__ void silu_gate_bf16_kernel(const float* gate, const float* up, int64_t ld, int64_t n, uint16_t* yb,
                                      int64_t ldyb) {
  detail::begin_dependent_kernel();
  const int64_t row = blockIdx.y;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = row * ld + i;
    yb[row * ldyb + i] = f32_to_bf16_rne(detail::silu_gate_value(gate[o], up[o]));
  }
}

constexpr int kMaxHeadDim = 256;

__device__ inline void store_kv(float* to, float x) { *to = x; }
__device__ inline void store_kv(uint16_t* to, float x) { *to = f32_to_bf16_rne(x); }

/// Dst: the slots' element type (float, or uint16_t BF16 bits); kDense: the K/V also go,
/// as BF16, to the dense rows dense_k / dense_v (a BF16 store's window K/V).
template <class Dst, bool kDense>
__global__ void qk_norm_rope_kv_kernel(float* q, float* k, const float* v, int64_t ld, int32_t num_heads,
                                       int32_t head_dim, const float* q_norm, const float* k_norm, float eps,
                                       const float* cos, const float* sin, const int32_t* positions,
                                       const int64_t* slots, Dst* pool_k, Dst* pool_v, int64_t slot_stride,
                                       uint16_t* dense_k, uint16_t* dense_v, int64_t dense_ld) {
  detail::allow_dependent_launch();
  static_assert(kMaxHeadDim <= 2 * kRowThreads && kMaxHeadDim / 2 <= kRowThreads);
  __shared__ float scratch[kRowThreads / 32];
  __shared__ float buf[kMaxHeadDim];
  const int64_t row = blockIdx.x;
  const int32_t hi = blockIdx.y;
  const bool is_k = hi >= num_heads;
  const int32_t kh = hi - num_heads;
  float* x = is_k ? k + row * ld + int64_t{kh} * head_dim : q + row * ld + int64_t{hi} * head_dim;
  const float* weight = is_k ? k_norm : q_norm;
  // What no kernel writes loads while the kernel before still runs: the norm's weights
  // (dims tid, tid + kRowThreads) and the row's RoPE factors (positions are uploaded
  // metadata; a thread rotates at most pair tid, as head_dim / 2 <= kRowThreads).
  const int32_t half = head_dim / 2;
  const int tid = threadIdx.x;
  float w[2] = {0.0f, 0.0f};
  if (weight) {
    if (tid < head_dim) w[0] = weight[tid];
    if (tid + kRowThreads < head_dim) w[1] = weight[tid + kRowThreads];
  }
  float ci = 0.0f, si = 0.0f;
  if (tid < half) {
    const int64_t at = int64_t{positions[row]} * half + tid;
    ci = cos[at];
    si = sin[at];
  }
  detail::wait_for_prerequisite_grid();
  if (weight) {
    // head_dim <= kMaxHeadDim < kWideRow: the order of rms_norm's per-head blocks.
    static_assert(kMaxHeadDim < kWideRow);
    const float scale = rms_scale<kRowThreads>(x, head_dim, eps, scratch);
    if (tid < head_dim) buf[tid] = w[0] * (x[tid] * scale);
    if (tid + kRowThreads < head_dim) buf[tid + kRowThreads] = w[1] * (x[tid + kRowThreads] * scale);
  } else {
    for (int32_t i = threadIdx.x; i < head_dim; i += kRowThreads) buf[i] = x[i];
  }
  __syncthreads();
  const int64_t slot_off = is_k ? slots[row] * slot_stride + int64_t{kh} * head_dim : 0;
  if (tid < half) {
    const int32_t i = tid;
    const float a = buf[i], b = buf[i + half];
    const float ra = a * ci - b * si;
    const float rb = b * ci + a * si;
    x[i] = ra;
    x[i + half] = rb;
    if (is_k) {
      store_kv(pool_k + slot_off + i, ra);
      store_kv(pool_k + slot_off + i + half, rb);
      if constexpr (kDense) {
        const int64_t at = row * dense_ld + int64_t{kh} * head_dim;
        dense_k[at + i] = f32_to_bf16_rne(ra);
        dense_k[at + i + half] = f32_to_bf16_rne(rb);
      }
    }
  }
  if (is_k) {
    const float* vr = v + row * ld + int64_t{kh} * head_dim;
    for (int32_t i = threadIdx.x; i < head_dim; i += kRowThreads) {
      store_kv(pool_v + slot_off + i, vr[i]);
      if constexpr (kDense) dense_v[row * dense_ld + int64_t{kh} * head_dim + i] = f32_to_bf16_rne(vr[i]);
    }
  }
}

/// (value, index) that wins: larger value, then lower index.
__device__ inline bool beats(float v, int32_t i, float best_v, int32_t best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

/// One block per row. The winner (larger value, then lower index; NaN never wins) does
/// not depend on the order the candidates meet in, so the block is as wide as helps: a
/// 128256-entry row took 1,000 dependent steps a thread at 128 threads.
constexpr int kArgmaxThreads = 1024;

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* logits, int64_t vocab, int64_t ld,
                                                                int32_t* out) {
  detail::begin_dependent_kernel();
  __shared__ float sv[kArgmaxThreads / 32];
  __shared__ int32_t si[kArgmaxThreads / 32];
  const float* row = logits + int64_t{blockIdx.x} * ld;
  float best_v = -INFINITY;
  int32_t best_i = INT32_MAX;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < vocab; i += kArgmaxThreads) {
    const float v = row[i];
    if (beats(v, static_cast<int32_t>(i), best_v, best_i)) best_v = v, best_i = static_cast<int32_t>(i);
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(detail::kFullMask, best_v, o);
    const int32_t i = __shfl_xor_sync(detail::kFullMask, best_i, o);
    if (beats(v, i, best_v, best_i)) best_v = v, best_i = i;
  }
  if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = best_v, si[threadIdx.x / 32] = best_i;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w)
      if (beats(sv[w], si[w], best_v, best_i)) best_v = sv[w], best_i = si[w];
    // A row of NaNs (or -inf only) keeps index 0, as the CPU scan does.
    out[blockIdx.x] = best_i == INT32_MAX ? 0 : best_i;
  }
}

dim3 columns_grid(int64_t cols, int64_t rows, int threads) {
  const int64_t blocks = (cols + threads - 1) / threads;
  return dim3(static_cast<unsigned>(blocks < 1024 ? blocks : 1024), static_cast<unsigned>(rows));
}

}  // namespace

cudaError_t embedding(DType dtype, const void* table, int64_t dim, const int32_t* tokens, int32_t n, float* out,
                      int64_t ld_out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  embedding_kernel<<<n, 256, 0, stream>>>(dtype, table, dim, tokens, out, ld_out);
  return detail::launch_status();
}

cudaError_t rms_norm(const float* x, int64_t ldx, const float* weight, float eps, int64_t rows, int32_t heads,
                     int64_t dim, float* y, int64_t ldy, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  return by_row_width(dim, [&](auto threads) {
    rms_norm_kernel<threads.value><<<static_cast<unsigned>(rows * heads), threads.value, 0, stream>>>(
        x, ldx, weight, eps, heads, dim, y, ldy);
    return detail::launch_status();
  });
}

cudaError_t rope(const float* cos, const float* sin, int32_t head_dim, const int32_t* positions, int64_t rows,
                 float* x, int64_t ldx, int32_t heads, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  rope_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(cos, sin, head_dim, positions, x, ldx, heads);
  return detail::launch_status();
}

cudaError_t silu_gate(const float* gate, const float* up, float* out, int64_t rows, int64_t n, int64_t ld,
                      cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  silu_gate_kernel<<<columns_grid(n, rows, 256), 256, 0, stream>>>(gate, up, out, n, ld);
  return detail::launch_status();
}

cudaError_t f32_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ldx, uint16_t* y, int64_t ldy,
                        cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  f32_to_bf16_kernel<<<columns_grid(cols, rows, 256), 256, 0, stream>>>(x, cols, ldx, y, ldy);
  return detail::launch_status();
}

cudaError_t rms_norm_bf16(const float* x, int64_t ldx, const float* weight, float eps, int64_t rows, int64_t dim,
                          uint16_t* yb, int64_t ldyb, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  return by_row_width(dim, [&](auto threads) {
    return detail::launch_dependent(rms_norm_bf16_kernel<threads.value>, dim3(static_cast<unsigned>(rows)),
                                    dim3(threads.value), stream, true, x, ldx, weight, eps, dim, yb, ldyb);
  });
}

cudaError_t embedding_rms_norm_bf16(DType dtype, const void* table, int64_t dim, const int32_t* tokens, int32_t n,
                                    float* out, int64_t ld_out, const float* weight, float eps, uint16_t* yb,
                                    int64_t ldyb, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return by_row_width(dim, [&](auto threads) {
    return detail::launch_dependent(embedding_rms_norm_bf16_kernel<threads.value>, dim3(static_cast<unsigned>(n)),
                                    dim3(threads.value), stream, true, dtype, table, dim, tokens, out, ld_out, weight,
                                    eps, yb, ldyb);
  });
}

cudaError_t residual_rms_norm_bf16(float* x, const float* t, const float* bias, int64_t ld, const float* weight,
                                   float eps, int64_t rows, int64_t dim, uint16_t* yb, int64_t ldyb,
                                   cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  return by_row_width(dim, [&](auto threads) {
    return detail::launch_dependent(residual_rms_norm_bf16_kernel<threads.value>, dim3(static_cast<unsigned>(rows)),
                                    dim3(threads.value), stream, true, x, t, bias, ld, weight, eps, dim, yb, ldyb);
  });
}

cudaError_t silu_gate_bf16(const float* gate, const float* up, int64_t ld, int64_t rows, int64_t n, uint16_t* yb,
                           int64_t ldyb, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  return detail::launch_dependent(silu_gate_bf16_kernel, columns_grid(n, rows, 256), dim3(256), stream, true, gate, up,
                                  ld, n, yb, ldyb);
}

cudaError_t qk_norm_rope_kv(float* q, float* k, const float* v, int64_t ld, int32_t num_heads, int32_t num_kv_heads,
                            int32_t head_dim, const float* q_norm, const float* k_norm, float eps, const float* cos,
                            const float* sin, const int32_t* positions, const int64_t* slots, int64_t rows,
                            float* pool_k, float* pool_v, int64_t slot_stride, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim || head_dim % 2 != 0) return cudaErrorInvalidValue;
  if (rows <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(num_heads + num_kv_heads));
  return detail::launch_dependent(qk_norm_rope_kv_kernel<float, false>, grid, dim3(kRowThreads), stream, true, q, k,
                                  v, ld, num_heads, head_dim, q_norm, k_norm, eps, cos, sin, positions, slots, pool_k,
                                  pool_v, slot_stride, static_cast<uint16_t*>(nullptr),
                                  static_cast<uint16_t*>(nullptr), int64_t{0});
}

cudaError_t qk_norm_rope_kv_bf16(float* q, float* k, const float* v, int64_t ld, int32_t num_heads,
                                 int32_t num_kv_heads, int32_t head_dim, const float* q_norm, const float* k_norm,
                                 float eps, const float* cos, const float* sin, const int32_t* positions,
                                 const int64_t* slots, int64_t rows, void* rows_k, void* rows_v, bool rows_f32,
                                 int64_t slot_stride, uint16_t* dense_k, uint16_t* dense_v, int64_t dense_ld,
                                 cudaStream_t stream) {
  if (head_dim <= 0 || head_dim > kMaxHeadDim || head_dim % 2 != 0) return cudaErrorInvalidValue;
  if (rows <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(num_heads + num_kv_heads));
  if (rows_f32)
    return detail::launch_dependent(qk_norm_rope_kv_kernel<float, true>, grid, dim3(kRowThreads), stream, true, q, k,
                                    v, ld, num_heads, head_dim, q_norm, k_norm, eps, cos, sin, positions, slots,
                                    static_cast<float*>(rows_k), static_cast<float*>(rows_v), slot_stride, dense_k,
                                    dense_v, dense_ld);
  return detail::launch_dependent(qk_norm_rope_kv_kernel<uint16_t, true>, grid, dim3(kRowThreads), stream, true, q, k,
                                  v, ld, num_heads, head_dim, q_norm, k_norm, eps, cos, sin, positions, slots,
                                  static_cast<uint16_t*>(rows_k), static_cast<uint16_t*>(rows_v), slot_stride, dense_k,
                                  dense_v, dense_ld);
}

cudaError_t argmax(const float* logits, int64_t rows, int64_t vocab, int64_t ld, int32_t* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  return detail::launch_dependent(argmax_kernel, dim3(static_cast<unsigned>(rows)), dim3(kArgmaxThreads), stream, true,
                                  logits, vocab, ld, out);
}

}  // namespace specpipe::cuda
