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
/// each key's K and V row addresses, reduction scratch, whether this block merges.
template <int kDimLanes>
struct ChunkShared {
  float q[kMaxGroup * 32 * kDimLanes];
  float p[kMaxGroup][C];
  const float* krow[C];
  const float* vrow[C];
  float red[kMaxGroup][kWarps];
  float red2[kMaxGroup][kWarps];
  bool merges;
};

/// The chunk's values staged in shared memory ([count][head_dim], dynamic; can_stage
/// and launch_chunks decide and size it); the merging block reuses it.
extern __shared__ __align__(16) float staged_values[];

/// 16 bytes from global to shared memory without a register round trip (sm_80+), so
/// the chunk's values stream in while its scores are computed.
__device__ inline void copy_async16(float* to_shared, const float* from_global) {
  const auto to = static_cast<unsigned>(__cvta_generic_to_shared(to_shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(from_global) : "memory");
}
__device__ inline void copy_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/// How a row's chunk records (max m_c, sum s_c, value sums a_c) merge, chunks in
/// ascending order: M = max m_c, S = sum e^(m_c - M) s_c, out[d] = sum e^(m_c - M) a_c[d] / S.
/// The one formula of the combine kernel and of the chunk kernel's merging block, which
/// differ only in where m_c, s_c and e^(m_c - M) are read (max_of, sum_of, weight_of),
/// so they give the same bits. Record loads skip L1: other blocks of the grid wrote them.
struct MergeWeights {
  float max, sum;
};

template <class MaxOf, class SumOf>
__device__ inline MergeWeights merge_weights(int32_t chunks, MaxOf max_of, SumOf sum_of) {
  float m = -INFINITY;
  for (int32_t c = 0; c < chunks; ++c) m = fmaxf(m, max_of(c));
  float sum = 0.0f;
  for (int32_t c = 0; c < chunks; ++c) sum = fmaf(expf(max_of(c) - m), sum_of(c), sum);
  return {m, sum};
}

/// out[d] from a_c[d] at value + c * stride and weight_of(c) = e^(m_c - M).
template <class WeightOf>
__device__ inline float merged_value(const float* value, int32_t chunks, int64_t stride, WeightOf weight_of,
                                     float sum) {
  float acc = 0.0f;
  // Unrolled for loads in flight; the additions keep their order.
#pragma unroll 16
  for (int32_t c = 0; c < chunks; ++c) acc = fmaf(weight_of(c), __ldcg(value + c * stride), acc);
  return acc / sum;
}

/// out[d] of one head read straight from its records `rec` (chunk c's at rec + c * stride).
__device__ inline float merge_from_records(const float* rec, int32_t chunks, int64_t stride, int d) {
  const auto max_of = [&](int32_t c) { return __ldcg(rec + c * stride); };
  const MergeWeights w = merge_weights(chunks, max_of, [&](int32_t c) { return __ldcg(rec + c * stride + 1); });
  return merged_value(rec + 2 + d, chunks, stride, [&](int32_t c) { return expf(max_of(c) - w.max); }, w.sum);
}

/// The chunk records of (row, query head h): chunk c's is at rec + c * (head_dim + 2).
__device__ inline const float* row_records(const AttentionShape& s, const AttentionBatch& b, int32_t row,
                                           int32_t h) {
  return b.workspace + (int64_t{row} * s.num_heads + h) * b.max_chunks * (s.head_dim + 2);
}

/// One merged output: FP32 to b.out, or BF16 bits to outb when it is set.
__device__ inline void store_output(const AttentionBatch& b, uint16_t* outb, int64_t at, float value) {
  if (outb) outb[at] = f32_to_bf16_rne(value);
  else b.out[at] = value;
}

/// What a chunk block works on: its (row, kv head, chunk), the keys [j0, j0 + count).
struct ChunkTask {
  int32_t row, kvh, chunk;
  RowInfo r;
  int32_t j0, count;
  int32_t hd, group;  // head_dim, query heads per kv head
};

/// The block's task from its coordinates. Returns false (for the whole block) when the
/// chunk lies past the row's keys. Reads only the window metadata, which the host uploads
/// before the forward and no kernel writes: safe before waiting for the previous kernel.
__device__ inline bool chunk_task(const AttentionBatch& b, int32_t row, int32_t kvh, int32_t chunk, ChunkTask& task) {
  task.row = row;
  task.kvh = kvh;
  task.chunk = chunk;
  task.r = row_info(b, row);
  return chunk < attention_chunks(task.r.keys);
}

/// Loads the group's queries and the addresses of the chunk's K/V rows (pool prefix or
/// dense window) into shared memory.
template <int kDimLanes>
__device__ inline void load_chunk(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                  ChunkShared<kDimLanes>& sh, ChunkTask& task) {
  const int32_t row = task.row, kvh = task.kvh, chunk = task.chunk;
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
}

/// The (row, head, chunk) record of the split-K workspace: max, sum, hd value sums.
__device__ inline float* workspace_at(const AttentionShape& s, const AttentionBatch& b, const ChunkTask& task,
                                      int32_t g) {
  const int32_t group = s.num_heads / s.num_kv_heads;
  const int64_t h = int64_t{task.kvh} * group + g;
  return b.workspace + ((int64_t{task.row} * s.num_heads + h) * b.max_chunks + task.chunk) * (s.head_dim + 2);
}

/// The first version of the chunk kernel: partial attention of one query row, one kv
/// head's group of query heads, over the keys [chunk*C, chunk*C + C) of the row. Every
/// order below depends on head_dim and the chunk's key count only. Kept as the bitwise
/// reference of attention_chunk_kernel (attention_reference()).
__global__ void __launch_bounds__(kThreads) attention_chunk_reference_kernel(AttentionShape s, PagedPool pool,
                                                                             AttentionBatch b) {
  __shared__ ChunkShared<kDimPerLane> sh;
  ChunkTask task;
  if (!chunk_task(b, blockIdx.z, blockIdx.y, blockIdx.x, task)) return;
  load_chunk(s, pool, b, sh, task);
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
      workspace_at(s, b, task, g)[0] = m;
      workspace_at(s, b, task, g)[1] = sum;
    }
  }
  __syncthreads();
  // Unnormalised value sums: one chain per (head, dim) over the chunk's keys in order.
  for (int o = tid; o < group * hd; o += kThreads) {
    const int g = o / hd, d = o % hd;
    float acc = 0.0f;
    for (int jl = 0; jl < count; ++jl) acc = fmaf(sh.p[g][jl], sh.vrow[jl][d], acc);
    workspace_at(s, b, task, g)[2 + d] = acc;
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
///
/// With `stage` the chunk's values are copied to shared memory (staged_values) while the
/// scores are computed, so the value chains wait for one round of loads, not one per 16
/// keys; the sums read the same floats in the same order. With b.counters the last block
/// of (row, kv head) to finish merges the row's chunks for the group's heads (outb: BF16).
template <int kDimLanes, int kHeadsPerThread>
__global__ void __launch_bounds__(kFastThreads) attention_chunk_kernel(AttentionShape s, PagedPool pool,
                                                                   AttentionBatch b, uint16_t* outb, bool stage) {
  // Grid (kv head, chunk, row): a graph launches the pool's capacity of chunks; the rows'
  // real chunks come first in launch order, and the blocks past a row's keys leave
  // before waiting for the kernel before, so over a long pool they do not hold the slots
  // (2 blocks an SM when values are staged) that real blocks wait for. (No change at the
  // 8B shape's context 512 on an H100: 1.297x vs 1.298x in one call.)
  ChunkTask task;
  if (!chunk_task(b, blockIdx.z, blockIdx.x, blockIdx.y, task)) return;
  detail::begin_dependent_kernel();
  __shared__ ChunkShared<kDimLanes> sh;
  load_chunk(s, pool, b, sh, task);
  const int32_t hd = task.hd, group = task.group, count = task.count;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, tid = threadIdx.x;
  if (stage) {
    const int quads = hd / 4;  // stage requires head_dim % 4 == 0 and 16-byte aligned rows
    for (int i = tid; i < count * quads; i += kFastThreads)
      copy_async16(staged_values + i * 4, sh.vrow[i / quads] + (i % quads) * 4);
  }

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
  if (stage) copy_async_wait_all();  // this thread's copies; the barrier shows everyone's
  __syncthreads();
  if (tid < group) {
    float m = sh.red[tid][0], sum = sh.red2[tid][0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
      m = fmaxf(m, sh.red[tid][w]);
      sum += sh.red2[tid][w];
    }
    workspace_at(s, b, task, tid)[0] = m;
    workspace_at(s, b, task, tid)[1] = sum;
  }

  // Unnormalised value sums: the chains of one dim for kHeadsPerThread heads of the
  // group side by side (each value read once for all of them); every chain adds its
  // keys in ascending order, as the reference.
  const int span = hd < kFastThreads ? hd : kFastThreads;  // dims in flight
  const int parts = kFastThreads / span;                   // threads sharing one dim (heads split)
  const int gpart = tid / span;
  auto value_sums = [&](auto value_at) {
    for (int d = tid % span; d < hd; d += span) {
      float acc[kHeadsPerThread];
#pragma unroll
      for (int i = 0; i < kHeadsPerThread; ++i) acc[i] = 0.0f;
#pragma unroll 16
      for (int jl = 0; jl < count; ++jl) {
        const float vv = value_at(jl, d);
#pragma unroll
        for (int i = 0; i < kHeadsPerThread; ++i) {
          const int g = gpart + i * parts;
          if (g < group) acc[i] = fmaf(sh.p[g][jl], vv, acc[i]);
        }
      }
#pragma unroll
      for (int i = 0; i < kHeadsPerThread; ++i) {
        const int g = gpart + i * parts;
        if (g < group) workspace_at(s, b, task, g)[2 + d] = acc[i];
      }
    }
  };
  if (gpart < parts) {
    if (stage) value_sums([&](int jl, int d) { return staged_values[jl * hd + d]; });
    else value_sums([&](int jl, int d) { return sh.vrow[jl][d]; });
  }
  if (b.counters == nullptr) return;  // the combine kernel merges

  // The last block of (row, kv head) to get here merges the row's chunks: every block
  // publishes its records (fence), then counts itself in; the one that completes the
  // count reads them all and puts the counter back to zero for the next launch.
  const int32_t row = task.row, kvh = task.kvh;
  const int32_t chunks = attention_chunks(task.r.keys);
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    uint32_t* counter = b.counters + int64_t{row} * s.num_kv_heads + kvh;
    sh.merges = atomicAdd(counter, 1u) + 1 == static_cast<uint32_t>(chunks);
    if (sh.merges) atomicExch(counter, 0u);
  }
  __syncthreads();
  if (!sh.merges) return;
  __threadfence();
  const int64_t stride = hd + 2;
  const int32_t h0 = kvh * group;
  if (!stage || 2 * group * (chunks + 1) > C * hd) {
    // No room for the chunk weights: every output reads its chunks' records itself.
    for (int o = tid; o < group * hd; o += kFastThreads) {
      const int32_t h = h0 + o / hd, d = o % hd;
      store_output(b, outb, int64_t{row} * b.ld_out + int64_t{h} * hd + d,
                   merge_from_records(row_records(s, b, row, h), chunks, stride, d));
    }
    return;
  }
  // The chunk weights computed once in the staging memory (free now): every (head, chunk)
  // max and sum loaded at once, then M, S per head, then e^(m_c - M) per (head, chunk);
  // the value sums wait on few loads.
  float* weight = staged_values;                 // [group][chunks]: m_c, then e^(m_c - M)
  float* sums = weight + group * chunks;         // [group][chunks]: s_c
  float* head = sums + group * chunks;           // [group][2]: M, S
  for (int i = tid; i < group * chunks; i += kFastThreads) {
    const float* rec = row_records(s, b, row, h0 + i / chunks) + (i % chunks) * stride;
    weight[i] = __ldcg(rec);
    sums[i] = __ldcg(rec + 1);
  }
  __syncthreads();
  if (tid < group) {
    const float* mg = weight + tid * chunks;
    const float* sg = sums + tid * chunks;
    const MergeWeights w = merge_weights(chunks, [&](int32_t c) { return mg[c]; }, [&](int32_t c) { return sg[c]; });
    head[2 * tid] = w.max;
    head[2 * tid + 1] = w.sum;
  }
  __syncthreads();
  for (int i = tid; i < group * chunks; i += kFastThreads) weight[i] = expf(weight[i] - head[2 * (i / chunks)]);
  __syncthreads();
  for (int o = tid; o < group * hd; o += kFastThreads) {
    const int g = o / hd, d = o % hd;
    const float* wg = weight + g * chunks;
    store_output(b, outb, int64_t{row} * b.ld_out + int64_t{h0 + g} * hd + d,
                 merged_value(row_records(s, b, row, h0 + g) + 2 + d, chunks, stride,
                              [&](int32_t c) { return wg[c]; }, head[2 * g + 1]));
  }
}

