#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/pdl.cuh"

namespace specpipe::cuda {
namespace {

using detail::f32_to_bf16_rne;

constexpr int kThreads = 128;  // = kAttentionChunkKeys: one thread per key in the softmax step
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxGroup = 16;
constexpr int kDimPerLane = kMaxHeadDim / 32;
constexpr int C = kAttentionChunkKeys;
static_assert(C == kThreads);
constexpr int kFastThreads = 4 * kThreads;  // attention_chunk_kernel's block
constexpr int kFastWarps = kFastThreads / 32;
static_assert(C % kFastWarps == 0);

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

/// Shared memory of a chunk block: the group's queries, the scores (then numerators),
/// each key's K and V row addresses, reduction scratch.
template <int kDimLanes>
struct ChunkShared {
  float q[kMaxGroup * 32 * kDimLanes];
  float p[kMaxGroup][C];
  const float* krow[C];
  const float* vrow[C];
  float red[kMaxGroup][kWarps];
  float red2[kMaxGroup][kWarps];
};

/// What a chunk block works on: its row, the keys [j0, j0 + count), its workspace.
struct ChunkTask {
  RowInfo r;
  int32_t j0, count;
  int32_t hd, group;  // head_dim, query heads per kv head
};

/// Loads the group's queries and the addresses of the chunk's K/V rows (pool prefix or
/// dense window) into shared memory. Returns false (for the whole block) when the chunk
/// lies past the row's keys.
template <int kDimLanes>
__device__ inline bool load_chunk(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                  ChunkShared<kDimLanes>& sh, ChunkTask& task) {
  const int32_t row = blockIdx.z, kvh = blockIdx.y, chunk = blockIdx.x;
  task.r = row_info(b, row);
  if (chunk >= attention_chunks(task.r.keys)) return false;  // uniform over the block
  const int32_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads;
  task.hd = hd;
  task.group = group;
  task.j0 = chunk * C;
  task.count = min(C, task.r.keys - task.j0);
  const int tid = threadIdx.x;
  const float* q = b.q + int64_t{row} * b.ld_q + int64_t{kvh} * group * hd;
  for (int t = tid; t < group * hd; t += blockDim.x) sh.q[t] = q[t];
  if (tid < task.count) {
    const int32_t j = task.j0 + tid;
    const int64_t head_off = int64_t{kvh} * hd;
    const AttentionWindowDesc& w = task.r.w;
    if (j < w.prefix_len) {
      const int32_t* table = pool.block_tables + w.block_table_offset;
      const int64_t slot = int64_t{table[j / pool.block_size]} * pool.block_size + j % pool.block_size;
      sh.krow[tid] = pool.k + slot * pool.slot_stride + head_off;
      sh.vrow[tid] = pool.v + slot * pool.slot_stride + head_off;
    } else {
      const int64_t t = int64_t{w.first_token} + (j - w.prefix_len);
      sh.krow[tid] = b.k + t * b.ld_kv + head_off;
      sh.vrow[tid] = b.v + t * b.ld_kv + head_off;
    }
  }
  __syncthreads();
  return true;
}

/// The (row, head, chunk) record of the split-K workspace: max, sum, hd value sums.
__device__ inline float* workspace_at(const AttentionShape& s, const AttentionBatch& b, int32_t g) {
  const int32_t group = s.num_heads / s.num_kv_heads;
  const int64_t h = int64_t{blockIdx.y} * group + g;
  return b.workspace + ((int64_t{blockIdx.z} * s.num_heads + h) * b.max_chunks + blockIdx.x) * (s.head_dim + 2);
}

/// The first version of the chunk kernel: partial attention of one query row, one kv
/// head's group of query heads, over the keys [chunk*C, chunk*C + C) of the row. Every
/// order below depends on head_dim and the chunk's key count only. Kept as the bitwise
/// reference of attention_chunk_kernel (attention_reference()).
__global__ void __launch_bounds__(kThreads) attention_chunk_reference_kernel(AttentionShape s, PagedPool pool,
                                                                             AttentionBatch b) {
  __shared__ ChunkShared<kDimPerLane> sh;
  ChunkTask task;
  if (!load_chunk(s, pool, b, sh, task)) return;
  const int32_t hd = task.hd, group = task.group, count = task.count;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // Scores: a warp per key; lane l holds dims l, l+32, ...; a fixed butterfly sums them.
  for (int jl = warp; jl < C; jl += kWarps) {
    if (jl >= count) {
      if (lane < group) sh.p[lane][jl] = -INFINITY;
      continue;
    }
    float kreg[kDimPerLane];
#pragma unroll
    for (int t = 0; t < kDimPerLane; ++t) kreg[t] = lane + 32 * t < hd ? sh.krow[jl][lane + 32 * t] : 0.0f;
    for (int g = 0; g < group; ++g) {
      float dot = 0.0f;
#pragma unroll
      for (int t = 0; t < kDimPerLane; ++t)
        if (lane + 32 * t < hd) dot = fmaf(sh.q[g * hd + lane + 32 * t], kreg[t], dot);
      dot = detail::warp_sum(dot);
      if (lane == 0) sh.p[g][jl] = dot * s.scale;
    }
  }
  __syncthreads();
  // Softmax numerators: thread tid owns key tid of the chunk.
  for (int g = 0; g < group; ++g) {
    const float sc = sh.p[g][tid];
    const float m = detail::block_max<kThreads>(sc, sh.red[0]);
    const float e = tid < count ? expf(sc - m) : 0.0f;
    sh.p[g][tid] = e;
    const float sum = detail::block_sum<kThreads>(e, sh.red[0]);
    if (tid == 0) {
      workspace_at(s, b, g)[0] = m;
      workspace_at(s, b, g)[1] = sum;
    }
  }
  __syncthreads();
  // Unnormalised value sums: one chain per (head, dim) over the chunk's keys in order.
  for (int o = tid; o < group * hd; o += kThreads) {
    const int g = o / hd, d = o % hd;
    float acc = 0.0f;
    for (int jl = 0; jl < count; ++jl) acc = fmaf(sh.p[g][jl], sh.vrow[jl][d], acc);
    workspace_at(s, b, g)[2 + d] = acc;
  }
}

/// The chunk kernel of the forward: the reference's arithmetic in the reference's order
/// (same bits), organised for latency. kDimLanes = ceil(head_dim / 32) dims per lane and
/// kHeadsPerThread value chains per thread are compile-time, so no work is predicated
/// off for the common shapes (the first version spent most of its issue slots on
/// predicated-off lanes of 8 dims and 16 heads). A block has kFastThreads threads, four
/// times the reference's: a decode step has few blocks (chunks x kv heads), and each
/// warp's long instruction stream was the latency; now a warp scores 8 keys and a
/// thread runs one or two value chains. Which thread computes a key's score or a
/// (head, dim) chain does not change its arithmetic.
template <int kDimLanes, int kHeadsPerThread>
__global__ void __launch_bounds__(kFastThreads) attention_chunk_kernel(AttentionShape s, PagedPool pool,
                                                                   AttentionBatch b) {
  detail::begin_dependent_kernel();
  __shared__ ChunkShared<kDimLanes> sh;
  ChunkTask task;
  if (!load_chunk(s, pool, b, sh, task)) return;
  const int32_t hd = task.hd, group = task.group, count = task.count;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, tid = threadIdx.x;

  // Scores, as the reference: a warp per key, lane l holding dims l, l+32, ..., one FMA
  // chain then a fixed butterfly; a warp takes kKeys keys at a time so their loads are
  // in flight together and their butterflies interleave.
  constexpr int kKeys = C / kFastWarps;  // one pass: every warp's keys in flight together
  for (int base = warp; base < C; base += kKeys * kFastWarps) {
    float kreg[kKeys][kDimLanes];
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      const int jl = base + u * kFastWarps;
#pragma unroll
      for (int t = 0; t < kDimLanes; ++t)
        kreg[u][t] = jl < count && lane + 32 * t < hd ? sh.krow[jl][lane + 32 * t] : 0.0f;
    }
    for (int g = 0; g < group; ++g) {
      float dot[kKeys];
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        dot[u] = 0.0f;
#pragma unroll
        for (int t = 0; t < kDimLanes; ++t)
          if (lane + 32 * t < hd) dot[u] = fmaf(sh.q[g * hd + lane + 32 * t], kreg[u][t], dot[u]);
      }
#pragma unroll
      for (int u = 0; u < kKeys; ++u) dot[u] = detail::warp_sum(dot[u]);
      if (lane == 0) {
#pragma unroll
        for (int u = 0; u < kKeys; ++u)
          if (base + u * kFastWarps < count) sh.p[g][base + u * kFastWarps] = dot[u] * s.scale;
      }
    }
#pragma unroll
    for (int u = 0; u < kKeys; ++u)
      if (base + u * kFastWarps >= count && lane < group) sh.p[lane][base + u * kFastWarps] = -INFINITY;
  }
  __syncthreads();

