#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>

#include "kernels/cuda/block_reduce.cuh"

namespace specpipe::cuda {
namespace {

constexpr int kThreads = 128;  // = kAttentionChunkKeys: one thread per key in the softmax step
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxGroup = 16;
constexpr int kDimPerLane = kMaxHeadDim / 32;
constexpr int C = kAttentionChunkKeys;
static_assert(C == kThreads);

struct RowInfo {
  AttentionWindowDesc w;
  int32_t keys;  // keys the row sees: positions [0, keys)
};

__device__ inline RowInfo row_info(const AttentionBatch& b, int32_t row) {
  RowInfo r;
  r.w = b.windows[b.token_window[row]];
  r.keys = r.w.prefix_len + (row - r.w.first_token) + 1;
  return r;
}

/// Partial attention of one query row, one kv head's group of query heads, over the keys
/// [chunk*C, chunk*C + C) of the row. Every order below depends on head_dim and the
/// chunk's key count only.
__global__ void __launch_bounds__(kThreads) attention_chunk_kernel(AttentionShape s, PagedPool pool,
                                                                   AttentionBatch b, bool reference) {
  __shared__ float q_s[kMaxGroup * kMaxHeadDim];
  __shared__ float p_s[kMaxGroup][C];
  __shared__ const float* krow[C];
  __shared__ const float* vrow[C];
  __shared__ float scratch[kWarps];

  const int32_t row = blockIdx.z, kvh = blockIdx.y, chunk = blockIdx.x;
  const RowInfo r = row_info(b, row);
  if (chunk >= attention_chunks(r.keys)) return;  // uniform over the block
  const int32_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads;
  const int32_t j0 = chunk * C;
  const int32_t count = min(C, r.keys - j0);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  const float* q = b.q + int64_t{row} * b.ld_q + int64_t{kvh} * group * hd;
  for (int t = tid; t < group * hd; t += kThreads) q_s[t] = q[t];
  if (tid < count) {
    const int32_t j = j0 + tid;
    const int64_t head_off = int64_t{kvh} * hd;
    if (j < r.w.prefix_len) {
      const int32_t* table = pool.block_tables + r.w.block_table_offset;
      const int64_t slot = int64_t{table[j / pool.block_size]} * pool.block_size + j % pool.block_size;
      krow[tid] = pool.k + slot * pool.slot_stride + head_off;
      vrow[tid] = pool.v + slot * pool.slot_stride + head_off;
    } else {
      const int64_t t = int64_t{r.w.first_token} + (j - r.w.prefix_len);
      krow[tid] = b.k + t * b.ld_kv + head_off;
      vrow[tid] = b.v + t * b.ld_kv + head_off;
    }
  }
  __syncthreads();

  // Scores: a warp per key; lane l holds dims l, l+32, ...; a fixed butterfly sums them.
  if (reference) {  // the first version's loop (kept for the bitwise check)
    for (int jl = warp; jl < C; jl += kWarps) {
      if (jl >= count) {
        if (lane < group) p_s[lane][jl] = -INFINITY;
        continue;
      }
      float kreg[kDimPerLane];
#pragma unroll
      for (int t = 0; t < kDimPerLane; ++t) kreg[t] = lane + 32 * t < hd ? krow[jl][lane + 32 * t] : 0.0f;
      for (int g = 0; g < group; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int t = 0; t < kDimPerLane; ++t)
          if (lane + 32 * t < hd) dot = fmaf(q_s[g * hd + lane + 32 * t], kreg[t], dot);
        dot = detail::warp_sum(dot);
        if (lane == 0) p_s[g][jl] = dot * s.scale;
      }
    }
  } else {
    // The same per-key arithmetic, a warp taking kKeys keys at a time: their loads are
    // issued together and their butterflies interleave (latency, not order, changes).
    constexpr int kKeys = 8;
    for (int base = warp; base < C; base += kKeys * kWarps) {
      float kreg[kKeys][kDimPerLane];
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const int jl = base + u * kWarps;
#pragma unroll
        for (int t = 0; t < kDimPerLane; ++t)
          kreg[u][t] = jl < count && lane + 32 * t < hd ? krow[jl][lane + 32 * t] : 0.0f;
      }
      for (int g = 0; g < group; ++g) {
        float dot[kKeys];
#pragma unroll
        for (int u = 0; u < kKeys; ++u) {
          dot[u] = 0.0f;
#pragma unroll
          for (int t = 0; t < kDimPerLane; ++t)
            if (lane + 32 * t < hd) dot[u] = fmaf(q_s[g * hd + lane + 32 * t], kreg[u][t], dot[u]);
        }
#pragma unroll
        for (int u = 0; u < kKeys; ++u) dot[u] = detail::warp_sum(dot[u]);
        if (lane == 0) {
#pragma unroll
          for (int u = 0; u < kKeys; ++u)
            if (base + u * kWarps < count) p_s[g][base + u * kWarps] = dot[u] * s.scale;
        }
      }
#pragma unroll
      for (int u = 0; u < kKeys; ++u)
        if (base + u * kWarps >= count && lane < group) p_s[lane][base + u * kWarps] = -INFINITY;
    }
  }
  __syncthreads();

