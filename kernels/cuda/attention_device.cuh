#pragma once
/// The device code every attention kernel shares (internal to kernels/cuda/attention*.cu):
/// the FP32 / BF16 element widening, the constants of the split-K chunking, where a key's
/// K/V row lives (pool block, layer ring slot or the window's dense K/V), the merge of a
/// row's chunk records (one formula for every path, so every path gives the same bits)
/// and the fixed-order reduce-scatter the window kernels score with. attention.h and
/// attention_plan.h say why the kernels are batch invariant.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/block_reduce.cuh"

namespace specpipe::cuda::attention_detail {

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
/// Closes the group of this thread's copies issued so far; copy_async_wait_prior<N> waits
/// until at most N of its groups are still in flight.
__device__ inline void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ inline void copy_async_wait_prior() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

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

/// Rows of a batch up to which the chunk kernel stages values in shared memory: decode
/// steps and verify windows, whose few blocks wait on load latency. Larger batches
/// (prefill) keep more blocks per SM instead. Either way the bits are the same.
constexpr int32_t kStageMaxRows = 16;

/// Whether a device address can start 16-byte copies (cp.async).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Whether the values can be staged: whole 16-byte copies of every value row.
template <class T>
bool can_stage(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b) {
  constexpr int kVec = kVecElems<T>;
  return b.total_tokens <= kStageMaxRows && s.head_dim % kVec == 0 && pool.slot_stride % kVec == 0 &&
         b.ld_kv % kVec == 0 && aligned16(pool.v) && aligned16(b.v) && aligned16(pool.ring_v);
}

/// The batch's row groups for the kernels that share K/V loads among a window's rows
/// (window, split): a window's rows cut into runs of rows_per_group, and where each group's
/// tasks (one per chunk of its last row) start; task0[count] is the number of tasks. Warp 0
/// of the block fills it from the window metadata only (safe before waiting for the kernel
/// before); at most kStageMaxRows rows.
struct RowGroups {
  int32_t first[kStageMaxRows], rows[kStageMaxRows], task0[kStageMaxRows + 1];
  int32_t count;
};

__device__ inline void scan_row_groups(const AttentionBatch& b, int32_t rows_per_group, RowGroups& g) {
  const int lane = threadIdx.x % 32;
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
    g.first[idx] = lane;
    g.rows[idx] = nrows;
    g.task0[idx] = incl - chunks;
  }
  if (lane == 31) {
    g.task0[__popc(leaders)] = incl;
    g.count = __popc(leaders);
  }
}

/// Softmax numerators of a task's `slots` slots over a chunk, in place in sp ([slots][stride]
/// scores, -inf past a slot's keys), with each slot's per-warp maxima and sums in red, red2
/// ([slots][kWarps]): the chunk kernel's reductions (a butterfly per 32 keys, the warps in
/// order), thread (part, key) of a kBlock-thread block taking the slots part, part +
/// kBlock / C, ... for key = tid % C as there. count_of(sl): the keys slot sl's row sees in
/// the chunk. Every thread of the block calls it (one barrier inside; none at the end).
/// kAtOnce > 1 (the window kernel's variant bit 512): a thread's slots kAtOnce at a time, their
/// butterflies side by side in one block of code so their shuffle chains overlap (each
/// slot's reductions unchanged; a slot past `slots` reduces zeros and stores nothing).
template <int kBlock, class CountOf, int kAtOnce = 1>
__device__ inline void slot_softmax(float* sp, int stride, float* red, float* red2, int32_t slots, CountOf count_of) {
  const int tid = threadIdx.x, lane = tid % 32, key = tid % C, part = tid / C, kw = key / 32;
  constexpr int kParts = kBlock / C;
  for (int sl = part; sl < slots; sl += kParts * kAtOnce) {
    float m[kAtOnce];
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i) {
      const int si = sl + i * kParts;
      m[i] = si < slots ? sp[si * stride + key] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i) m[i] = detail::warp_max(m[i]);
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i)
      if (lane == 0 && sl + i * kParts < slots) red[(sl + i * kParts) * kWarps + kw] = m[i];
  }
  __syncthreads();
  for (int sl = part; sl < slots; sl += kParts * kAtOnce) {
    float e[kAtOnce];
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i) {
      const int si = sl + i * kParts;
      e[i] = 0.0f;
      if (si < slots) {
        float m = red[si * kWarps];
#pragma unroll
        for (int w2 = 1; w2 < kWarps; ++w2) m = fmaxf(m, red[si * kWarps + w2]);
        float* ps = sp + si * stride + key;
        e[i] = key < count_of(si) ? expf(*ps - m) : 0.0f;
        *ps = e[i];
      }
    }
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i) e[i] = detail::warp_sum(e[i]);
#pragma unroll
    for (int i = 0; i < kAtOnce; ++i)
      if (lane == 0 && sl + i * kParts < slots) red2[(sl + i * kParts) * kWarps + kw] = e[i];
  }
}

/// Slot sl's chunk max and sum from slot_softmax's per-warp values (warps in order, as the
/// chunk kernel) into its record (row, query head h, chunk).
__device__ inline void store_slot_stats(const AttentionShape& s, const AttentionBatch& b, const float* red,
                                        const float* red2, int32_t sl, int32_t row, int64_t h, int32_t chunk) {
  float m = red[sl * kWarps], sum = red2[sl * kWarps];
#pragma unroll
  for (int w2 = 1; w2 < kWarps; ++w2) {
    m = fmaxf(m, red[sl * kWarps + w2]);
    sum += red2[sl * kWarps + w2];
  }
  float* rec = b.workspace + ((int64_t{row} * s.num_heads + h) * b.max_chunks + chunk) * (s.head_dim + 2);
  rec[0] = m;
  rec[1] = sum;
}