/// Merges a row's chunks (merge_from_records): the second launch of the reference path
/// and of batches without counters. outb != null: BF16 bits there instead of FP32 to b.out.
__global__ void __launch_bounds__(kThreads) attention_combine_kernel(AttentionShape s, AttentionBatch b,
                                                                     uint16_t* outb) {
  detail::begin_dependent_kernel();
  const int32_t row = blockIdx.y, h = blockIdx.x, hd = s.head_dim;
  const int32_t chunks = attention_chunks(row_info(b, row).keys);
  const float* rec = row_records(s, b, row, h);
  for (int d = threadIdx.x; d < hd; d += kThreads)
    store_output(b, outb, int64_t{row} * b.ld_out + int64_t{h} * hd + d, merge_from_records(rec, chunks, hd + 2, d));
}

/// Rows of a batch up to which the chunk kernel stages values in shared memory: decode
/// steps and verify windows, whose few blocks wait on load latency. Larger batches
/// (prefill) keep more blocks per SM instead. Either way the bits are the same.
constexpr int32_t kStageMaxRows = 16;

/// Whether the values can be staged: whole 16-byte copies of every value row.
bool can_stage(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return b.total_tokens <= kStageMaxRows && s.head_dim % 4 == 0 && pool.slot_stride % 4 == 0 && b.ld_kv % 4 == 0 &&
         aligned(pool.v) && aligned(b.v);
}