  // Softmax numerators, every head of the group at once: block_max / block_sum's orders
  // (a butterfly per warp, then the warps in order) with two barriers in all instead of
  // four per head. Thread tid < C owns key tid, as in the reference's 128-thread block.
  if (tid < C)
    for (int g = 0; g < group; ++g) {
      const float m = detail::warp_max(sh.p[g][tid]);
      if (lane == 0) sh.red[g][warp] = m;
    }
  __syncthreads();
  if (tid < C)
    for (int g = 0; g < group; ++g) {
      float m = sh.red[g][0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) m = fmaxf(m, sh.red[g][w]);
      const float e = tid < count ? expf(sh.p[g][tid] - m) : 0.0f;
      sh.p[g][tid] = e;
      const float sum = detail::warp_sum(e);
      if (lane == 0) sh.red2[g][warp] = sum;
    }
  __syncthreads();
  if (tid < group) {
    float m = sh.red[tid][0], sum = sh.red2[tid][0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
      m = fmaxf(m, sh.red[tid][w]);
      sum += sh.red2[tid][w];
    }
    workspace_at(s, b, tid)[0] = m;
    workspace_at(s, b, tid)[1] = sum;
  }

  // Unnormalised value sums: the chains of one dim for kHeadsPerThread heads of the
  // group side by side (each value read once for all of them); every chain adds its
  // keys in ascending order, as the reference.
  const int span = hd < kFastThreads ? hd : kFastThreads;  // dims in flight
  const int parts = kFastThreads / span;                   // threads sharing one dim (heads split)
  const int gpart = tid / span;
  if (gpart >= parts) return;
  for (int d = tid % span; d < hd; d += span) {
    float acc[kHeadsPerThread];
#pragma unroll
    for (int i = 0; i < kHeadsPerThread; ++i) acc[i] = 0.0f;
#pragma unroll 16
    for (int jl = 0; jl < count; ++jl) {
      const float vv = sh.vrow[jl][d];
#pragma unroll
      for (int i = 0; i < kHeadsPerThread; ++i) {
        const int g = gpart + i * parts;
        if (g < group) acc[i] = fmaf(sh.p[g][jl], vv, acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kHeadsPerThread; ++i) {
      const int g = gpart + i * parts;
      if (g < group) workspace_at(s, b, g)[2 + d] = acc[i];
    }
  }
}

/// Merges a row's chunks in ascending order: out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) s_c.
/// outb != null: the result goes there as BF16 bits instead of to b.out.
__global__ void __launch_bounds__(kThreads) attention_combine_kernel(AttentionShape s, AttentionBatch b,
                                                                     uint16_t* outb) {
  detail::begin_dependent_kernel();
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

template <int kDimLanes>
cudaError_t launch_chunks(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, dim3 grid,
                          cudaStream_t stream) {
  // Value chains per thread: the group's heads over the threads that share a dim.
  const int span = s.head_dim < kFastThreads ? s.head_dim : kFastThreads;
  const int per_thread = (s.num_heads / s.num_kv_heads + kFastThreads / span - 1) / (kFastThreads / span);
  const dim3 block(kFastThreads);
  auto* kernel = per_thread <= 1   ? attention_chunk_kernel<kDimLanes, 1>
                 : per_thread <= 2 ? attention_chunk_kernel<kDimLanes, 2>
                                   : attention_chunk_kernel<kDimLanes, kMaxGroup>;
  return detail::launch_dependent(kernel, grid, block, stream, true, s, pool, b);
}

cudaError_t attention_impl(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                           bool reference, cudaStream_t stream) {
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0 || s.num_heads / s.num_kv_heads > kMaxGroup ||
      s.head_dim <= 0 || s.head_dim > kMaxHeadDim || b.max_chunks <= 0)
    return cudaErrorInvalidValue;
  if (b.total_tokens <= 0) return cudaSuccess;
  const dim3 grid(b.max_chunks, s.num_kv_heads, b.total_tokens);
  cudaError_t e = cudaSuccess;
  if (reference) {
    attention_chunk_reference_kernel<<<grid, kThreads, 0, stream>>>(s, pool, b);
    e = cudaGetLastError();
  } else if (s.head_dim <= 32) {
    e = launch_chunks<1>(s, pool, b, grid, stream);
  } else if (s.head_dim <= 64) {
    e = launch_chunks<2>(s, pool, b, grid, stream);
  } else if (s.head_dim <= 128) {
    e = launch_chunks<4>(s, pool, b, grid, stream);
  } else {
    e = launch_chunks<8>(s, pool, b, grid, stream);
  }
  if (e != cudaSuccess) return e;
  return detail::launch_dependent(attention_combine_kernel, dim3(s.num_heads, b.total_tokens), dim3(kThreads), stream,
                                  true, s, b, outb);
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
