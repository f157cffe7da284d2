// The prefill kernel (attention_paths.h): batches whose windows are long (prefill chunks),
// each K/V chunk staged once in shared memory for a tile of rows, every number the chunk
// kernel's.
//
// The chunk kernel takes a block per (kv head, chunk, row): every row of a 1,024-row prefill
// chunk loads the chunk's 128 keys and values again and scores them a warp per key (a
// butterfly per dot product). Here a block of 256 threads takes a task (tile of rows, kv
// head, chunk): the chunk's K (then V) in shared memory as floats, the tile's (row, query
// head) pairs ("slots", at most 32) scored and summed against it. A thread computes whole
// dot products: for each it replays the chunk kernel's arithmetic in registers, lane L's
// FMA chain over dims L, L+32, ... (from 0, fmaf, dims ascending) and warp_sum's butterfly,
// which lane 0 ends with as W(0, 1), where W(L, o) = W(L, 2o) + W(L ^ o, 2o) and W(L, 32) is
// lane L's chain (the xor pairs of the shuffles; a + b == b + a exactly, so whose value
// comes first does not matter). The score is that times the scale (__fmul_rn: nothing is
// contracted), -inf past the row's keys. The softmax numerators and the chunk's max and sum
// are slot_softmax's (the chunk kernel's warp reductions, on real warps), and every value
// chain adds the row's keys of the chunk in ascending order from 0, as the chunk kernel's.
// The records go to the same (row, head, chunk) places and launch_merge merges them
// (merge_row, the chunk kernel's last block's formula): the same bits. No tensor cores,
// no other order.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_paths.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::cuda::attention_detail {
namespace {

constexpr int kPrefillThreads = 256;
constexpr int kPrefillSlots = 32;      // (row, query head) slots of a task
constexpr int kPassSlots = 4;          // a thread's slots in a score pass (uniform over its warp)
constexpr int kPassKeys = 2;           // its keys: lane and lane + 32 of its warp's 64
constexpr int kSlotsPerPass = 4 * kPassSlots;  // warps w / 2 = 0..3 take 4 slots each
constexpr int kValueSlots = 8;         // a thread's value chains: 8 slots (uniform over its warp) x dims
constexpr int kPStride = C + 4;        // floats per slot's scores
static_assert(kPrefillThreads / 32 == 8 && 4 * kValueSlots == kPrefillSlots && kValueSlots == 8 &&
              kPrefillThreads == 2 * C);

/// -1 until read from SPECPIPE_ATTENTION_PREFILL (attention.h).
std::atomic<int> prefill_state{-1};

/// 16 bytes of K/V elements as floats (exact) to shared memory at p (16-byte aligned).
template <class T>
__device__ __forceinline__ void store_widened(float* p, const uint4& raw) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(__uint_as_float(raw.x), __uint_as_float(raw.y),
                                                __uint_as_float(raw.z), __uint_as_float(raw.w));
  } else {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<float4*>(p + 4 * h) = make_float4(
          kv_float(static_cast<uint16_t>(w[2 * h] & 0xffffu)), kv_float(static_cast<uint16_t>(w[2 * h] >> 16)),
          kv_float(static_cast<uint16_t>(w[2 * h + 1] & 0xffffu)), kv_float(static_cast<uint16_t>(w[2 * h + 1] >> 16)));
  }
}

/// W(L, kOff) of the thread's kPassSlots x kPassKeys dot products (see the file comment):
/// q[a], k[b] point at a slot's query and a key, both permuted so that lane L's dims L,
/// L + 32, ... lie at L * kDL, L * kDL + 1, ...
template <int L, int kOff, int kDL>
__device__ __forceinline__ void score_tree(const float* const (&q)[kPassSlots], const float* const (&k)[kPassKeys],
                                           float (&out)[kPassSlots][kPassKeys]) {
  if constexpr (kOff == 32) {
    // No loads of a later leaf above this one (a compiler fence): hoisted, the 32 leaves'
    // operands and partial sums took every register and spilled.
    asm volatile("" ::: "memory");
    float kv[kPassKeys][kDL];
#pragma unroll
    for (int u = 0; u < kPassKeys; ++u) load_vec(k[u] + L * kDL, kv[u]);
#pragma unroll
    for (int a = 0; a < kPassSlots; ++a) {
      float qv[kDL];
      load_vec(q[a] + L * kDL, qv);
#pragma unroll
      for (int u = 0; u < kPassKeys; ++u) {
        float dot = 0.0f;
#pragma unroll
        for (int t = 0; t < kDL; ++t) dot = fmaf(qv[t], kv[u][t], dot);
        out[a][u] = dot;
      }
    }
  } else {
    score_tree<L, 2 * kOff, kDL>(q, k, out);
    float other[kPassSlots][kPassKeys];
    score_tree<(L ^ kOff), 2 * kOff, kDL>(q, k, other);
#pragma unroll
    for (int a = 0; a < kPassSlots; ++a)
#pragma unroll
      for (int u = 0; u < kPassKeys; ++u) out[a][u] = __fadd_rn(out[a][u], other[a][u]);
  }
}