/// One score pass of the kernels that share K/V loads: lane l's FMA chains over dims l, l+32,
/// ... (the chunk kernel's) of 4 slots' queries (rows sl0 + (s4 ^ sx) of sq for s4 = 0..3,
/// clamped to the last slot) against kKeysN keys held in kreg, into v[u * 4 + s4];
/// reduce_scatter then sums them over the lanes as warp_sum does (sx 0), or
/// reduce_scatter_xor (sx and the keys' order permuted by the lane, below).
template <int kKeysN, int kDimLanes>
__device__ inline void pass_dots(const float* sq, int32_t sl0, int32_t slots, int32_t hd, int lane,
                                 const float (&kreg)[kKeysN][kDimLanes], float (&v)[kKeysN * 4], int sx = 0) {
#pragma unroll
  for (int s4 = 0; s4 < 4; ++s4) {
    const float* qs = sq + min(sl0 + (s4 ^ sx), slots - 1) * hd;
    float qreg[kDimLanes];
#pragma unroll
    for (int d = 0; d < kDimLanes; ++d) qreg[d] = lane + 32 * d < hd ? qs[lane + 32 * d] : 0.0f;
#pragma unroll
    for (int u = 0; u < kKeysN; ++u) {
      float dot = 0.0f;
#pragma unroll
      for (int d = 0; d < kDimLanes; ++d)
        if (lane + 32 * d < hd) dot = fmaf(qreg[d], kreg[u][d], dot);
      v[u * 4 + s4] = dot;
    }
  }
}

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

/// reduce_scatter without its selects (2 a pair): when lane L's v[r] holds index r ^ x(L),
/// x(L) = L for 32 values and (L >> 1) & 15 for 16, every halving step keeps the low half
/// and sends the high half (the index bit a step halves on is the lane bit of its offset),
/// so a step is a shuffle and an add per pair: the same xor pairs at the same offsets,
/// each sum keep + received as there, so lane L returns what reduce_scatter returns (index
/// L, or L / 2 for 16 values: warp_sum's tree; a CPU replay of 20,000 random warps each gave
/// the same bits). The callers load their keys and slots in that permuted order.
template <int N, int kOffset, int M>
__device__ inline void reduce_scatter_xor_step(float (&v)[M]) {
#pragma unroll
  for (int j = 0; j < N / 2; ++j) v[j] += __shfl_xor_sync(detail::kFullMask, v[j + N / 2], kOffset);
}
__device__ inline float reduce_scatter_xor(float (&v)[32]) {
  reduce_scatter_xor_step<32, 16>(v);
  reduce_scatter_xor_step<16, 8>(v);
  reduce_scatter_xor_step<8, 4>(v);
  reduce_scatter_xor_step<4, 2>(v);
  reduce_scatter_xor_step<2, 1>(v);
  return v[0];
}
__device__ inline float reduce_scatter_xor(float (&v)[16]) {
  reduce_scatter_xor_step<16, 16>(v);
  reduce_scatter_xor_step<8, 8>(v);
  reduce_scatter_xor_step<4, 4>(v);
  reduce_scatter_xor_step<2, 2>(v);
  return v[0] + __shfl_xor_sync(detail::kFullMask, v[0], 1);
}

/// Two staged values (dims d, d + 1 of one key) widened to FP32: one 4-byte (BF16) or
/// 8-byte (FP32) shared-memory load instead of two.
__device__ inline float2 value_pair(const uint16_t* at) {
  const uint32_t w = *reinterpret_cast<const uint32_t*>(at);
  return {kv_float(static_cast<uint16_t>(w & 0xffffu)), kv_float(static_cast<uint16_t>(w >> 16))};
}
__device__ inline float2 value_pair(const float* at) { return *reinterpret_cast<const float2*>(at); }

/// Four keys' steps of one head's chains of dims d, d + 1: numerators p (keys jl..jl+3),
/// value pairs v, in key order.
__device__ inline void pair_steps(const float4& p, const float2 (&v)[4], float& a0, float& a1) {
  const float p4[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    a0 = fmaf(p4[u], v[u].x, a0);
    a1 = fmaf(p4[u], v[u].y, a1);
  }
}

/// Opts `kernel` in to `bytes` of dynamic shared memory where its static shared memory
/// plus `bytes` pass the 48 KB a block gets without it (a launch past that fails with
/// "invalid argument": the demo target's 6-row windows, head_dim 64, group 3, asked 47,456
/// dynamic bytes beside the window kernel's static ones).
///
/// The attribute is the function's (per device) for the whole process, and only ever raised: two
/// models forwarding on two host threads (micro-batches: the draft actor and the verifier)
/// launch the same kernels with different byte counts, and setting it to each launch's
/// own need let one thread lower it between the other's set and launch ("attention:
/// invalid argument" under load, issue 18). A higher cap changes no launch: each asks its
/// own bytes.
template <class Kernel>
cudaError_t allow_dynamic_shared(Kernel* kernel, size_t bytes) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, size_t> allowed;  // (device, kernel) -> bytes opted in
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const std::lock_guard lock(mutex);
  const auto key = std::make_pair(device, reinterpret_cast<const void*>(kernel));
  if (const auto it = allowed.find(key); it != allowed.end() && it->second >= bytes) return cudaSuccess;
  cudaFuncAttributes attributes{};
  e = cudaFuncGetAttributes(&attributes, kernel);
  if (e != cudaSuccess) return e;
  if (attributes.sharedSizeBytes + bytes > 48 * 1024)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e == cudaSuccess) allowed[key] = bytes;
  return e;
}

}  // namespace specpipe::cuda::attention_detail
