// The chunk kernels (attention_paths.h): a block per (kv head, chunk of 128 keys, row), the
// first version kept as the bitwise reference, and the forward's version whose last block
// per (row, kv head) merges the row (attention_device.cuh's merge_row).
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_paths.h"
#include "kernels/cuda/pdl.cuh"

namespace specpipe::cuda::attention_detail {
namespace {

/// Shared memory of a chunk block: the group's queries, the scores (then numerators),
/// each key's K and V row addresses, reduction scratch, whether this block merges; for
/// groups of up to kGroups query heads (the three-blocks build: 4, so three blocks fit).
template <int kDimLanes, class T, int kGroups = kMaxGroup>
struct ChunkShared {
  float q[kGroups * 32 * kDimLanes];
  alignas(16) float p[kGroups][C];  // 16-byte rows: the lean value chains read 4 keys at once
  const T* krow[C];
  const T* vrow[C];
  float red[kGroups][kWarps];
  float red2[kGroups][kWarps];
  bool merges;
};

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

/// The addresses of the chunk's K/V rows (pool prefix or dense window) into shared memory
/// (seen by the block after a barrier).
template <int kDimLanes, class T, int kGroups>
__device__ inline void load_chunk_rows(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                       ChunkShared<kDimLanes, T, kGroups>& sh, ChunkTask& task) {
  const int32_t kvh = task.kvh, chunk = task.chunk;
  const int32_t hd = s.head_dim;
  task.hd = hd;
  task.group = s.num_heads / s.num_kv_heads;
  task.j0 = chunk * C;
  task.count = min(C, task.r.keys - task.j0);
  const int tid = threadIdx.x;
  if (tid < task.count) {
    const int32_t j = task.j0 + tid;
    const int64_t head_off = int64_t{kvh} * hd;
    const AttentionWindowDesc& w = task.r.w;
    if (j < w.prefix_len) pool_rows(pool, w, j, head_off, sh.krow[tid], sh.vrow[tid]);
    else window_rows(b, w, j, head_off, sh.krow[tid], sh.vrow[tid]);
  }
}

/// The group's queries into shared memory (seen by the block after a barrier).
template <int kDimLanes, class T, int kGroups>
__device__ inline void load_chunk_queries(const AttentionBatch& b, ChunkShared<kDimLanes, T, kGroups>& sh,
                                          const ChunkTask& task) {
  const int32_t hd = task.hd, group = task.group;
  const float* q = b.q + int64_t{task.row} * b.ld_q + int64_t{task.kvh} * group * hd;
  for (int t = threadIdx.x; t < group * hd; t += blockDim.x) sh.q[t] = q[t];
}

/// Loads the group's queries and the addresses of the chunk's K/V rows into shared memory.
template <int kDimLanes, class T, int kGroups>
__device__ inline void load_chunk(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                  ChunkShared<kDimLanes, T, kGroups>& sh, ChunkTask& task) {
  load_chunk_rows(s, pool, b, sh, task);
  load_chunk_queries(b, sh, task);
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

/// Variant bit 8's scores: the chunk kernel's, as the window kernel's lean build computes
/// them. A warp takes its kKeys keys (warp, warp + kFastWarps, ...) four at a time; lane l
/// holds dims l, l+32, ... of each, pass_dots runs the same per-lane FMA chains for the 4
/// keys x 4 heads (heads past the group repeat the last), and one reduce-scatter (15
/// halving shuffles and the butterfly's last) sums all 16 as warp_sum does (the same xor
/// pairs, a + b == b + a): lanes L and L ^ 1 hold key L / 8's score for head (L / 2) % 4,
/// where the plain build spends a 5-shuffle butterfly on every (key, head).
constexpr int kLeanPassKeys = 4;
constexpr int kLeanPasses = C / kFastWarps / kLeanPassKeys;
static_assert(C / kFastWarps % kLeanPassKeys == 0);

/// Keys of the lean score passes [first, first + kPasses) of this thread (lane l's dims l,
/// l + 32, ... of keys warp, warp + kFastWarps, ...) into registers. kHd: the head_dim when
/// known at compile time (0: s.head_dim), so the dims' bounds tests fold; with it a pass's
/// keys are taken in the lane-permuted order lean_score_pass's reduce_scatter_xor wants
/// (register u holds key u ^ kx, kx = (lane >> 3) & 3).
template <int kPasses, int kDimLanes, int kHd = 0, class KeyRow>
__device__ inline void lean_load_keys(const AttentionShape& s, int32_t count, KeyRow krow_of, int first,
                                      float (&keys)[kPasses][kLeanPassKeys][kDimLanes]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t hd = kHd != 0 ? kHd : s.head_dim;
  const int kx = kHd != 0 ? (lane >> 3) & 3 : 0;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass)
#pragma unroll
    for (int u = 0; u < kLeanPassKeys; ++u) {
      const int jl = warp + ((first + pass) * kLeanPassKeys + (u ^ kx)) * kFastWarps;
#pragma unroll
      for (int t = 0; t < kDimLanes; ++t)
        keys[pass][u][t] = jl < count && lane + 32 * t < hd ? kv_float(krow_of(jl)[lane + 32 * t]) : 0.0f;
    }
}

/// One pass of the scores from its keys in registers. kHd, kGroup: head_dim and the query
/// heads per kv head when known at compile time (0: from s), so the queries' addresses and
/// the heads' clamps fold; with them the keys (lean_load_keys) and heads (sx) come in the
/// lane-permuted order of reduce_scatter_xor, which sums as reduce_scatter does without
/// its 30 selects a pass (the window kernel's paired build): the same arithmetic.
template <int kDimLanes, int kHd = 0, int kGroup = 0, class Shared>
__device__ inline void lean_score_pass(const AttentionShape& s, Shared& sh, int32_t count, int pass,
                                       const float (&kreg)[kLeanPassKeys][kDimLanes]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t hd = kHd != 0 ? kHd : s.head_dim, group = kGroup != 0 ? kGroup : s.num_heads / s.num_kv_heads;
  float v[kLeanPassKeys * 4];
  pass_dots(sh.q, 0, group, hd, lane, kreg, v, kHd != 0 ? (lane >> 1) & 3 : 0);
  const float dot = kHd != 0 ? reduce_scatter_xor(v) : reduce_scatter(v, lane);
  const int index = lane >> 1, g = index & 3, jl = warp + (pass * kLeanPassKeys + (index >> 2)) * kFastWarps;
  if ((lane & 1) == 0 && g < group) sh.p[g][jl] = jl < count ? dot * s.scale : -INFINITY;
}

/// Steps [j0, end) of the lean value chains of dims d, d + 1 for one or two heads
/// (numerators p0, p1; a[part][dim]): key jl's staged values at rows + (jl - j0) * hd, each
/// chain fmaf(p, v, acc) in ascending key order, 4 keys at a time (16-byte numerator loads;
/// j0 a multiple of 4) then one at a time.
template <class T>
__device__ inline void value_span(const T* rows, int32_t j0, int32_t end, int32_t hd, int d, const float* p0,
                                  const float* p1, bool two, float (&a)[2][2]) {
  int32_t jl = j0;
#pragma unroll 2
  for (; jl + 4 <= end; jl += 4) {
    float2 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = value_pair(rows + (jl - j0 + u) * hd + d);
    pair_steps(*reinterpret_cast<const float4*>(p0 + jl), v, a[0][0], a[0][1]);
    if (two) pair_steps(*reinterpret_cast<const float4*>(p1 + jl), v, a[1][0], a[1][1]);
  }
  for (; jl < end; ++jl) {
    const float2 v = value_pair(rows + (jl - j0) * hd + d);
    a[0][0] = fmaf(p0[jl], v.x, a[0][0]);
    a[0][1] = fmaf(p0[jl], v.y, a[0][1]);
    if (two) {
      a[1][0] = fmaf(p1[jl], v.x, a[1][0]);
      a[1][1] = fmaf(p1[jl], v.y, a[1][1]);
    }
  }
}

/// The chunk kernels' softmax numerators for every head of the group at once:
/// block_max / block_sum's orders (a butterfly per warp, then the warps in order) with one
/// barrier inside; thread tid < C owns key tid, as in the reference's 128-thread block.
/// Leaves each warp's maxima in sh.red and sums in sh.red2 (seen after a barrier).
template <class Shared>
__device__ inline void chunk_numerators(Shared& sh, int32_t group, int32_t count) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
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
}

/// After chunk_numerators and a barrier: thread g < group writes head g's chunk max and
/// sum of exponentials (the warps' in order) to its record.
template <class Shared>
__device__ inline void store_max_sum(const AttentionShape& s, const AttentionBatch& b, const ChunkTask& task,
                                     const Shared& sh) {
  const int tid = threadIdx.x;
  if (tid >= task.group) return;
  float m = sh.red[tid][0], sum = sh.red2[tid][0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) {
    m = fmaxf(m, sh.red[tid][w]);
    sum += sh.red2[tid][w];
  }
  workspace_at(s, b, task, tid)[0] = m;
  workspace_at(s, b, task, tid)[1] = sum;
}

/// The lean value chains' results into the chunk records of heads g0 (and g1 when `two`).
__device__ inline void store_value_sums(const AttentionShape& s, const AttentionBatch& b, const ChunkTask& task,
                                        int g0, int g1, bool two, int d, const float (&a)[2][2]) {
  float* r0 = workspace_at(s, b, task, g0) + 2 + d;
  r0[0] = a[0][0];
  r0[1] = a[0][1];
  if (two) {
    float* r1 = workspace_at(s, b, task, g1) + 2 + d;
    r1[0] = a[1][0];
    r1[1] = a[1][1];
  }
}

/// Variant bit 8's value sums: thread (pair, part) < hd / 2 x min(group, 2) runs the chains
/// of dims 2 pair, 2 pair + 1 for heads part and part + 2 (up to 4 chains), each chain
/// fmaf(p, v, acc) over the chunk's keys in ascending order as value_sums', reading each
/// staged value pair once for all of them and the numerators 4 keys at a time (16-byte
/// loads): about a quarter of the plain build's shared-memory loads. Requires staged
/// values, an even head_dim and a group of at most 4.
template <class Shared, class T>
__device__ inline void lean_value_sums(const AttentionShape& s, const AttentionBatch& b, const ChunkTask& task,
                                       Shared& sh, const T* staged) {
  const int32_t hd = task.hd, group = task.group, count = task.count;
  const int pairs = hd / 2, hparts = group < 2 ? group : 2;
  const int tid = threadIdx.x;
  if (tid >= pairs * hparts) return;
  const int d = 2 * (tid % pairs), g0 = tid / pairs, g1 = g0 + 2;
  const bool two = g1 < group;
  float a[2][2] = {};  // a[head part][dim]
  value_span(staged, 0, count, hd, d, sh.p[g0], sh.p[two ? g1 : g0], two, a);
  store_value_sums(s, b, task, g0, g1, two, d, a);
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
/// With stage_keys (variant bit 2, BF16 with stage) the keys are copied to shared memory
/// too, in 16-byte pieces (the FP32-sized staging room's second half), and the scores read
/// the same bits from there instead of 2 bytes a lane from global memory. kMinBlocks 2
/// (variant bit 4): built for two blocks an SM (at most 64 registers a thread); 0: no
/// minimum given, as the kernel was before (__launch_bounds__(n, 0) is __launch_bounds__(n):
/// an explicit 1 let ptxas take 80-88 registers where it had taken 40-64, one block an SM).
/// kLean (variant bit 8; kMinBlocks 2 or 3, groups up to 4, values staged): the same chains
/// with fewer shared-memory and shuffle instructions, lean_load_keys / lean_score_pass and lean_value_sums above.
/// kMinBlocks 3 (variant bit 16 with bit 8): three blocks an SM, at most 40 registers a
/// thread and the static arrays sized for groups of 4.
template <int kDimLanes, int kHeadsPerThread, class T, int kMinBlocks = 0, bool kLean = false>
__global__ void __launch_bounds__(kFastThreads, kMinBlocks) attention_chunk_kernel(AttentionShape s, PagedPool pool,
                                                                   AttentionBatch b, uint16_t* outb, bool stage,
                                                                   bool stage_keys) {
  // Grid (kv head, chunk, row): a graph launches the pool's capacity of chunks; the rows'
  // real chunks come first in launch order, and the blocks past a row's keys leave
  // before waiting for the kernel before, so over a long pool they do not hold the slots
  // (2 blocks an SM when values are staged) that real blocks wait for. (No change at the
  // 8B shape's context 512 on an H100: 1.297x vs 1.298x in one call.)
  ChunkTask task;
  if (!chunk_task(b, blockIdx.z, blockIdx.x, blockIdx.y, task)) return;
  // A chunk of pool keys all written before this forward began (b.prefix_settled; not
  // the layer ring's, whose loads the stream waits for) is located and staged before
  // waiting for the kernel before: that kernel writes the window's rows and q, not these.
  // Only q waits. The same loads, so the same bits.
  const bool early = stage && b.prefix_settled && pool.ring_k == nullptr &&
                     min((task.chunk + 1) * C, task.r.keys) <= task.r.w.prefix_len;
  detail::allow_dependent_launch();
  __shared__ ChunkShared<kDimLanes, T, kMinBlocks == 3 ? 4 : kMaxGroup> sh;
  if (early) {
    load_chunk_rows(s, pool, b, sh, task);
    __syncthreads();
  } else {
    detail::wait_for_prerequisite_grid();
    load_chunk(s, pool, b, sh, task);
  }
  const int32_t hd = task.hd, group = task.group, count = task.count;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, tid = threadIdx.x;
  T* const staged = reinterpret_cast<T*>(staged_values);
  T* const staged_keys = staged + C * hd;  // stage_keys: BF16 only, the room's second half
  if (stage) {
    constexpr int kVec = kVecElems<T>;
    const int vecs = hd / kVec;  // stage requires head_dim % kVec == 0 and 16-byte aligned rows
    if (stage_keys) {
      for (int i = tid; i < count * vecs; i += kFastThreads)
        copy_async16(staged_keys + i * kVec, sh.krow[i / vecs] + (i % vecs) * kVec);
      copy_async_commit();
    }
    for (int i = tid; i < count * vecs; i += kFastThreads)
      copy_async16(staged + i * kVec, sh.vrow[i / vecs] + (i % vecs) * kVec);
    if (stage_keys) {
      copy_async_commit();
      copy_async_wait_prior<1>();  // the keys; the values may still be on their way
      __syncthreads();
    }
  }
  const auto krow_of = [&](int jl) -> const T* {
    if constexpr (sizeof(T) == 2) return stage_keys ? staged_keys + jl * hd : sh.krow[jl];
    else return sh.krow[jl];  // FP32 keys are never staged (the room holds the values only)
  };
  // The two-blocks lean build loads every pass's keys now, before the queries (a settled
  // chunk: before waiting for the kernel before), so their latency overlaps the queries'
  // and both passes' loads are in flight together; the same elements as a pass at a time
  // after the queries (the three-blocks build, whose 40 registers would spill them).
  constexpr bool kKeysEarly = kLean && kMinBlocks == 2;
  [[maybe_unused]] float lean_keys[kLeanPasses][kLeanPassKeys][kDimLanes];
  if constexpr (kKeysEarly) lean_load_keys<kLeanPasses, kDimLanes>(s, count, krow_of, 0, lean_keys);
  if (early) {
    detail::wait_for_prerequisite_grid();
    load_chunk_queries(b, sh, task);
    __syncthreads();
  }

  // Scores, as the reference: a warp per key, lane l holding dims l, l+32, ..., one FMA
  // chain then a fixed butterfly; a warp takes kKeys keys at a time so their loads are
  // in flight together and their butterflies interleave.
  constexpr int kKeys = C / kFastWarps;  // one pass: every warp's keys in flight together
  if constexpr (kKeysEarly) {
#pragma unroll
    for (int pass = 0; pass < kLeanPasses; ++pass) lean_score_pass<kDimLanes>(s, sh, count, pass, lean_keys[pass]);
  } else if constexpr (kLean) {
#pragma unroll 1
    for (int pass = 0; pass < kLeanPasses; ++pass) {
      float kreg[1][kLeanPassKeys][kDimLanes];
      lean_load_keys<1, kDimLanes>(s, count, krow_of, pass, kreg);
      lean_score_pass<kDimLanes>(s, sh, count, pass, kreg[0]);
    }
  } else {
    for (int base = warp; base < C; base += kKeys * kFastWarps) {
      float kreg[kKeys][kDimLanes];
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const int jl = base + u * kFastWarps;
#pragma unroll
        for (int t = 0; t < kDimLanes; ++t)
          kreg[u][t] = jl < count && lane + 32 * t < hd ? kv_float(krow_of(jl)[lane + 32 * t]) : 0.0f;
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
  }
  __syncthreads();

  // Softmax numerators, every head of the group at once, two barriers in all instead of
  // four per head.
  chunk_numerators(sh, group, count);
  if (stage) copy_async_wait_all();  // this thread's copies; the barrier shows everyone's
  __syncthreads();
  store_max_sum(s, b, task, sh);

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
  if constexpr (kLean) {
    lean_value_sums(s, b, task, sh, staged);
  } else if (gpart < parts) {
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

/// Variant bit 1024: the streaming build of the two-blocks lean kernel. Keys per ring tile
/// (two tiles a chunk for the keys, two for the values): a lean score pass's keys (warp,
/// warp + kFastWarps, ... four at a time) are 64 consecutive keys, so a tile is one pass.
constexpr int kTileKeys = C / kLeanPasses;
/// Ring slots: two (a 64 KB ring for FP32, one tile in flight while the other is used).
/// Three (96 KB) kept more in flight and was faster alone, but two such blocks an SM need
/// the largest shared-memory carveout, under which the step's other kernels run slower
/// (kernels/cuda/README.md "Seventeenth session, chunk").
constexpr int kRingSlots = 2;
/// BF16 K/V (bit 256 only): 16 KB tiles, so four slots hold the FP32 ring's 64 KB and keep
/// three tiles in flight while one is used.
template <class T>
constexpr int kRingSlotsOf = sizeof(T) == 4 ? kRingSlots : 4;
static_assert(kLeanPasses == 2 && kTileKeys == 64);
/// Variant bit 2048 (kAttentionStreamWide, with bit 256's build): BF16 K/V in 128-key tiles
/// (a chunk's keys, then its values: 32 KB each) through a two-slot ring, the FP32 ring's 64
/// KB and shape, so a chunk waits at two tile barriers instead of four; FP32 keeps its
/// 64-key tiles (32 KB already). kWide false: the tiles and slots above.
template <class T, bool kWide>
constexpr int kStreamTileKeys = kWide && sizeof(T) == 2 ? C : kTileKeys;
template <class T, bool kWide>
constexpr int kStreamSlots = kWide && sizeof(T) == 2 ? 2 : kRingSlotsOf<T>;

/// Shared memory of a streaming block besides its ring: the group's queries (groups up to
/// 4), the scores (then numerators), the K and V row addresses of two chunks (the one
/// being copied and the next), the softmax's reduction scratch.
template <int kDimLanes, class T>
struct StreamShared {
  float q[4 * 32 * kDimLanes];
  alignas(16) float p[4][C];
  const T* krow[2][C];
  const T* vrow[2][C];
  float red[4][kWarps];
  float red2[4][kWarps];
};

/// The K/V row addresses of chunk `chunk` of the task's row into rows buffer `buf`, keys
/// tid - first of the chunk for threads [first, first + C).
template <int kDimLanes, class T>
__device__ inline void stream_rows(const PagedPool& pool, const AttentionBatch& b, StreamShared<kDimLanes, T>& sh,
                                   const RowInfo& r, int32_t kvh, int32_t hd, int32_t chunk, int buf, int first) {
  const int k = static_cast<int>(threadIdx.x) - first;
  if (k < 0 || k >= C) return;
  const int32_t j = chunk * C + k;
  if (j >= r.keys) return;
  const int64_t head_off = int64_t{kvh} * hd;
  if (j < r.w.prefix_len) pool_rows(pool, r.w, j, head_off, sh.krow[buf][k], sh.vrow[buf][k]);
  else window_rows(b, r.w, j, head_off, sh.krow[buf][k], sh.vrow[buf][k]);
}

/// Steps [j0, end) of the value chains of dim d for heads with numerators p0 and p1 (bit
/// 2048's value threads: one dim x two heads each, 256 threads, where lean_value_sums'
/// 128 threads run two dims x two heads): key jl's staged values at rows + (jl - j0) *
/// kHd, each chain fmaf(p, v, acc) in ascending key order, 4 keys at a time (16-byte
/// numerator loads; j0 a multiple of 4) then one at a time: each chain's steps as
/// value_span's, so the same bits.
template <int kHd, class T>
__device__ inline void value_span_dim(const T* rows, int32_t j0, int32_t end, int d, const float* p0,
                                      const float* p1, float& a0, float& a1) {
  int32_t jl = j0;
#pragma unroll 2
  for (; jl + 4 <= end; jl += 4) {
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = kv_float(rows[(jl - j0 + u) * kHd + d]);
    const float4 q0 = *reinterpret_cast<const float4*>(p0 + jl);
    const float4 q1 = *reinterpret_cast<const float4*>(p1 + jl);
    const float w0[4] = {q0.x, q0.y, q0.z, q0.w}, w1[4] = {q1.x, q1.y, q1.z, q1.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      a0 = fmaf(w0[u], v[u], a0);
      a1 = fmaf(w1[u], v[u], a1);
    }
  }
  for (; jl < end; ++jl) {
    const float v = kv_float(rows[(jl - j0) * kHd + d]);
    a0 = fmaf(p0[jl], v, a0);
    a1 = fmaf(p1[jl], v, a1);
  }
}

/// The streaming chunk kernel (variant bit 1024 with the lean two-blocks build's shapes):
/// grid (kv head, y < Y, row), block y of (row, kv head) takes the row's chunks y, y + Y,
/// ... (Y from the host: the grid one wave of two blocks an SM where the chunks allow).
/// Each chunk is the lean build's arithmetic in its order (lean_score_pass on the same
/// key floats, the same softmax, each value chain fmaf over the chunk's keys in ascending
/// order) and writes the same record, so the bits are the lean build's. What differs is
/// where the keys and values come from: a chunk's four 64-key tiles (keys 0..63, keys
/// 64..127, values 0..63, values 64..127), chunk after chunk, stream through a ring of
/// kRingSlots shared-memory slots by cp.async, the next tile in flight while one is scored
/// or summed, so the block's loads do not stop while it computes (the lean build loads its
/// chunk's 128 KB at once and then computes with nothing in flight). The head merge (bit
/// 1) merges the records; the block has no counters.
///
/// kHd, kGroup (variant bit 256; 0: read from s): the kernel built for one head_dim (32 x
/// kDimLanes) and one GQA group (2 or 4), the same arithmetic in the same order. ncu of
/// the generic build at 128K (8B shape) found 58% of its issue slots busy and IMAD, ISETP,
/// IADD3 and LEA over 40% of its instructions against 14% FFMA: each 16-byte copy a
/// division by the row's pieces, the score passes' query addresses and dims' bounds
/// recomputed from the runtime head_dim and group, the value chains' second head tested in
/// the loop. Built for the shape, those fold to shifts and immediate offsets.
///
/// kWide (variant bit 2048, with bit 256's shape): the value chains on 8 warps (256 threads,
/// one dim x two heads each: value_span_dim) instead of 4 (two dims x two heads), while the
/// other warps would wait at the tile barrier; and BF16 K/V in 128-key tiles
/// (kStreamTileKeys): both passes of a chunk's scores from one key tile, its value chains
/// from one value tile; a whole tile's copies at a fixed trip count. The same chains in the
/// same order: the same bits.
template <int kDimLanes, class T, int kHd = 0, int kGroup = 0, bool kWide = false>
__global__ void __launch_bounds__(kFastThreads, 2)
    attention_stream_kernel(AttentionShape s, PagedPool pool, AttentionBatch b, int32_t per_row) {
  ChunkTask task;
  task.row = blockIdx.z;
  task.kvh = blockIdx.x;
  task.r = row_info(b, task.row);
  const int32_t y = blockIdx.y, chunks = attention_chunks(task.r.keys);
  if (y >= chunks) return;
  const int32_t mine = (chunks - y + per_row - 1) / per_row;  // chunks y, y + per_row, ...
  static_assert(kHd == 0 || (kHd == 32 * kDimLanes && kGroup == 4));
  static_assert(!kWide || kHd == 128);
  task.hd = kHd != 0 ? kHd : s.head_dim;
  task.group = kGroup != 0 ? kGroup : s.num_heads / s.num_kv_heads;
  const int32_t hd = task.hd, group = task.group;
  const int tid = threadIdx.x;
  constexpr int kVec = kVecElems<T>;
  constexpr int kSlots = kStreamSlots<T, kWide>;
  constexpr int kTile = kStreamTileKeys<T, kWide>;  // keys a tile
  constexpr int kHalves = C / kTile;                 // key tiles a chunk (as many value tiles)
  constexpr int kParts = 2 * kHalves;                // tiles a chunk
  const int vecs = hd / kVec;  // 16-byte pieces a key row
  const int tile_elems = kTile * hd;
  T* const ring = reinterpret_cast<T*>(staged_values);
  __shared__ StreamShared<kDimLanes, T> sh;
  const auto chunk_of = [&](int32_t i) { return y + i * per_row; };
  const auto count_of = [&](int32_t i) { return min(C, task.r.keys - chunk_of(i) * C); };
  // Tile t: chunk t / kParts of this block, part t % kParts (64-key tiles: keys low, keys
  // high, values low, values high; 128-key tiles: keys, values), into ring slot t % kSlots;
  // one commit group a tile, empty past the last, so a wait for tile t leaves exactly the
  // kSlots - 2 later tiles' groups in flight.
  const auto issue = [&](int32_t t) {
    const int32_t i = t / kParts;
    if (i < mine) {
      const int part = t % kParts, half = part % kHalves;
      const int n = min(kTile, count_of(i) - half * kTile);
      const T* const* rows = (part < kHalves ? sh.krow[i & 1] : sh.vrow[i & 1]) + half * kTile;
      T* const to = ring + (t % kSlots) * tile_elems;
      bool whole = false;
      if constexpr (kWide) {
        // A whole tile: a thread's kPer copies at a fixed trip count, its piece of a row and
        // its first key found once (the same copies as the loop below).
        constexpr int kRowVecs = kHd / kVec, kPer = kTile * kRowVecs / kFastThreads;
        static_assert(kTile * kRowVecs % kFastThreads == 0);
        whole = n == kTile;
        if (whole) {
          const int key0 = tid / kRowVecs, piece = (tid % kRowVecs) * kVec;
#pragma unroll
          for (int k = 0; k < kPer; ++k)
            copy_async16(to + (tid + k * kFastThreads) * kVec, rows[key0 + k * (kFastThreads / kRowVecs)] + piece);
        }
      }
      if (!whole)
        for (int e = tid; e < n * vecs; e += kFastThreads) copy_async16(to + e * kVec, rows[e / vecs] + (e % vecs) * kVec);
    }
    copy_async_commit();
  };
  // Settled pool keys (as the lean build's early chunks) are located and their first
  // tiles copied before waiting for the kernel before; otherwise everything after it.
  const bool early = b.prefix_settled && pool.ring_k == nullptr &&
                     min((chunk_of(0) + 1) * C, task.r.keys) <= task.r.w.prefix_len;
  detail::allow_dependent_launch();
  if (!early) detail::wait_for_prerequisite_grid();
  stream_rows(pool, b, sh, task.r, task.kvh, hd, chunk_of(0), 0, 0);
  __syncthreads();
#pragma unroll
  for (int t = 0; t + 1 < kSlots; ++t) issue(t);
  if (early) detail::wait_for_prerequisite_grid();
  if (mine > 1) stream_rows(pool, b, sh, task.r, task.kvh, hd, chunk_of(1), 1, C);
  {
    const float* q = b.q + int64_t{task.row} * b.ld_q + int64_t{task.kvh} * group * hd;
    for (int t = tid; t < group * hd; t += kFastThreads) sh.q[t] = q[t];
  }
  // Waits for tile t (this thread's copies, then everyone's through the barrier, which
  // also shows that every thread is done with tile t - 1), then refills tile t - 1's slot
  // with tile t + kSlots - 1.
  const auto next_tile = [&](int32_t t) -> const T* {
    copy_async_wait_prior<kSlots - 2>();
    __syncthreads();
    issue(t + kSlots - 1);
    return ring + (t % kSlots) * tile_elems;
  };
  const int pairs = hd / 2, hparts = group < 2 ? group : 2;
  // kWide: thread tid < 2 hd runs dim tid % hd of heads tid / hd and tid / hd + 2.
  const bool sums = kWide ? tid < 2 * kHd : tid < pairs * hparts;
  const int d = kWide ? tid % kHd : 2 * (tid % pairs), g0 = kWide ? tid / kHd : tid / pairs, g1 = g0 + 2;
  // A summing thread's second head: every one's with a group of 4.
  const bool two = kGroup == 4 || g1 < group;
  for (int32_t i = 0; i < mine; ++i) {
    task.chunk = chunk_of(i);
    const int32_t count = count_of(i);
    // Scores: pass `half` of the lean build from its key tile (128-key tiles: both passes
    // from the chunk's one key tile).
    const T* tile = nullptr;
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      if (kHalves == 2 || half == 0) tile = next_tile(kParts * i + half);
      const int32_t first = kHalves == 2 ? half * kTile : 0;  // the tile's first key
      const auto krow_of = [&](int jl) -> const T* { return tile + (jl - first) * hd; };
      float kreg[1][kLeanPassKeys][kDimLanes];
      lean_load_keys<1, kDimLanes, kHd>(s, count, krow_of, half, kreg);
      lean_score_pass<kDimLanes, kHd, kGroup>(s, sh, count, half, kreg[0]);
    }
    __syncthreads();
    chunk_numerators(sh, group, count);
    // Value sums: lean_value_sums' chains over the two value tiles, keys in ascending order.
    float a[2][2] = {};  // a[head part][dim] (kWide: a[head part][0])
    const float* p0 = sh.p[g0 < group ? g0 : 0];
    const float* p1 = sh.p[g1 < group ? g1 : (g0 < group ? g0 : 0)];
#pragma unroll 1
    for (int half = 0; half < kHalves; ++half) {
      const T* const vtile = next_tile(kParts * i + kHalves + half);  // its barrier also shows the numerators
      if (half == 0) store_max_sum(s, b, task, sh);
      // Chunk i + 2's row addresses, by threads the value sums leave idle, into chunk i's
      // rows buffer (its last tile went out at the latest at this tile's barrier).
      if (half == kHalves - 1 && i + 2 < mine)
        stream_rows(pool, b, sh, task.r, task.kvh, hd, chunk_of(i + 2), i & 1, kFastThreads - C);
      if (!sums) continue;
      const int32_t j0 = half * kTile;
      if constexpr (kWide) value_span_dim<kHd>(vtile, j0, min(count, j0 + kTile), d, p0, p1, a[0][0], a[1][0]);
      else value_span(vtile, j0, min(count, j0 + kTile), hd, d, p0, p1, two, a);
    }
    if (sums) {
      if constexpr (kWide) {
        workspace_at(s, b, task, g0)[2 + d] = a[0][0];
        workspace_at(s, b, task, g1)[2 + d] = a[1][0];
      } else {
        store_value_sums(s, b, task, g0, g1, two, d, a);
      }
    }
  }
  copy_async_wait_all();  // the empty groups past the last tile
}

/// How many blocks of `kernel` (kFastThreads threads, `shared_bytes` of dynamic shared
/// memory) the current device holds at once: its SMs x the blocks an SM holds (at least 1),
/// asked once per (device, kernel, bytes), so an eager forward does not ask at every layer.
template <class Kernel>
cudaError_t resident_blocks(Kernel* kernel, size_t shared_bytes, int64_t& blocks) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, size_t>, int64_t> known;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  const std::lock_guard lock(mutex);
  const auto key = std::make_tuple(device, reinterpret_cast<const void*>(kernel), shared_bytes);
  if (const auto it = known.find(key); it != known.end()) {
    blocks = it->second;
    return cudaSuccess;
  }
  int sms = 0, per_sm = 0;
  if (const cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); e != cudaSuccess)
    return e;
  if (const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kFastThreads, shared_bytes);
      e != cudaSuccess)
    return e;
  blocks = int64_t{sms} * std::max(per_sm, 1);
  known[key] = blocks;
  return cudaSuccess;
}

/// Launches the streaming kernel (variant bit 1024): Y blocks a (row, kv head), Y the
/// fewest that make the grid one wave of resident blocks, so each block takes about the
/// same number of chunks. Sets `taken` false (nothing launched) where a block would get
/// one chunk (the pool's capacity within a wave: short contexts).
template <int kDimLanes, class T>
cudaError_t launch_stream(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                          cudaStream_t stream, bool& taken) {
  taken = false;
  auto* kernel = attention_stream_kernel<kDimLanes, T>;
  size_t ring_bytes = size_t{kRingSlotsOf<T>} * kTileKeys * s.head_dim * sizeof(T);
  // Variant bit 256: the build for the 8B and 4B shapes (head_dim 128, groups of 4), the one
  // measured; FP32 and BF16 K/V. Bit 2048 with it: its wide build (value chains on 8 warps,
  // BF16 in 128-key tiles).
  if constexpr (kDimLanes == 4) {
    const int variant = attention_variant();
    if ((variant & kAttentionStreamTight) != 0 && s.head_dim == 128 && s.num_heads == 4 * s.num_kv_heads) {
      kernel = attention_stream_kernel<kDimLanes, T, 128, 4>;
      if ((variant & kAttentionStreamWide) != 0) {
        kernel = attention_stream_kernel<kDimLanes, T, 128, 4, true>;
        ring_bytes = size_t{kStreamSlots<T, true>} * kStreamTileKeys<T, true> * s.head_dim * sizeof(T);
      }
    }
  }
  if (const cudaError_t e = allow_dynamic_shared(kernel, ring_bytes); e != cudaSuccess) return e;
  int64_t slots = 0;
  if (const cudaError_t e = resident_blocks(kernel, ring_bytes, slots); e != cudaSuccess) return e;
  const int64_t pairs = int64_t{s.num_kv_heads} * b.total_tokens;
  const int32_t most = static_cast<int32_t>(std::max<int64_t>(1, slots / pairs));  // blocks a pair in one wave
  const int32_t max_chunks = std::max(1, b.max_chunks);
  const int32_t blocks = std::min(most, max_chunks);
  const int32_t per_block = (max_chunks + blocks - 1) / blocks;  // chunks a block
  const int32_t per_row = (max_chunks + per_block - 1) / per_block;
  // One chunk a block has nothing to stream behind it: its values would wait for its keys
  // (4K alone: 28.4 us against the lean build's 17.5).
  if (per_block < 2) return cudaSuccess;
  taken = true;
  const dim3 grid(s.num_kv_heads, per_row, b.total_tokens);
  return detail::launch_dependent_shared(kernel, grid, dim3(kFastThreads), ring_bytes, stream, true, s, pool, b,
                                         per_row);
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
  const int variant = attention_variant();
  // Variant bit 4: the two-blocks-an-SM build for head_dim 33..128 and groups up to 4
  // (head_dim 65..128) or 2 (33..64): the 8B, 4B and 0.6B shapes, the demo pair's.
  const bool stage = can_stage<T>(s, pool, b);
  if constexpr (kDimLanes == 2 || kDimLanes == 4) {
    if ((variant & kAttentionTwoBlocks) != 0 && per_thread <= 1) kernel = attention_chunk_kernel<kDimLanes, 1, T, 2>;
    // Variant bit 8: the same build with the lean scores and value sums (staged values,
    // groups up to 4: a score pass's 4 heads, a value thread's 2 head parts x 2).
    // Bit 16 with it: three blocks an SM (40 registers, the static arrays for 4 heads).
    if ((variant & kAttentionLeanChunk) != 0 && per_thread <= 1 && stage && s.num_heads / s.num_kv_heads <= 4) {
      kernel = attention_chunk_kernel<kDimLanes, 1, T, 2, true>;
      // Bit 1024 with it: the streaming build, FP32 K/V only (with BF16 the generic build
      // was slower alone at 8K-128K), BF16 too in the build for the shape (bit 256: faster
      // alone and in the step); its keys are staged too, so their rows must take 16-byte
      // copies, and the head merge merges its records.
      const bool tight = (variant & kAttentionStreamTight) != 0 && s.head_dim == 128 &&
                         s.num_heads == 4 * s.num_kv_heads;
      if ((variant & kAttentionStreamChunks) != 0 && (variant & kAttentionThreeBlocks) == 0 &&
          (sizeof(T) == 4 || tight) && b.counters == nullptr && aligned16(pool.k) && aligned16(b.k) &&
          aligned16(pool.ring_k)) {
        bool taken = false;
        const cudaError_t e = launch_stream<kDimLanes, T>(s, pool, b, stream, taken);
        if (e != cudaSuccess || taken) return e;
      }
      if ((variant & kAttentionThreeBlocks) != 0) {
        kernel = attention_chunk_kernel<kDimLanes, 1, T, 3, true>;
        // Three blocks of ~71 KB: the largest shared-memory carveout (228 KB an SM).
        if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                       cudaSharedmemCarveoutMaxShared);
            e != cudaSuccess)
          return e;
      }
    }
  }
  // C x head_dim floats whatever the storage type: the values take half of it in BF16, and
  // the merging block's chunk weights all of it (the FP32 room: with BF16's half, rows of
  // over 1,024 chunks at group 4 fell back to the slow per-output merge, 1.4x a 128K step).
  const size_t staged_bytes = stage ? size_t{C} * s.head_dim * sizeof(float) : 0;
  if (const cudaError_t e = allow_dynamic_shared(kernel, staged_bytes); e != cudaSuccess) return e;
  const bool stage_keys = stage && sizeof(T) == 2 && (variant & kAttentionStageKeys) != 0 && aligned16(pool.k) &&
                          aligned16(b.k) && aligned16(pool.ring_k);
  return detail::launch_dependent_shared(kernel, grid, dim3(kFastThreads), staged_bytes, stream, true, s, pool, b,
                                         outb, stage, stage_keys);
}

}  // namespace