template <int kDimLanes>
cudaError_t launch_chunks(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, dim3 grid,
                          uint16_t* outb, cudaStream_t stream) {
  // Value chains per thread: the group's heads over the threads that share a dim.
  const int span = s.head_dim < kFastThreads ? s.head_dim : kFastThreads;
  const int per_thread = (s.num_heads / s.num_kv_heads + kFastThreads / span - 1) / (kFastThreads / span);
  auto* kernel = per_thread <= 1   ? attention_chunk_kernel<kDimLanes, 1>
                 : per_thread <= 2 ? attention_chunk_kernel<kDimLanes, 2>
                                   : attention_chunk_kernel<kDimLanes, kMaxGroup>;
  const bool stage = can_stage(s, pool, b);
  const size_t staged_bytes = stage ? size_t{C} * s.head_dim * sizeof(float) : 0;
  if (staged_bytes > 48 * 1024) {  // over the default limit of dynamic shared memory: opt in
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(staged_bytes));
    if (e != cudaSuccess) return e;
  }
  return detail::launch_dependent_shared(kernel, grid, dim3(kFastThreads), staged_bytes, stream, true, s, pool, b,
                                         outb, stage);
}

cudaError_t attention_impl(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                           bool reference, cudaStream_t stream) {
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0 || s.num_heads / s.num_kv_heads > kMaxGroup ||
      s.head_dim <= 0 || s.head_dim > kMaxHeadDim || b.max_chunks <= 0 || b.max_chunks > 65535)
    return cudaErrorInvalidValue;
  if (b.total_tokens <= 0) return cudaSuccess;
  const dim3 grid(b.max_chunks, s.num_kv_heads, b.total_tokens);  // the reference kernel's
  const dim3 fast_grid(s.num_kv_heads, b.max_chunks, b.total_tokens);
  cudaError_t e = cudaSuccess;
  if (reference) {
    attention_chunk_reference_kernel<<<grid, kThreads, 0, stream>>>(s, pool, b);
    e = cudaGetLastError();
  } else if (s.head_dim <= 32) {
    e = launch_chunks<1>(s, pool, b, fast_grid, outb, stream);
  } else if (s.head_dim <= 64) {
    e = launch_chunks<2>(s, pool, b, fast_grid, outb, stream);
  } else if (s.head_dim <= 128) {
    e = launch_chunks<4>(s, pool, b, fast_grid, outb, stream);
  } else {
    e = launch_chunks<8>(s, pool, b, fast_grid, outb, stream);
  }
  if (e != cudaSuccess || (!reference && b.counters != nullptr)) return e;  // merged by the chunk kernel
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
