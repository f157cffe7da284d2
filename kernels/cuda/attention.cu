#include "kernels/cuda/attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/pdl.cuh"

namespace specpipe::cuda {
namespace {

using detail::f32_to_bf16_rne;

// K/V storage: T is float (FP32) or uint16_t (BF16 bits). Every K/V element is widened to
// FP32 exactly (kv_float) where it is read; all arithmetic is FP32 in the same order for
// both, so the BF16 kernels are the FP32 kernels over the BF16-rounded keys and values.
__device__ inline float kv_float(float x) { return x; }
__device__ inline float kv_float(uint16_t x) { return detail::bf16_bits_to_f32(x); }
template <class T>
constexpr int kVecElems = 16 / static_cast<int>(sizeof(T));  // elements of one 16-byte copy

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
template <int kDimLanes, class T>
struct ChunkShared {
  float q[kMaxGroup * 32 * kDimLanes];
  float p[kMaxGroup][C];
  const T* krow[C];
  const T* vrow[C];
  float red[kMaxGroup][kWarps];
  float red2[kMaxGroup][kWarps];
  bool merges;
};

/// The chunk's values staged in shared memory ([count][head_dim] of the storage type,
/// dynamic; can_stage and launch_chunks decide and size it); the merging block reuses it
/// as FP32 scratch.
extern __shared__ __align__(16) float staged_values[];

/// 16 bytes from global to shared memory without a register round trip (sm_80+), so
/// the chunk's values stream in while its scores are computed.
__device__ inline void copy_async16(void* to_shared, const void* from_global) {
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

/// Where key j < w.prefix_len of a window lives: its pool block, or (offload) its block
/// of the layer's ring slot.
template <class T>
__device__ inline void pool_rows(const PagedPool& pool, const AttentionWindowDesc& w, int32_t j, int64_t head_off,
                                 const T*& krow, const T*& vrow) {
  const int32_t entry = pool.block_tables[w.block_table_offset + j / pool.block_size];
  const bool ring = entry < 0;
  const int64_t slot = int64_t{ring ? ring_block_of(entry) : entry} * pool.block_size + j % pool.block_size;
  krow = static_cast<const T*>(ring ? pool.ring_k : pool.k) + slot * pool.slot_stride + head_off;
  vrow = static_cast<const T*>(ring ? pool.ring_v : pool.v) + slot * pool.slot_stride + head_off;
}

/// Where key j >= w.prefix_len lives: the batch's dense window K/V (of the pool's type).
template <class T>
__device__ inline void window_rows(const AttentionBatch& b, const AttentionWindowDesc& w, int32_t j, int64_t head_off,
                                   const T*& krow, const T*& vrow) {
  const int64_t t = int64_t{w.first_token} + (j - w.prefix_len);
  krow = static_cast<const T*>(b.k) + t * b.ld_kv + head_off;
  vrow = static_cast<const T*>(b.v) + t * b.ld_kv + head_off;
}

/// Loads the group's queries and the addresses of the chunk's K/V rows (pool prefix or
/// dense window) into shared memory.
template <int kDimLanes, class T>
__device__ inline void load_chunk(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                  ChunkShared<kDimLanes, T>& sh, ChunkTask& task) {
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
    if (j < w.prefix_len) pool_rows(pool, w, j, head_off, sh.krow[tid], sh.vrow[tid]);
    else window_rows(b, w, j, head_off, sh.krow[tid], sh.vrow[tid]);
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
template <class T>
__global__ void __launch_bounds__(kThreads) attention_chunk_reference_kernel(AttentionShape s, PagedPool pool,
                                                                             AttentionBatch b) {
  __shared__ ChunkShared<kDimPerLane, T> sh;
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
    for (int t = 0; t < kDimPerLane; ++t) kreg[t] = lane + 32 * t < hd ? kv_float(sh.krow[jl][lane + 32 * t]) : 0.0f;
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
    for (int jl = 0; jl < count; ++jl) acc = fmaf(sh.p[g][jl], kv_float(sh.vrow[jl][d]), acc);
    workspace_at(s, b, task, g)[2 + d] = acc;
  }
}

/// Merges the chunks of (row, kv head) for the group's heads (outb: BF16), with a block of
/// kFastThreads threads: with room in `scratch` (scratch_floats of shared memory) every
/// chunk's max and sum are loaded at once, e^(m_c - M) computed once per (head, chunk),
/// then the value sums with 16 loads in flight; without, every output reads its chunks'
/// records itself. Both are merge_weights / merged_value: the same bits.
__device__ inline void merge_row(const AttentionShape& s, const AttentionBatch& b, uint16_t* outb, int32_t row,
                                 int32_t kvh, int32_t chunks, float* scratch, int64_t scratch_floats) {
  const int32_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads;
  const int tid = threadIdx.x;
  const int64_t stride = hd + 2;
  const int32_t h0 = kvh * group;
  if (2 * int64_t{group} * (chunks + 1) > scratch_floats) {
    // No room for the chunk weights: every output reads its chunks' records itself.
    for (int o = tid; o < group * hd; o += kFastThreads) {
      const int32_t h = h0 + o / hd, d = o % hd;
      store_output(b, outb, int64_t{row} * b.ld_out + int64_t{h} * hd + d,
                   merge_from_records(row_records(s, b, row, h), chunks, stride, d));
    }
    return;
  }
  // The chunk weights computed once in the scratch memory: every (head, chunk) max and
  // sum loaded at once, then M, S per head, then e^(m_c - M) per (head, chunk); the value
  // sums wait on few loads.
  float* weight = scratch;                // [group][chunks]: m_c, then e^(m_c - M)
  float* sums = weight + group * chunks;  // [group][chunks]: s_c
  float* head = sums + group * chunks;    // [group][2]: M, S
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
template <int kDimLanes, int kHeadsPerThread, class T>
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
  __shared__ ChunkShared<kDimLanes, T> sh;
  load_chunk(s, pool, b, sh, task);
  const int32_t hd = task.hd, group = task.group, count = task.count;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, tid = threadIdx.x;
  T* const staged = reinterpret_cast<T*>(staged_values);
  if (stage) {
    constexpr int kVec = kVecElems<T>;
    const int vecs = hd / kVec;  // stage requires head_dim % kVec == 0 and 16-byte aligned rows
    for (int i = tid; i < count * vecs; i += kFastThreads)
      copy_async16(staged + i * kVec, sh.vrow[i / vecs] + (i % vecs) * kVec);
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
        kreg[u][t] = jl < count && lane + 32 * t < hd ? kv_float(sh.krow[jl][lane + 32 * t]) : 0.0f;
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
    if (stage) value_sums([&](int jl, int d) { return kv_float(staged[jl * hd + d]); });
    else value_sums([&](int jl, int d) { return kv_float(sh.vrow[jl][d]); });
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
  merge_row(s, b, outb, row, kvh, chunks, staged_values, stage ? int64_t{C} * hd : 0);
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
template <class T>
bool can_stage(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  constexpr int kVec = kVecElems<T>;
  return b.total_tokens <= kStageMaxRows && s.head_dim % kVec == 0 && pool.slot_stride % kVec == 0 &&
         b.ld_kv % kVec == 0 && aligned(pool.v) && aligned(b.v) && aligned(pool.ring_v);
}

// ---------------------------------------------------------------------------------------
// Verify windows sharing each K/V load (attention_window_kernel + attention_merge_kernel).
//
// The chunk kernel's grid is (kv head, chunk, row): every row of a verify window loads the
// same keys and values again. For batches of 2..kStageMaxRows rows the window kernel takes
// a block per (kv head, chunk, group of a window's rows): the chunk's keys are loaded once
// (K into registers, V staged in shared memory) and every (row, query head) of the group,
// a "slot", is scored against them and sums the values. The grid is (kv head, max_chunks):
// block y takes the batch's (group, chunk) tasks y, y + max_chunks, ..., so one window
// launches as many blocks as decode. Two builds of it, the same arithmetic: wide (a
// warp's 8 keys of K in registers, up to 128 registers a thread, one block an SM) and lean
// (4 keys at a time, 64 registers, two blocks an SM); window_path_mode picks.
//
// Every number it writes is the chunk kernel's: a slot's score is the same per-lane FMA
// chain and the same butterfly (done as a reduce-scatter: 32 dot products in 31 shuffles,
// lane L ending with dot L, which is the tree lane 0 of warp_sum builds, since the xor
// pairs are the same and a + b == b + a; lean: 16 dot products, four halving steps and the
// butterfly's last); the
// max and sum of the chunk are the same warp-then-warps-in-order reductions over 128 keys;
// a slot's value chains add its row's keys [j0, j0 + count_row) in ascending order, rows
// whose keys end inside the chunk stopping where the chunk kernel stops. The records go to
// the same (row, head, chunk) places, and attention_merge_kernel merges each (row, kv head)
// with merge_row, as the chunk kernel's last block does (a second launch: the counters stay
// zero): the same bits (the check compares them with attention_reference, and decode with
// window rows, bit for bit).

/// A group's slots (row, query head) are at most this many (shared memory: queries and
/// scores per slot); a window with more rows x group is cut into groups of rows.
constexpr int kWindowMaxSlots = 64;
constexpr int kScoreStride = C + 4;  // floats per slot's scores: 16-byte rows, fewer bank conflicts

/// SPECPIPE_ATTENTION_WINDOW in the environment (read once): 0 keeps every batch on the
/// chunk kernel (a row per block), for A/B timings; 1 the window kernel with up to 128
/// registers a thread (one block an SM; wide: a warp's 8 keys in registers); 2 the lean one
/// (64 registers, two blocks an SM; 4 keys at a time); unset (or anything else): lean when
/// the grid has two blocks an SM to fill (kv heads x max_chunks >= kLeanMinBlocks), else
/// wide (few blocks: each block's latency counts, not how many an SM holds). The same bits
/// in every mode.
int window_path_mode() {
  static const int mode = [] {
    const char* v = std::getenv("SPECPIPE_ATTENTION_WINDOW");
    if (v != nullptr && std::strcmp(v, "0") == 0) return 0;
    if (v != nullptr && std::strcmp(v, "1") == 0) return 1;
    if (v != nullptr && std::strcmp(v, "2") == 0) return 2;
    return -1;  // by the grid
  }();
  return mode;
}

/// Blocks of the window grid from which the lean build is the default: two an SM of an
/// H100 / H200 (132 SMs; a constant, so the launch asks the runtime nothing under capture).
constexpr int64_t kLeanMinBlocks = 2 * 132;

/// One step of a reduce-scatter over the lanes: N values per lane become N/2, lane L
/// keeping the half selected by bit `kOffset` of L, each the sum of its own and lane
/// L ^ kOffset's value of that index (warp_sum's pairs at that offset).
template <int N, int kOffset, int M>
__device__ inline void reduce_scatter_step(float (&v)[M], int lane) {
  constexpr int h = N / 2;
  const bool upper = (lane & kOffset) != 0;
#pragma unroll
  for (int j = 0; j < h; ++j) {
    const float send = upper ? v[j] : v[j + h];
    const float keep = upper ? v[j + h] : v[j];
    v[j] = keep + __shfl_xor_sync(detail::kFullMask, send, kOffset);
  }
}

/// v[i] of every lane summed over the warp as warp_sum does (offsets 16, 8, 4, 2, 1);
/// lane L returns the sum of index L.
__device__ inline float reduce_scatter(float (&v)[32], int lane) {
  reduce_scatter_step<32, 16>(v, lane);
  reduce_scatter_step<16, 8>(v, lane);
  reduce_scatter_step<8, 4>(v, lane);
  reduce_scatter_step<4, 2>(v, lane);
  reduce_scatter_step<2, 1>(v, lane);
  return v[0];
}

/// The same for 16 values a lane: four halving steps (offsets 16, 8, 4, 2), then the
/// butterfly's last step (offset 1); lanes L and L ^ 1 return the sum of index L / 2.
__device__ inline float reduce_scatter(float (&v)[16], int lane) {
  reduce_scatter_step<16, 16>(v, lane);
  reduce_scatter_step<8, 8>(v, lane);
  reduce_scatter_step<4, 4>(v, lane);
  reduce_scatter_step<2, 2>(v, lane);
  return v[0] + __shfl_xor_sync(detail::kFullMask, v[0], 1);
}

/// What one task of the window kernel works on: rows [row0 + first, row0 + rows) of a
/// group (first: the first row with keys in the chunk), keys [j0, j0 + C) of the chunk.
struct WindowTask {
  int32_t row0, rows, first;  // group's first row, its row count, first active row (local)
  int32_t keys0;              // keys the group's first row sees
  int32_t j0, chunk;
  int32_t slots;              // (rows - first) * group
  int32_t count_min, count_max;
  /// Keys of the chunk that local row k sees.
  __device__ int32_t count(int32_t k) const { return min(C, keys0 + k - j0); }
};

/// K chains of value sums of one dim d, for the slots `slot[i]`: every chain adds the
/// keys of its row in ascending order (the common keys four at a time, then the rows' own
/// ends one by one), as the chunk kernel's chains.
template <int K, class T>
__device__ inline void window_value_chains(const AttentionShape& s, const AttentionBatch& b, const WindowTask& t,
                                           int32_t kvh, int32_t group, int d, const int32_t* slot, const T* sv,
                                           const float* sp) {
  const int32_t hd = s.head_dim;
  float acc[K];
  const float* pr[K];
  int32_t cnt[K];
#pragma unroll
  for (int i = 0; i < K; ++i) {
    acc[i] = 0.0f;
    pr[i] = sp + slot[i] * kScoreStride;
    cnt[i] = t.count(t.first + slot[i] / group);
  }
  int32_t jl = 0;
#pragma unroll 4
  for (; jl + 4 <= t.count_min; jl += 4) {
    const float v0 = kv_float(sv[(jl + 0) * hd + d]), v1 = kv_float(sv[(jl + 1) * hd + d]);
    const float v2 = kv_float(sv[(jl + 2) * hd + d]), v3 = kv_float(sv[(jl + 3) * hd + d]);
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const float4 p = *reinterpret_cast<const float4*>(pr[i] + jl);
      acc[i] = fmaf(p.x, v0, acc[i]);
      acc[i] = fmaf(p.y, v1, acc[i]);
      acc[i] = fmaf(p.z, v2, acc[i]);
      acc[i] = fmaf(p.w, v3, acc[i]);
    }
  }
  for (; jl < t.count_max; ++jl) {
    const float vv = kv_float(sv[jl * hd + d]);
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (jl < cnt[i]) acc[i] = fmaf(pr[i][jl], vv, acc[i]);
  }
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int32_t row = t.row0 + t.first + slot[i] / group;
    const int64_t h = int64_t{kvh} * group + slot[i] % group;
    b.workspace[((int64_t{row} * s.num_heads + h) * b.max_chunks + t.chunk) * (hd + 2) + 2 + d] = acc[i];
  }
}

/// Grid (kv head, max_chunks): block y takes tasks y, y + max_chunks, ... of the batch's
/// (group, chunk) tasks (groups: a window's rows cut into runs of rows_per_group), so a
/// single window launches no more blocks than decode. Dynamic shared memory: the staged
/// values [C][hd], the slots' queries [max_slots][hd], scores [max_slots][kScoreStride],
/// two [max_slots][kWarps] reduction arrays. Writes the chunk records only; merged by
/// attention_merge_kernel.
template <int kDimLanes, bool kLean, class T>
__global__ void __launch_bounds__(kFastThreads, kLean ? 2 : 1) attention_window_kernel(AttentionShape s, PagedPool pool,
                                                                    AttentionBatch b, int32_t rows_per_group,
                                                                    int32_t max_slots) {
  __shared__ int32_t grp_first[kStageMaxRows], grp_rows[kStageMaxRows], grp_task0[kStageMaxRows + 1];
  __shared__ int32_t grp_count;
  __shared__ const T* krow[C];
  __shared__ const T* vrow[C];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // The batch's groups and their tasks (metadata only: before waiting for the kernel before).
  if (warp == 0) {
    bool leader = false;
    int32_t nrows = 0, chunks = 0;
    if (lane < b.total_tokens) {
      const RowInfo r = row_info(b, lane);
      const int32_t local = lane - r.w.first_token;
      leader = local % rows_per_group == 0;
      nrows = min(rows_per_group, r.w.n - local);
      chunks = attention_chunks(r.keys + nrows - 1);  // the group's last row's
    }
    const unsigned leaders = __ballot_sync(detail::kFullMask, leader);
    int32_t incl = leader ? chunks : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t x = __shfl_up_sync(detail::kFullMask, incl, o);
      if (lane >= o) incl += x;
    }
    const int idx = __popc(leaders & ((1u << lane) - 1u));
    if (leader) {
      grp_first[idx] = lane;
      grp_rows[idx] = nrows;
      grp_task0[idx] = incl - chunks;
    }
    if (lane == 31) {
      grp_task0[__popc(leaders)] = incl;
      grp_count = __popc(leaders);
    }
  }
  __syncthreads();
  const int32_t groups = grp_count, tasks = grp_task0[groups];
  if (static_cast<int32_t>(blockIdx.y) >= tasks) return;
  detail::begin_dependent_kernel();

  const int32_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads, kvh = blockIdx.x;
  T* sv = reinterpret_cast<T*>(staged_values);  // [C][hd] of the storage type (16-byte rows)
  float* sq = reinterpret_cast<float*>(sv + C * hd);  // [max_slots][hd]
  float* sp = sq + max_slots * hd;    // [max_slots][kScoreStride]
  float* red = sp + max_slots * kScoreStride;  // [max_slots][kWarps]
  float* red2 = red + max_slots * kWarps;
  constexpr int kVec = kVecElems<T>;
  const int vecs = hd / kVec;

  for (int32_t task = blockIdx.y; task < tasks; task += gridDim.y) {
    int32_t gi = 0;
    while (gi + 1 < groups && grp_task0[gi + 1] <= task) ++gi;
    WindowTask t;
    t.chunk = task - grp_task0[gi];
    t.row0 = grp_first[gi];
    t.rows = grp_rows[gi];
    const AttentionWindowDesc w = b.windows[b.token_window[t.row0]];
    t.keys0 = w.prefix_len + (t.row0 - w.first_token) + 1;
    t.j0 = t.chunk * C;
    t.first = max(0, t.j0 - t.keys0 + 1);
    t.slots = (t.rows - t.first) * group;
    t.count_min = t.count(t.first);
    t.count_max = t.count(t.rows - 1);
    const int32_t slots = t.slots;

    // The slots' queries and the chunk's K/V row addresses (pool prefix or dense window).
    for (int i = tid; i < slots * hd; i += kFastThreads) {
      const int32_t sl = i / hd, d = i % hd;
      const int32_t row = t.row0 + t.first + sl / group;
      sq[i] = b.q[int64_t{row} * b.ld_q + (int64_t{kvh} * group + sl % group) * hd + d];
    }
    if (tid < t.count_max) {
      const int32_t j = t.j0 + tid;
      const int64_t head_off = int64_t{kvh} * hd;
      if (j < w.prefix_len) pool_rows(pool, w, j, head_off, krow[tid], vrow[tid]);
      else window_rows(b, w, j, head_off, krow[tid], vrow[tid]);
    }
    __syncthreads();
    for (int i = tid; i < t.count_max * vecs; i += kFastThreads)
      copy_async16(sv + i * kVec, vrow[i / vecs] + (i % vecs) * kVec);

    // Scores: a warp holds kKeys keys' K (lane l dims l, l+32, ...) and scores them against
    // 4 slots at a time: 32 dot products, each the chunk kernel's chain, then one
    // reduce-scatter; lane L stores key L / 4, slot L % 4. Lean (64 registers, two blocks
    // an SM): half the keys at a time, 16 dot products a reduce-scatter.
    constexpr int kKeys = C / kFastWarps;
    static_assert(kKeys * 4 == 32);
    constexpr int kPassKeys = kLean ? kKeys / 2 : kKeys;
#pragma unroll 1
    for (int pass = 0; pass < kKeys / kPassKeys; ++pass) {
      float kreg[kPassKeys][kDimLanes];
#pragma unroll
      for (int u = 0; u < kPassKeys; ++u) {
        const int jl = warp + (pass * kPassKeys + u) * kFastWarps;
#pragma unroll
        for (int d = 0; d < kDimLanes; ++d)
          kreg[u][d] = jl < t.count_max && lane + 32 * d < hd ? kv_float(krow[jl][lane + 32 * d]) : 0.0f;
      }
      for (int sl0 = 0; sl0 < slots; sl0 += 4) {
        float v[kPassKeys * 4];
#pragma unroll
        for (int s4 = 0; s4 < 4; ++s4) {
          const float* qs = sq + min(sl0 + s4, slots - 1) * hd;
          float qreg[kDimLanes];
#pragma unroll
          for (int d = 0; d < kDimLanes; ++d) qreg[d] = lane + 32 * d < hd ? qs[lane + 32 * d] : 0.0f;
#pragma unroll
          for (int u = 0; u < kPassKeys; ++u) {
            float dot = 0.0f;
#pragma unroll
            for (int d = 0; d < kDimLanes; ++d)
              if (lane + 32 * d < hd) dot = fmaf(qreg[d], kreg[u][d], dot);
            v[u * 4 + s4] = dot;
          }
        }
        const float dot = reduce_scatter(v, lane);
        const int index = kLean ? lane >> 1 : lane;  // lean: lanes L and L ^ 1 hold the same sum
        const int u = index >> 2, sl = sl0 + (index & 3), jl = warp + (pass * kPassKeys + u) * kFastWarps;
        if (sl < slots && (!kLean || (lane & 1) == 0))
          sp[sl * kScoreStride + jl] = jl < t.count(t.first + sl / group) ? dot * s.scale : -INFINITY;
      }
    }
    __syncthreads();

    // Softmax numerators: the chunk kernel's reductions per slot, thread (part, key) taking
    // the slots part, part + 4, ... for its key (key = tid % C as there).
    {
      const int key = tid % C, part = tid / C, kw = key / 32;
      constexpr int kParts = kFastThreads / C;
      for (int sl = part; sl < slots; sl += kParts) {
        const float m = detail::warp_max(sp[sl * kScoreStride + key]);
        if (lane == 0) red[sl * kWarps + kw] = m;
      }
      __syncthreads();
      for (int sl = part; sl < slots; sl += kParts) {
        float m = red[sl * kWarps];
#pragma unroll
        for (int w2 = 1; w2 < kWarps; ++w2) m = fmaxf(m, red[sl * kWarps + w2]);
        float* ps = sp + sl * kScoreStride + key;
        const float e = key < t.count(t.first + sl / group) ? expf(*ps - m) : 0.0f;
        *ps = e;
        const float sum = detail::warp_sum(e);
        if (lane == 0) red2[sl * kWarps + kw] = sum;
      }
    }
    copy_async_wait_all();  // this thread's copies; the barrier shows everyone's
    __syncthreads();
    if (tid < slots) {
      float m = red[tid * kWarps], sum = red2[tid * kWarps];
#pragma unroll
      for (int w2 = 1; w2 < kWarps; ++w2) {
        m = fmaxf(m, red[tid * kWarps + w2]);
        sum += red2[tid * kWarps + w2];
      }
      const int32_t row = t.row0 + t.first + tid / group;
      const int64_t h = int64_t{kvh} * group + tid % group;
      float* rec = b.workspace + ((int64_t{row} * s.num_heads + h) * b.max_chunks + t.chunk) * (hd + 2);
      rec[0] = m;
      rec[1] = sum;
    }

    // Value sums: thread (part, d) runs the chains of the slots part, part + parts, ...
    // each staged value read once for all of them, up to 8 at a time.
    const int span = hd < kFastThreads ? hd : kFastThreads;
    const int parts = kFastThreads / span, vpart = tid / span;
    if (vpart < parts && vpart < slots) {
      const int32_t mine = (slots - vpart + parts - 1) / parts;
      for (int d = tid % span; d < hd; d += span)
        for (int32_t i0 = 0; i0 < mine; i0 += 8) {
          int32_t slot[8];
#pragma unroll
          for (int i = 0; i < 8; ++i) slot[i] = vpart + (i0 + i) * parts;
          switch (min(8, mine - i0)) {
            case 1: window_value_chains<1>(s, b, t, kvh, group, d, slot, sv, sp); break;
            case 2: window_value_chains<2>(s, b, t, kvh, group, d, slot, sv, sp); break;
            case 3: window_value_chains<3>(s, b, t, kvh, group, d, slot, sv, sp); break;
            case 4: window_value_chains<4>(s, b, t, kvh, group, d, slot, sv, sp); break;
            case 5: window_value_chains<5>(s, b, t, kvh, group, d, slot, sv, sp); break;
            case 6: window_value_chains<6>(s, b, t, kvh, group, d, slot, sv, sp); break;
            case 7: window_value_chains<7>(s, b, t, kvh, group, d, slot, sv, sp); break;
            default: window_value_chains<8>(s, b, t, kvh, group, d, slot, sv, sp); break;
          }
        }
    }
    __syncthreads();  // the next task reuses the shared memory
  }
}

/// Merges the records of (row, kv head) = (blockIdx.y, blockIdx.x) written by the window
/// kernel: merge_row, as the chunk kernel's last block (scratch_floats of dynamic shared
/// memory for the chunk weights, 0: from the records).
__global__ void __launch_bounds__(kFastThreads) attention_merge_kernel(AttentionShape s, AttentionBatch b,
                                                                   uint16_t* outb, int32_t scratch_floats) {
  detail::begin_dependent_kernel();
  const int32_t kvh = blockIdx.x, row = blockIdx.y;
  merge_row(s, b, outb, row, kvh, attention_chunks(row_info(b, row).keys), staged_values, scratch_floats);
}

/// Opts `kernel` in to `bytes` of dynamic shared memory where its static shared memory
/// plus `bytes` pass the 48 KB a block gets without it (a launch past that fails with
/// "invalid argument": the demo target's 6-row windows, head_dim 64, group 3, asked 47,456
/// dynamic bytes beside the window kernel's static ones).
template <class Kernel>
cudaError_t allow_dynamic_shared(Kernel* kernel, size_t bytes) {
  cudaFuncAttributes attributes{};
  cudaError_t e = cudaFuncGetAttributes(&attributes, kernel);
  if (e != cudaSuccess || attributes.sharedSizeBytes + bytes <= 48 * 1024) return e;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

/// Whether a batch takes the window kernel: 2..kStageMaxRows rows whose values can be
/// staged, head_dim 33..128 (the instantiated lanes), and the switch on.
template <class T>
bool use_window_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b) {
  return b.total_tokens >= 2 && can_stage<T>(s, pool, b) && s.head_dim > 32 && s.head_dim <= 128 &&
         window_path_mode() != 0;
}

template <int kDimLanes, class T>
cudaError_t launch_window(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                          cudaStream_t stream) {
  const int32_t group = s.num_heads / s.num_kv_heads;
  const int32_t rows_per_group = std::min(b.total_tokens, std::max(1, kWindowMaxSlots / group));
  const int32_t max_slots = rows_per_group * group;
  const size_t bytes = size_t{C} * s.head_dim * sizeof(T) +
                       size_t(max_slots) * (s.head_dim + kScoreStride + 2 * kWarps) * sizeof(float);
  const int mode = window_path_mode();
  const bool lean = mode == 2 || (mode < 0 && int64_t{s.num_kv_heads} * b.max_chunks >= kLeanMinBlocks);
  auto* kernel = lean ? attention_window_kernel<kDimLanes, true, T> : attention_window_kernel<kDimLanes, false, T>;
  cudaError_t e = allow_dynamic_shared(kernel, bytes);
  if (e != cudaSuccess) return e;
  e = detail::launch_dependent_shared(kernel, dim3(s.num_kv_heads, b.max_chunks), dim3(kFastThreads), bytes, stream,
                                      true, s, pool, b, rows_per_group, max_slots);
  if (e != cudaSuccess) return e;
  // The merge's chunk weights in shared memory when they fit the default 48 KB.
  const int64_t weights = 2 * int64_t{group} * (b.max_chunks + 1);
  const int32_t scratch = weights * sizeof(float) <= 48 * 1024 ? static_cast<int32_t>(weights) : 0;
  e = allow_dynamic_shared(attention_merge_kernel, size_t(scratch) * sizeof(float));
  if (e != cudaSuccess) return e;
  return detail::launch_dependent_shared(attention_merge_kernel, dim3(s.num_kv_heads, b.total_tokens),
                                         dim3(kFastThreads), size_t(scratch) * sizeof(float), stream, true, s, b, outb,
                                         scratch);
}

template <int kDimLanes, class T>
cudaError_t launch_chunks(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, dim3 grid,
                          uint16_t* outb, cudaStream_t stream) {
  // Value chains per thread: the group's heads over the threads that share a dim.
  const int span = s.head_dim < kFastThreads ? s.head_dim : kFastThreads;
  const int per_thread = (s.num_heads / s.num_kv_heads + kFastThreads / span - 1) / (kFastThreads / span);
  auto* kernel = per_thread <= 1   ? attention_chunk_kernel<kDimLanes, 1, T>
                 : per_thread <= 2 ? attention_chunk_kernel<kDimLanes, 2, T>
                                   : attention_chunk_kernel<kDimLanes, kMaxGroup, T>;
  const bool stage = can_stage<T>(s, pool, b);
  // C x head_dim floats whatever the storage type: the values take half of it in BF16, and
  // the merging block's chunk weights all of it (the FP32 room: with BF16's half, rows of
  // over 1,024 chunks at group 4 fell back to the slow per-output merge, 1.4x a 128K step).
  const size_t staged_bytes = stage ? size_t{C} * s.head_dim * sizeof(float) : 0;
  if (const cudaError_t e = allow_dynamic_shared(kernel, staged_bytes); e != cudaSuccess) return e;
  return detail::launch_dependent_shared(kernel, grid, dim3(kFastThreads), staged_bytes, stream, true, s, pool, b,
                                         outb, stage);
}

template <class T>
cudaError_t attention_typed(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                            bool reference, cudaStream_t stream) {
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0 || s.num_heads / s.num_kv_heads > kMaxGroup ||
      s.head_dim <= 0 || s.head_dim > kMaxHeadDim || b.max_chunks <= 0 || b.max_chunks > 65535)
    return cudaErrorInvalidValue;
  if (b.total_tokens <= 0) return cudaSuccess;
  const dim3 grid(b.max_chunks, s.num_kv_heads, b.total_tokens);  // the reference kernel's
  const dim3 fast_grid(s.num_kv_heads, b.max_chunks, b.total_tokens);
  cudaError_t e = cudaSuccess;
  if (reference) {
    attention_chunk_reference_kernel<T><<<grid, kThreads, 0, stream>>>(s, pool, b);
    e = cudaGetLastError();
  } else if (use_window_path<T>(s, pool, b)) {
    // A verify window (or a few): each chunk's K/V loaded once for all its rows, merged by a
    // second kernel (the counters stay zero).
    return s.head_dim <= 64 ? launch_window<2, T>(s, pool, b, outb, stream)
                            : launch_window<4, T>(s, pool, b, outb, stream);
  } else if (s.head_dim <= 32) {
    e = launch_chunks<1, T>(s, pool, b, fast_grid, outb, stream);
  } else if (s.head_dim <= 64) {
    e = launch_chunks<2, T>(s, pool, b, fast_grid, outb, stream);
  } else if (s.head_dim <= 128) {
    e = launch_chunks<4, T>(s, pool, b, fast_grid, outb, stream);
  } else {
    e = launch_chunks<8, T>(s, pool, b, fast_grid, outb, stream);
  }
  if (e != cudaSuccess || (!reference && b.counters != nullptr)) return e;  // merged by the chunk kernel
  return detail::launch_dependent(attention_combine_kernel, dim3(s.num_heads, b.total_tokens), dim3(kThreads), stream,
                                  true, s, b, outb);
}

/// The kernels of the pool's storage type (attention.h: f32 or bf16).
cudaError_t attention_impl(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                           bool reference, cudaStream_t stream) {
  switch (pool.dtype) {
    case DType::f32: return attention_typed<float>(s, pool, b, outb, reference, stream);
    case DType::bf16: return attention_typed<uint16_t>(s, pool, b, outb, reference, stream);
    default: return cudaErrorInvalidValue;
  }
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