template <class T>
cudaError_t launch_chunk_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                              bool reference, cudaStream_t stream) {
  if (reference) {
    const dim3 grid(b.max_chunks, s.num_kv_heads, b.total_tokens);
    attention_chunk_reference_kernel<T><<<grid, kThreads, 0, stream>>>(s, pool, b);
    return cudaGetLastError();
  }
  const dim3 fast_grid(s.num_kv_heads, b.max_chunks, b.total_tokens);
  if (s.head_dim <= 32) return launch_chunks<1, T>(s, pool, b, fast_grid, outb, stream);
  if (s.head_dim <= 64) return launch_chunks<2, T>(s, pool, b, fast_grid, outb, stream);
  if (s.head_dim <= 128) return launch_chunks<4, T>(s, pool, b, fast_grid, outb, stream);
  return launch_chunks<8, T>(s, pool, b, fast_grid, outb, stream);
}

template cudaError_t launch_chunk_path<float>(const AttentionShape&, const PagedPool&, const AttentionBatch&,
                                              uint16_t*, bool, cudaStream_t);
template cudaError_t launch_chunk_path<uint16_t>(const AttentionShape&, const PagedPool&, const AttentionBatch&,
                                                 uint16_t*, bool, cudaStream_t);

}  // namespace specpipe::cuda::attention_detail