  const int64_t ws_stride = hd + 2;
  auto ws_at = [&](int32_t g) {
    const int64_t h = int64_t{kvh} * group + g;
    return b.workspace + ((int64_t{row} * s.num_heads + h) * b.max_chunks + chunk) * ws_stride;
  };
  // Softmax numerators: thread tid owns key tid of the chunk.
  for (int g = 0; g < group; ++g) {
    const float sc = p_s[g][tid];
    const float m = detail::block_max<kThreads>(sc, scratch);
    const float e = tid < count ? expf(sc - m) : 0.0f;
    p_s[g][tid] = e;
    const float sum = detail::block_sum<kThreads>(e, scratch);
    if (tid == 0) {
      ws_at(g)[0] = m;
      ws_at(g)[1] = sum;
    }
  }
  __syncthreads();

  // Unnormalised value sums: one chain per (head, dim) over the chunk's keys in order.
  if (reference) {  // the first version's loop (kept for the bitwise check)
    for (int o = tid; o < group * hd; o += kThreads) {
      const int g = o / hd, d = o % hd;
      float acc = 0.0f;
      for (int jl = 0; jl < count; ++jl) acc = fmaf(p_s[g][jl], vrow[jl][d], acc);
      ws_at(g)[2 + d] = acc;
    }
    return;
  }
  // The same chains, but a thread runs the chains of one dim for several heads of the
  // group side by side: each value is read once for all of them, and the chains give
  // independent FMAs. Every chain still adds its keys in ascending order: same bits.
  const int span = hd < kThreads ? hd : kThreads;  // dims in flight
  const int parts = kThreads / span;               // threads sharing one dim (heads split)
  const int gpart = tid / span;
  if (gpart >= parts) return;
  for (int d = tid % span; d < hd; d += span) {
    float acc[kMaxGroup];
#pragma unroll
    for (int i = 0; i < kMaxGroup; ++i) acc[i] = 0.0f;
    // Unrolled so that several keys' value loads are in flight at once (the chain was
    // waiting on one load per step); each chain's additions keep their order.
#pragma unroll 16
    for (int jl = 0; jl < count; ++jl) {
      const float vv = vrow[jl][d];
#pragma unroll
      for (int i = 0; i < kMaxGroup; ++i) {
        const int g = gpart + i * parts;
        if (g < group) acc[i] = fmaf(p_s[g][jl], vv, acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kMaxGroup; ++i) {
      const int g = gpart + i * parts;
      if (g < group) ws_at(g)[2 + d] = acc[i];
    }
  }
}

__device__ inline uint16_t f32_to_bf16_rne(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// Merges a row's chunks in ascending order: out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) s_c.
/// outb != null: the result goes there as BF16 bits instead of to b.out.
__global__ void __launch_bounds__(kThreads) attention_combine_kernel(AttentionShape s, AttentionBatch b,
                                                                     uint16_t* outb) {
  const int32_t row = blockIdx.y, h = blockIdx.x, hd = s.head_dim;
  const RowInfo r = row_info(b, row);
  const int32_t chunks = attention_chunks(r.keys);
  const int64_t ws_stride = hd + 2;
  const float* ws = b.workspace + (int64_t{row} * s.num_heads + h) * b.max_chunks * ws_stride;
  float m = -INFINITY;
  for (int32_t c = 0; c < chunks; ++c) m = fmaxf(m, ws[c * ws_stride]);
  float sum = 0.0f;
  for (int32_t c = 0; c < chunks; ++c) sum += expf(ws[c * ws_stride] - m) * ws[c * ws_stride + 1];
  const int64_t out_off = int64_t{row} * b.ld_out + int64_t{h} * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float acc = 0.0f;
    // Unrolled for loads in flight; the additions keep their order.
#pragma unroll 8
    for (int32_t c = 0; c < chunks; ++c) acc += expf(ws[c * ws_stride] - m) * ws[c * ws_stride + 2 + d];
    if (outb) outb[out_off + d] = f32_to_bf16_rne(acc / sum);
    else b.out[out_off + d] = acc / sum;
  }
}

cudaError_t attention_impl(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                           bool reference, cudaStream_t stream) {
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0 || s.num_heads / s.num_kv_heads > kMaxGroup ||
      s.head_dim <= 0 || s.head_dim > kMaxHeadDim || b.max_chunks <= 0)
    return cudaErrorInvalidValue;
  if (b.total_tokens <= 0) return cudaSuccess;
  attention_chunk_kernel<<<dim3(b.max_chunks, s.num_kv_heads, b.total_tokens), kThreads, 0, stream>>>(s, pool, b,
                                                                                                     reference);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  attention_combine_kernel<<<dim3(s.num_heads, b.total_tokens), kThreads, 0, stream>>>(s, b, outb);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, cudaStream_t stream) {
  return attention_impl(s, pool, b, nullptr, false, stream);
}

cudaError_t attention_reference(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                cudaStream_t stream) {
  return attention_impl(s, pool, b, nullptr, true, stream);
}

cudaError_t attention_bf16(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                           uint16_t* out_bf16, cudaStream_t stream) {
  return attention_impl(s, pool, b, out_bf16, false, stream);
}

}  // namespace specpipe::cuda