/// Floats of dynamic shared memory for head_dim 32 * kDL: the chunk's K (permuted, rows of
/// hd + kDL floats), then its V ([C][hd]) in the same room; the slots' queries (permuted),
/// then the numerators transposed ([C][kPrefillSlots]) in the same room; the scores; the
/// reductions' per-warp maxima and sums.
__host__ __device__ constexpr int prefill_query_floats(int kDL) {
  return 32 * kDL * kPrefillSlots > C * kPrefillSlots ? 32 * kDL * kPrefillSlots : C * kPrefillSlots;
}
constexpr int prefill_shared_floats(int kDL) {
  return C * (32 * kDL + kDL) + prefill_query_floats(kDL) + kPrefillSlots * kPStride + 2 * kPrefillSlots * kWarps;
}

/// Grid (tile, kv head, chunk): block x takes rows [x * tile_rows, ...) of the batch, as runs
/// of one window's rows (usually one), for keys [chunk * C, chunk * C + C). Tiles are the
/// fastest grid index, so a chunk's K/V come from L2 for every tile after the first.
/// Writes the chunk records only; launch_merge merges them.
template <int kDL, class T>
__global__ void __launch_bounds__(kPrefillThreads, 2)
    attention_prefill_kernel(AttentionShape s, PagedPool pool, AttentionBatch b, int32_t tile_rows) {
  constexpr int hd = 32 * kDL;
  constexpr int kStride = hd + kDL;  // a staged key's floats: 16-byte rows, 8 keys over the banks
  __shared__ const T* krow[C];
  __shared__ const T* vrow[C];
  float* skv = staged_values;                      // K [C][kStride], then V [C][hd]
  float* sq = skv + C * kStride;                   // queries [slots][hd], then numerators [C][kPrefillSlots]
  float* sp = sq + prefill_query_floats(kDL);     // scores [slots][kPStride]
  float* red = sp + kPrefillSlots * kPStride;      // [slots][kWarps]
  float* red2 = red + kPrefillSlots * kWarps;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int32_t group = s.num_heads / s.num_kv_heads, kvh = blockIdx.y, chunk = blockIdx.z;
  const int32_t j0 = chunk * C;
  const int32_t tile_end = min(b.total_tokens, static_cast<int32_t>(blockIdx.x + 1) * tile_rows);
  bool waited = false;
  for (int32_t r0 = blockIdx.x * tile_rows; r0 < tile_end;) {
    // A run of one window's rows (window metadata only: safe before waiting).
    const AttentionWindowDesc w = b.windows[b.token_window[r0]];
    const int32_t row0 = r0, rows = min(tile_end, w.first_token + w.n) - r0;
    r0 += rows;
    const int32_t keys0 = w.prefix_len + (row0 - w.first_token) + 1;  // keys row0 sees
    if (keys0 + rows - 1 <= j0) continue;                              // no row of the run reaches the chunk
    if (!waited) {
      detail::begin_dependent_kernel();
      waited = true;
    }
    const int32_t first = max(0, j0 - keys0 + 1);  // the run's first row with keys in the chunk
    const int32_t slots = (rows - first) * group;
    // Keys of the chunk that the run's local row k sees.
    const auto count = [&](int32_t k) { return min(C, keys0 + k - j0); };
    const int32_t count_min = count(first), count_max = count(rows - 1);

    // The chunk's K/V row addresses and the slots' queries (lane L's dims at L * kDL + t).
    if (tid < count_max) {
      const int32_t j = j0 + tid;
      const int64_t head_off = int64_t{kvh} * hd;
      if (j < w.prefix_len) pool_rows(pool, w, j, head_off, krow[tid], vrow[tid]);
      else window_rows(b, w, j, head_off, krow[tid], vrow[tid]);
    }
    {
      // Every load of the thread issued before the first store (one round trip to L2).
      constexpr int kItems = kPrefillSlots * 32 / kPrefillThreads;
      float v[kItems][kDL];
#pragma unroll
      for (int it = 0; it < kItems; ++it) {
        const int32_t i = tid + it * kPrefillThreads, sl = i / 32, l = i % 32;
        const float* q = b.q + int64_t{row0 + first + sl / group} * b.ld_q + (int64_t{kvh} * group + sl % group) * hd;
#pragma unroll
        for (int t = 0; t < kDL; ++t) v[it][t] = sl < slots ? q[l + 32 * t] : 0.0f;
      }
#pragma unroll
      for (int it = 0; it < kItems; ++it) {
        const int32_t i = tid + it * kPrefillThreads;
        if (i / 32 < slots) store_vec(sq + (i / 32) * hd + (i % 32) * kDL, v[it]);
      }
    }
    __syncthreads();
    // K as floats (exact), permuted like the queries: half the chunk's loads in flight, then
    // their stores, twice.
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      constexpr int kItems = C * 32 / kPrefillThreads / 2;
      float v[kItems][kDL];
#pragma unroll
      for (int it = 0; it < kItems; ++it) {
        const int32_t i = tid + (half * kItems + it) * kPrefillThreads, jl = i / 32, l = i % 32;
#pragma unroll
        for (int t = 0; t < kDL; ++t) v[it][t] = jl < count_max ? kv_float(krow[jl][l + 32 * t]) : 0.0f;
      }
#pragma unroll
      for (int it = 0; it < kItems; ++it) {
        const int32_t i = tid + (half * kItems + it) * kPrefillThreads;
        if (i / 32 < count_max) store_vec(skv + (i / 32) * kStride + (i % 32) * kDL, v[it]);
      }
    }
    __syncthreads();

    // Scores: warp w takes slots (w / 2) * 4 .. + 4 of each pass of 16 and keys lane, lane +
    // 32 of half w % 2 of the chunk; each dot product the chunk kernel's (score_tree).
    {
      const int32_t jb = (warp % 2) * 64 + lane;
      const float* const kp[kPassKeys] = {skv + jb * kStride, skv + (jb + 32) * kStride};
      for (int32_t sl0 = (warp / 2) * kPassSlots; sl0 < slots; sl0 += kSlotsPerPass) {
        const float* const qp[kPassSlots] = {sq + min(sl0, slots - 1) * hd, sq + min(sl0 + 1, slots - 1) * hd,
                                             sq + min(sl0 + 2, slots - 1) * hd, sq + min(sl0 + 3, slots - 1) * hd};
        float dot[kPassSlots][kPassKeys];
        score_tree<0, 1, kDL>(qp, kp, dot);
#pragma unroll
        for (int a = 0; a < kPassSlots; ++a) {
          const int32_t sl = sl0 + a;
          if (sl >= slots) break;
          const int32_t cnt = count(first + sl / group);
#pragma unroll
          for (int u = 0; u < kPassKeys; ++u) {
            const int32_t jl = jb + 32 * u;
            sp[sl * kPStride + jl] = jl < cnt ? __fmul_rn(dot[a][u], s.scale) : -INFINITY;
          }
        }
      }
    }
    __syncthreads();
    // V in 16-byte loads, as floats over K ([C][hd]): half the chunk's loads in flight, then
    // their stores, twice.
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      constexpr int kVec = kVecElems<T>, kVItems = C * hd / kVec / kPrefillThreads / 2;
      uint4 vraw[kVItems];
#pragma unroll
      for (int it = 0; it < kVItems; ++it) {
        const int32_t i = tid + (half * kVItems + it) * kPrefillThreads, jl = i / (hd / kVec);
        if (jl < count_max) vraw[it] = *reinterpret_cast<const uint4*>(vrow[jl] + (i % (hd / kVec)) * kVec);
      }
#pragma unroll
      for (int it = 0; it < kVItems; ++it) {
        const int32_t i = tid + (half * kVItems + it) * kPrefillThreads;
        if (i / (hd / kVec) < count_max) store_widened<T>(skv + i * kVec, vraw[it]);
      }
    }
    // Softmax numerators and each slot's chunk max and sum: the chunk kernel's reductions.
    slot_softmax<kPrefillThreads>(sp, kPStride, red, red2, slots,
                                  [&](int32_t sl) { return count(first + sl / group); });
    __syncthreads();
    if (tid < slots)
      store_slot_stats(s, b, red, red2, tid, row0 + first + tid / group, int64_t{kvh} * group + tid % group, chunk);
    // The numerators transposed: a key's 32 slots side by side (over the queries).
    for (int i = tid; i < C * kPrefillSlots; i += kPrefillThreads) {
      const int32_t jl = i / kPrefillSlots, sl = i % kPrefillSlots;
      sq[i] = sl < slots ? sp[sl * kPStride + jl] : 0.0f;
    }
    __syncthreads();

    // Value sums: warp w runs the chains of slots (w / 2) * 8 .. + 8 for kDV dims of half
    // w % 2, each over the row's keys of the chunk in ascending order (the common keys for
    // all, then each row's own end).
    constexpr int kDV = kDL / 2;
    const int32_t vs0 = (warp / 2) * kValueSlots;
    if (vs0 < slots) {
      const int d0 = (warp % 2) * (hd / 2) + lane * kDV;
      float acc[kValueSlots][kDV];
      int32_t cnt[kValueSlots];
#pragma unroll
      for (int a = 0; a < kValueSlots; ++a) {
        cnt[a] = vs0 + a < slots ? count(first + (vs0 + a) / group) : 0;
#pragma unroll
        for (int x = 0; x < kDV; ++x) acc[a][x] = 0.0f;
      }
      const auto step = [&](int32_t jl, bool guarded) {
        const float4 e0 = *reinterpret_cast<const float4*>(sq + jl * kPrefillSlots + vs0);
        const float4 e1 = *reinterpret_cast<const float4*>(sq + jl * kPrefillSlots + vs0 + 4);
        const float e[kValueSlots] = {e0.x, e0.y, e0.z, e0.w, e1.x, e1.y, e1.z, e1.w};
        float v[kDV];
        load_vec(skv + jl * hd + d0, v);
#pragma unroll
        for (int a = 0; a < kValueSlots; ++a) {
          if (guarded && jl >= cnt[a]) continue;
#pragma unroll
          for (int x = 0; x < kDV; ++x) acc[a][x] = fmaf(e[a], v[x], acc[a][x]);
        }
      };
#pragma unroll 4
      for (int32_t jl = 0; jl < count_min; ++jl) step(jl, false);
      for (int32_t jl = count_min; jl < count_max; ++jl) step(jl, true);
#pragma unroll
      for (int a = 0; a < kValueSlots; ++a) {
        const int32_t sl = vs0 + a;
        if (sl >= slots) break;
        const int32_t row = row0 + first + sl / group;
        const int64_t h = int64_t{kvh} * group + sl % group;
        float* rec = b.workspace + ((int64_t{row} * s.num_heads + h) * b.max_chunks + chunk) * (hd + 2);
#pragma unroll
        for (int x = 0; x < kDV; ++x) rec[2 + d0 + x] = acc[a][x];
      }
    }
    __syncthreads();  // the next run reuses the shared memory
  }
}

template <int kDL, class T>
cudaError_t launch_prefill(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                           cudaStream_t stream) {
  const int32_t group = s.num_heads / s.num_kv_heads;
  const int32_t tile_rows = std::max(1, kPrefillSlots / group);
  const size_t bytes = static_cast<size_t>(prefill_shared_floats(kDL)) * sizeof(float);
  auto* kernel = attention_prefill_kernel<kDL, T>;
  cudaError_t e = allow_dynamic_shared(kernel, bytes);
  if (e != cudaSuccess) return e;
  // Two blocks an SM (about 100 KB each): ask for the largest shared memory carveout.
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  const dim3 grid((b.total_tokens + tile_rows - 1) / tile_rows, s.num_kv_heads, b.max_chunks);
  e = detail::launch_dependent_shared(kernel, grid, dim3(kPrefillThreads), bytes, stream, true, s, pool, b, tile_rows);
  return e != cudaSuccess ? e : launch_merge(s, b, outb, stream);
}

}  // namespace

/// head_dim 128 only (every long-context shape; lane L holds dims L, L + 32, L + 64, L + 96).
/// The kernel is written for 32 * kDL, but at head_dim 64 ptxas wanted 255 registers and
/// spilled at two blocks an SM: not built.
/// The values are read in 16-byte pieces: every value row 16-byte aligned.
template <class T>
bool use_prefill_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b) {
  constexpr int kVec = kVecElems<T>;
  return b.min_window_rows > kStageMaxRows && s.head_dim == 128 && attention_prefill_enabled() &&
         pool.slot_stride % kVec == 0 && b.ld_kv % kVec == 0 && aligned16(pool.v) && aligned16(b.v) &&
         aligned16(pool.ring_v);
}

template <class T>
cudaError_t launch_prefill_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                uint16_t* outb, cudaStream_t stream) {
  return launch_prefill<4, T>(s, pool, b, outb, stream);
}

template bool use_prefill_path<float>(const AttentionShape&, const PagedPool&, const AttentionBatch&);
template bool use_prefill_path<uint16_t>(const AttentionShape&, const PagedPool&, const AttentionBatch&);
template cudaError_t launch_prefill_path<float>(const AttentionShape&, const PagedPool&, const AttentionBatch&,
                                                uint16_t*, cudaStream_t);
template cudaError_t launch_prefill_path<uint16_t>(const AttentionShape&, const PagedPool&, const AttentionBatch&,
                                                   uint16_t*, cudaStream_t);

}  // namespace specpipe::cuda::attention_detail

namespace specpipe::cuda {

bool attention_prefill_enabled() {
  int v = attention_detail::prefill_state.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("SPECPIPE_ATTENTION_PREFILL");
    v = e != nullptr && std::strcmp(e, "0") == 0 ? 0 : 1;
    attention_detail::prefill_state.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void set_attention_prefill(bool on) {
  attention_detail::prefill_state.store(on ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace specpipe::cuda
