// The window kernel (attention_paths.h): verify windows whose rows share each K/V chunk load.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_paths.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/vec.cuh"

namespace specpipe::cuda::attention_detail {
namespace {

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
/// Blocks of the window grid from which bit 512 issues the FP32 values' copies after the
/// first keys' loads: four waves of two blocks an SM. With fewer (8B shape: 512 blocks at 8K)
/// the first wave's copies, issued before the wait for the kernel before, count more: values
/// first there (eager, the window alone at 8K: 58.0 -> 56.3 us, 1519's order 55.5).
constexpr int64_t kLateValuesMinBlocks = 4 * kLeanMinBlocks;

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

/// f(std::integral_constant<int, K>{}) for K = min(n, kMax), n >= 1: a run-time count of
/// chains to the template that keeps them in registers.
template <int kMax, class F>
__device__ inline void with_count(int n, F&& f) {
  if constexpr (kMax > 1) {
    if (n < kMax) return with_count<kMax - 1>(n, f);
  }
  f(std::integral_constant<int, kMax>{});
}

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

/// A slot's local row (slot / group) and query head in the group (slot % group). kFast
/// (variant bit 64): by a multiply and a shift instead of a division sequence (exact for
/// slots under 2^16 / kMaxGroup: the error of the rounded-up multiplier is under 1 / group).
template <bool kFast>
struct SlotOf {
  int32_t group;
  uint32_t magic;
  __device__ explicit SlotOf(int32_t g) : group(g), magic(magic_of(g)) {}
  /// The host's group and magic_of(group) (the tight build: no division on the device).
  __device__ SlotOf(int32_t g, uint32_t m) : group(g), magic(m) {}
  __host__ __device__ static uint32_t magic_of(int32_t g) { return (65536u + static_cast<uint32_t>(g) - 1) / g; }
  __device__ int32_t row(int32_t sl) const {
    return kFast ? static_cast<int32_t>((static_cast<uint32_t>(sl) * magic) >> 16) : sl / group;
  }
  __device__ int32_t head(int32_t sl) const { return sl - row(sl) * group; }
};

/// kDims staged values (dims d.. of one key) widened to FP32 with one shared-memory load: 2
/// (an 8-byte FP32 or 4-byte BF16 load, value_pair) or 4 (16-byte FP32, 8-byte BF16).
template <int kDims>
__device__ inline void value_dims(const float* at, float (&v)[kDims]) {
  load_vec(at, v);
}
template <int kDims>
__device__ inline void value_dims(const uint16_t* at, float (&v)[kDims]) {
  static_assert(kDims == 2 || kDims == 4);
  if constexpr (kDims == 2) {
    const float2 p = value_pair(at);
    v[0] = p.x, v[1] = p.y;
  } else {
    const uint2 w = *reinterpret_cast<const uint2*>(at);
    v[0] = kv_float(static_cast<uint16_t>(w.x & 0xffffu)), v[1] = kv_float(static_cast<uint16_t>(w.x >> 16));
    v[2] = kv_float(static_cast<uint16_t>(w.y & 0xffffu)), v[3] = kv_float(static_cast<uint16_t>(w.y >> 16));
  }
}

/// The value sums of the paired build (variant bit 32: kDims 2) and the tight one (bit 128:
/// kDims 4): K x kDims chains, dims d.. d + kDims - 1 of the slots `slot[i]`, each fmaf(p, v,
/// acc) over its row's keys in ascending order as window_value_chains' (the common keys four
/// at a time, then the rows' own ends one by one); each staged value group is read once for
/// all K slots (value_dims) and the numerators 4 keys a 16-byte load (with kDims 4 at head_dim
/// 128, the same address for a warp's lanes: a broadcast).
template <int K, int kDims, class T, bool kFast>
__device__ inline void window_dim_chains(const AttentionShape& s, const AttentionBatch& b, const WindowTask& t,
                                         int32_t kvh, SlotOf<kFast> slot_of, int32_t hd, int d, const int32_t* slot,
                                         const T* sv, const float* sp) {
  float a[K][kDims];
  const float* pr[K];
#pragma unroll
  for (int i = 0; i < K; ++i) {
#pragma unroll
    for (int e = 0; e < kDims; ++e) a[i][e] = 0.0f;
    pr[i] = sp + slot[i] * kScoreStride;
  }
  int32_t jl = 0;
#pragma unroll 2
  for (; jl + 4 <= t.count_min; jl += 4) {
    float v[4][kDims];
#pragma unroll
    for (int u = 0; u < 4; ++u) value_dims(sv + (jl + u) * hd + d, v[u]);
#pragma unroll
    for (int i = 0; i < K; ++i) {
      const float4 p = *reinterpret_cast<const float4*>(pr[i] + jl);
      const float p4[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
#pragma unroll
        for (int e = 0; e < kDims; ++e) a[i][e] = fmaf(p4[u], v[u][e], a[i][e]);
      }
    }
  }
  for (; jl < t.count_max; ++jl) {
    float vv[kDims];
    value_dims(sv + jl * hd + d, vv);
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (jl < t.count(t.first + slot_of.row(slot[i]))) {
        const float p = pr[i][jl];
#pragma unroll
        for (int e = 0; e < kDims; ++e) a[i][e] = fmaf(p, vv[e], a[i][e]);
      }
  }
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int32_t row = t.row0 + t.first + slot_of.row(slot[i]);
    const int64_t h = int64_t{kvh} * slot_of.group + slot_of.head(slot[i]);
    float* rec = b.workspace + ((int64_t{row} * s.num_heads + h) * b.max_chunks + t.chunk) * (hd + 2) + 2 + d;
#pragma unroll
    for (int e = 0; e < kDims; ++e) rec[e] = a[i][e];
  }
}

/// Thread vpart of `parts` in the value sums runs its chains for the slots vpart, vpart +
/// parts, ..., kMaxSlots at a time: chains(std::integral_constant<int, K>{}, slot) with
/// K (<= kMaxSlots) slots in slot[0..K).
template <int kMaxSlots, class Chains>
__device__ inline void for_part_slots(int32_t slots, int parts, int vpart, Chains&& chains) {
  const int32_t mine = (slots - vpart + parts - 1) / parts;
  for (int32_t i0 = 0; i0 < mine; i0 += kMaxSlots) {
    int32_t slot[kMaxSlots];
#pragma unroll
    for (int i = 0; i < kMaxSlots; ++i) slot[i] = vpart + (i0 + i) * parts;
    with_count<kMaxSlots>(mine - i0, [&](auto k) { chains(k, slot); });
  }
}

/// Slots a thread of variant bit 32's value sums runs the chains of (2 dims each).
constexpr int kPairSlots = 6;

/// Slots a thread of the tight build's value sums runs the chains of (4 dims each).
constexpr int kQuadSlots = 3;

/// Grid (kv head, max_chunks): block y takes tasks y, y + max_chunks, ... of the batch's
/// (group, chunk) tasks (groups: a window's rows cut into runs of rows_per_group), so a
/// single window launches no more blocks than decode. Dynamic shared memory: the staged
/// values [C][hd], the slots' queries [max_slots][hd], scores [max_slots][kScoreStride],
/// two [max_slots][kWarps] reduction arrays. Writes the chunk records only; merged by
/// attention_merge_kernel.
///
/// kPaired (variant bit 32): the same numbers with fewer instructions. Each lane loads its
/// keys and slots in an order permuted by its lane bits, so reduce_scatter_xor needs no
/// selects; thread (part, pair) runs the value chains of dims 2 pair, 2 pair + 1 for the
/// slots part, part + parts, ... (window_dim_chains); with stage_keys (BF16, 16-byte aligned
/// rows) the chunk's keys are copied to shared memory by cp.async (after the values' room)
/// and scored from there instead of 2-byte global loads a lane.
///
/// kFast (variant bit 64, with kPaired; head_dim == 32 * kDimLanes): the same numbers with
/// fewer instructions and fewer idle warps. Nsight Compute (H100, 8B shape, 32K, a 5-token
/// window) had the paired build issue-bound (73% of cycles issuing, DRAM 22% busy) on 78K
/// warp instructions a block of which 21K were the FMAs: the rest was integer division
/// sequences (slot / group, i / head_dim with a run-time divisor), the bounds of a lane's
/// dims (predicates and zeroing moves), and the value sums ran on 8 of the 16 warps while
/// the others waited at the barrier. Here head_dim is a constant, a slot's row a multiply
/// and shift (SlotOf), the value chains spread over every thread (2-3 slots each for 20
/// slots instead of 5), and a chunk of settled pool keys (b.prefix_settled, no ring)
/// locates its rows and issues its copies before waiting for the kernel before.
///
/// kTight (variant bit 128, with kFast): the same numbers with fewer instructions in the
/// score passes (the fast build's profile: 164 instructions a 4-slot step for its 64 FMAs,
/// 16 shuffles and 16 adds). The queries are stored lane-major in the order each lane reads
/// them: slot sl0 + s4 of a pass's step sits, for lane l, at row sl0 + (s4 ^ sx(l)) of the
/// group of 4 (the permutation reduce_scatter_xor wants) and columns l * kDimLanes.. (dims
/// l, l + 32, ...), so a step's queries are 4 vector loads at fixed offsets instead of 4 x
/// kDimLanes loads with clamped addresses (the slots padded to a multiple of 4 with zeros,
/// whose dots are never stored); a score's "the row sees this key" test is one comparison
/// of the slot's row with a bound computed once a pass; the value sums run 4 dims x up to
/// kQuadSlots slots a thread (window_dim_chains: a value quad loaded once for 3 slots, the
/// numerators a broadcast); the staging and query loops index unsigned (shifts, not
/// signed-division sequences); the GQA group and its SlotOf multiplier come from the host.
/// Each dot is still fmaf over d = 0, 1, ... from 0, reduced by the same
/// reduce_scatter_xor, and each value chain fmaf over its keys in order: the same bits.
///
/// kStepPairs (variant bit 512, with kTight and kLean): the score passes take their 4-slot
/// steps two at a time, the second step's dot products issued while the first's
/// reduce-scatter waits on its shuffles, and the two reduce-scatters interleaved level by
/// level, so a warp has two shuffle chains in flight instead of
/// one (the eighteenth session's profile: the scores 33% of the stall samples, led by the
/// shuffle chains' short scoreboard); the softmax takes a thread's slots two at a time
/// (slot_softmax's kAtOnce), for the same reason; with FP32 keys the values' copies are
/// issued after the first score pass's key loads instead of before the queries (from
/// kLateValuesMinBlocks blocks: the launch's late_values). Each dot
/// and each reduction is the single step's: the same bits.
template <int kDimLanes, bool kLean, bool kPaired, class T, bool kFast = false, bool kTight = false,
          bool kStepPairs = false>
__global__ void __launch_bounds__(kFastThreads, kLean ? 2 : 1) attention_window_kernel(AttentionShape s, PagedPool pool,
                                                                    AttentionBatch b, int32_t rows_per_group,
                                                                    int32_t max_slots, bool stage_keys,
                                                                    int32_t host_group, uint32_t host_magic,
                                                                    bool late_values) {
  static_assert(kFast || !kTight);
  static_assert(!kStepPairs || (kTight && kLean));
  __shared__ RowGroups g;
  __shared__ const T* krow[C];
  __shared__ const T* vrow[C];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // The batch's groups and their tasks (metadata only: before waiting for the kernel before).
  if (warp == 0) scan_row_groups(b, rows_per_group, g);
  __syncthreads();
  const int32_t groups = g.count, tasks = g.task0[groups];
  if (static_cast<int32_t>(blockIdx.y) >= tasks) return;
  // kFast: a task whose chunk keys all lie in a settled pool prefix (b.prefix_settled, no
  // layer ring) locates and loads them before waiting for the kernel before (which writes
  // q and the window's own K/V, not these); every other task waits first.
  [[maybe_unused]] bool waited = false;
  if constexpr (kFast) {
    detail::allow_dependent_launch();
  } else {
    detail::begin_dependent_kernel();
    waited = true;
  }

  // kFast: head_dim is 32 * kDimLanes (launch_window takes it only then), so the
  // bounds on a lane's dims and the divisions by head_dim fold away.
  // kTight: the GQA group and its SlotOf multiplier from the host (no division sequences).
  const int32_t hd = kFast ? 32 * kDimLanes : s.head_dim;
  const int32_t group = kTight ? host_group : s.num_heads / s.num_kv_heads, kvh = blockIdx.x;
  const SlotOf<kFast> slot_of = kTight ? SlotOf<kFast>(host_group, host_magic) : SlotOf<kFast>(group);
  T* sv = reinterpret_cast<T*>(staged_values);  // [C][hd] of the storage type (16-byte rows)
  T* sk = sv + C * hd;                           // stage_keys: [C][hd] keys, else empty
  float* sq = reinterpret_cast<float*>(sk + (stage_keys ? C * hd : 0));  // [max_slots][hd]
  float* sp = sq + max_slots * hd;    // [max_slots][kScoreStride]
  float* red = sp + max_slots * kScoreStride;  // [max_slots][kWarps]
  float* red2 = red + max_slots * kWarps;
  constexpr int kVec = kVecElems<T>;
  // kTight: unsigned indices, so the divisions by a power of two are shifts.
  using Index = std::conditional_t<kTight, uint32_t, int>;
  const Index vecs = hd / kVec;

  for (int32_t task = blockIdx.y; task < tasks; task += gridDim.y) {
    int32_t gi = 0;
    while (gi + 1 < groups && g.task0[gi + 1] <= task) ++gi;
    WindowTask t;
    t.chunk = task - g.task0[gi];
    t.row0 = g.first[gi];
    t.rows = g.rows[gi];
    const AttentionWindowDesc w = b.windows[b.token_window[t.row0]];
    t.keys0 = w.prefix_len + (t.row0 - w.first_token) + 1;
    t.j0 = t.chunk * C;
    t.first = max(0, t.j0 - t.keys0 + 1);
    t.slots = (t.rows - t.first) * group;
    t.count_min = t.count(t.first);
    t.count_max = t.count(t.rows - 1);
    const int32_t slots = t.slots;

    // Scores: a warp holds kKeys keys' K (lane l dims l, l+32, ...) and scores them against
    // 4 slots at a time: 32 dot products, each the chunk kernel's chain, then one
    // reduce-scatter; lane L stores key L / 4, slot L % 4. Lean (64 registers, two blocks
    // an SM): half the keys at a time, 16 dot products a reduce-scatter.
    constexpr int kKeys = C / kFastWarps;
    static_assert(kKeys * 4 == 32);
    constexpr int kPassKeys = kLean ? kKeys / 2 : kKeys;
    // kPaired: lane L holds dot index r ^ x in v[r] (x = L, or (L >> 1) & 15 for 16 dots;
    // index = key * 4 + slot), so its key u is u ^ (x >> 2) and its slot s4 ^ (x & 3).
    const int x = kPaired ? (kLean ? (lane >> 1) & 15 : lane) : 0;
    const int kx = x >> 2, sx = x & 3;
    float kreg[kPassKeys][kDimLanes];
    const auto load_keys = [&](int pass) {
#pragma unroll
      for (int u = 0; u < kPassKeys; ++u) {
        const int jl = warp + (pass * kPassKeys + (u ^ kx)) * kFastWarps;
        const T* kr = kPaired && stage_keys ? sk + jl * hd : krow[jl];
#pragma unroll
        for (int d = 0; d < kDimLanes; ++d)
          kreg[u][d] = jl < t.count_max && lane + 32 * d < hd ? kv_float(kr[lane + 32 * d]) : 0.0f;
      }
    };
    const auto load_queries = [&] {
      if constexpr (kTight) {
        // Item (slot, lane l): dims l, l + 32, ... (coalesced over l) to row
        // (sl & ~3) + ((sl & 3) ^ sx(l)), columns l * kDimLanes.. (one vector store).
        const int32_t padded = (slots + 3) & ~3;
        for (Index i = tid; i < Index(padded) * 32; i += kFastThreads) {
          const int32_t sl = static_cast<int32_t>(i / 32);
          const int l = static_cast<int>(i % 32);
          float qv[kDimLanes];
          if (sl < slots) {
            const int32_t row = t.row0 + t.first + slot_of.row(sl);
            const float* src = b.q + int64_t{row} * b.ld_q + (int64_t{kvh} * group + slot_of.head(sl)) * hd + l;
#pragma unroll
            for (int d = 0; d < kDimLanes; ++d) qv[d] = src[32 * d];
          } else {
#pragma unroll
            for (int d = 0; d < kDimLanes; ++d) qv[d] = 0.0f;
          }
          const int sxl = kLean ? (l >> 1) & 3 : l & 3;
          store_vec(sq + ((sl & ~3) + ((sl & 3) ^ sxl)) * hd + l * kDimLanes, qv);
        }
      } else {
        for (int i = tid; i < slots * hd; i += kFastThreads) {
          const int32_t sl = i / hd, d = i % hd;
          const int32_t row = t.row0 + t.first + slot_of.row(sl);
          sq[i] = b.q[int64_t{row} * b.ld_q + (int64_t{kvh} * group + slot_of.head(sl)) * hd + d];
        }
      }
    };
    const auto locate_rows = [&] {
      if (tid < t.count_max) {
        const int32_t j = t.j0 + tid;
        const int64_t head_off = int64_t{kvh} * hd;
        if (j < w.prefix_len) pool_rows(pool, w, j, head_off, krow[tid], vrow[tid]);
        else window_rows(b, w, j, head_off, krow[tid], vrow[tid]);
      }
    };
    const auto stage_key_rows = [&] {
      for (Index i = tid; i < Index(t.count_max) * vecs; i += kFastThreads)
        copy_async16(sk + i * kVec, krow[i / vecs] + (i % vecs) * kVec);
      copy_async_commit();
    };
    // kStepPairs, FP32 keys (loaded into registers), from kLateValuesMinBlocks blocks
    // (late_values): the values' copies issued after the first pass's key loads, so those
    // loads do not queue behind 64 KB of copies (the values are needed only after the softmax).
    const bool values_after_keys = kStepPairs && !stage_keys && late_values;
    const auto stage_value_rows = [&] {
      for (Index i = tid; i < Index(t.count_max) * vecs; i += kFastThreads)
        copy_async16(sv + i * kVec, vrow[i / vecs] + (i % vecs) * kVec);
    };

    if constexpr (kFast) {
      // A chunk of settled pool keys: its rows located and its copies (BF16 keys, values;
      // FP32 values under kStepPairs: after the first keys' loads, below) issued before
      // waiting for the kernel before, then the queries. (FP32 keys load into registers in
      // the score passes, as before: held across the wait they spilled.)
      const bool early = b.prefix_settled && pool.ring_k == nullptr && t.j0 + t.count_max <= w.prefix_len;
      if (!early && !waited) {
        detail::wait_for_prerequisite_grid();
        waited = true;
      }
      locate_rows();
      if (!early) load_queries();
      __syncthreads();
      if (stage_keys) stage_key_rows();
      if (!values_after_keys) stage_value_rows();
      if (early && !waited) {
        detail::wait_for_prerequisite_grid();
        waited = true;
      }
      if (early) load_queries();
      if (stage_keys) {
        copy_async_commit();
        copy_async_wait_prior<1>();  // the keys; the values may still be on their way
      }
      if (early || stage_keys) __syncthreads();
    } else {
      // The slots' queries and the chunk's K/V row addresses (pool prefix or dense window).
      load_queries();
      locate_rows();
      __syncthreads();
      if (kPaired && stage_keys) stage_key_rows();
      stage_value_rows();
      if (kPaired && stage_keys) {
        copy_async_commit();
        copy_async_wait_prior<1>();  // the keys; the values may still be on their way
        __syncthreads();
      }
    }
#pragma unroll 1
    for (int pass = 0; pass < kKeys / kPassKeys; ++pass) {
      load_keys(pass);
      if (values_after_keys && pass == 0) stage_value_rows();  // behind the first keys' loads
      if constexpr (kTight) {
        // The lane's score of a step: key u, slot sl0 + c (reduce_scatter_xor's index);
        // local row r of the group sees key jl iff r >= kmin (t.count's bound, solved for r).
        const int index = kLean ? lane >> 1 : lane;
        const int u = index >> 2, c = index & 3, jl = warp + (pass * kPassKeys + u) * kFastWarps;
        const int32_t kmin = jl + t.j0 - t.keys0 - t.first + 1;
        const bool writer = !kLean || (lane & 1) == 0;
        const float* qs = sq + lane * kDimLanes;
        float* out = sp + c * kScoreStride + jl;
        // A step's 4 x kPassKeys dot products (each fmaf over d from 0) from the queries at q.
        const auto step_dots = [&](const float* q, float(&v)[kPassKeys * 4]) {
#pragma unroll
          for (int s4 = 0; s4 < 4; ++s4) {
            float qreg[kDimLanes];
            load_vec(q + s4 * hd, qreg);
#pragma unroll
            for (int u2 = 0; u2 < kPassKeys; ++u2) {
              float dot = 0.0f;
#pragma unroll
              for (int d = 0; d < kDimLanes; ++d) dot = fmaf(qreg[d], kreg[u2][d], dot);
              v[u2 * 4 + s4] = dot;
            }
          }
        };
        const auto store = [&](int32_t sl0, float* o, float dot) {
          const int32_t sl = sl0 + c;
          if (writer && sl < slots) *o = slot_of.row(sl) >= kmin ? dot * s.scale : -INFINITY;
        };
        int32_t sl0 = 0;
        if constexpr (kStepPairs) {
          // Steps sl0 and sl0 + 4 (its queries exist: the slots are padded to a multiple of
          // 4), skewed by one level: b's dots under a's first shuffles, then a's level k + 1
          // beside b's level k. Each is reduce_scatter_xor's (16 dots) sequence of levels.
          for (; sl0 + 4 < slots; sl0 += 8, qs += 8 * hd, out += 8 * kScoreStride) {
            static_assert(kPassKeys * 4 == 16);
            float va[16], vb[16];
            step_dots(qs, va);
            reduce_scatter_xor_step<16, 16>(va);
            step_dots(qs + 4 * hd, vb);
            reduce_scatter_xor_step<8, 8>(va);
            reduce_scatter_xor_step<16, 16>(vb);
            reduce_scatter_xor_step<4, 4>(va);
            reduce_scatter_xor_step<8, 8>(vb);
            reduce_scatter_xor_step<2, 2>(va);
            reduce_scatter_xor_step<4, 4>(vb);
            const float da = va[0] + __shfl_xor_sync(detail::kFullMask, va[0], 1);
            reduce_scatter_xor_step<2, 2>(vb);
            const float db = vb[0] + __shfl_xor_sync(detail::kFullMask, vb[0], 1);
            store(sl0, out, da);
            store(sl0 + 4, out + 4 * kScoreStride, db);
          }
        }
        for (; sl0 < slots; sl0 += 4, qs += 4 * hd, out += 4 * kScoreStride) {
          float v[kPassKeys * 4];
          step_dots(qs, v);
          store(sl0, out, reduce_scatter_xor(v));
        }
      } else {
        for (int sl0 = 0; sl0 < slots; sl0 += 4) {
          float v[kPassKeys * 4];
          pass_dots(sq, sl0, slots, hd, lane, kreg, v, sx);
          const float dot = kPaired ? reduce_scatter_xor(v) : reduce_scatter(v, lane);
          const int index = kLean ? lane >> 1 : lane;  // lean: lanes L and L ^ 1 hold the same sum
          const int u = index >> 2, sl = sl0 + (index & 3), jl = warp + (pass * kPassKeys + u) * kFastWarps;
          if (sl < slots && (!kLean || (lane & 1) == 0))
            sp[sl * kScoreStride + jl] = jl < t.count(t.first + slot_of.row(sl)) ? dot * s.scale : -INFINITY;
        }
      }
    }
    __syncthreads();

    // Softmax numerators: the chunk kernel's reductions per slot (slot_softmax).
    const auto count_of = [&](int32_t sl) { return t.count(t.first + slot_of.row(sl)); };
    slot_softmax<kFastThreads, decltype(count_of), kStepPairs ? 2 : 1>(sp, kScoreStride, red, red2, slots, count_of);
    copy_async_wait_all();  // this thread's copies; the barrier shows everyone's
    __syncthreads();
    if (tid < slots)
      store_slot_stats(s, b, red, red2, tid, t.row0 + t.first + slot_of.row(tid),
                       int64_t{kvh} * group + slot_of.head(tid), t.chunk);

    if constexpr (kTight) {
      // Value sums: thread (part, quad) runs the chains of dims 4 quad .. 4 quad + 3 of the
      // slots part, part + parts, ... (at most kQuadSlots each: 7 warps of 3 or 2 slots for
      // the 8B shape's 20, a warp's lanes all one part at head_dim 128): a quarter fewer
      // instructions than the pairs (values a 16-byte load for up to 3 slots).
      const unsigned quads = hd / 4;
      const int parts = min(static_cast<int>(kFastThreads / quads), (slots + kQuadSlots - 1) / kQuadSlots);
      const int vpart = static_cast<int>(static_cast<unsigned>(tid) / quads);
      if (vpart < parts) {
        const int d = 4 * static_cast<int>(static_cast<unsigned>(tid) % quads);
        for_part_slots<kQuadSlots>(slots, parts, vpart, [&](auto k, const int32_t* slot) {
          window_dim_chains<decltype(k)::value, 4>(s, b, t, kvh, slot_of, hd, d, slot, sv, sp);
        });
      }
      __syncthreads();  // the next task reuses the shared memory
      continue;
    }
    if constexpr (kPaired) {
      // Value sums: thread (part, pair) runs the chains of dims 2 pair, 2 pair + 1 of the
      // slots part, part + parts, ..., up to kPairSlots at a time.
      // kFast: every thread of the block (2 or 3 slots each for the 8B shape's 20), so
      // each scheduler has four warps' chains to interleave instead of two.
      const int pairs = hd / 2;
      const int parts = kFast ? kFastThreads / pairs : min(kFastThreads / pairs, (slots + kPairSlots - 1) / kPairSlots);
      const int vpart = tid / pairs;
      if (vpart < parts) {
        const int d = 2 * (tid % pairs);
        for_part_slots<kPairSlots>(slots, parts, vpart, [&](auto k, const int32_t* slot) {
          window_dim_chains<decltype(k)::value, 2>(s, b, t, kvh, slot_of, hd, d, slot, sv, sp);
        });
      }
      __syncthreads();  // the next task reuses the shared memory
      continue;
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
          with_count<8>(mine - i0, [&](auto k) {
            window_value_chains<decltype(k)::value>(s, b, t, kvh, group, d, slot, sv, sp);
          });
        }
    }
    __syncthreads();  // the next task reuses the shared memory
  }
}

template <int kDimLanes, class T>
cudaError_t launch_window(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                          cudaStream_t stream) {
  const int32_t group = s.num_heads / s.num_kv_heads;
  const int32_t rows_per_group = std::min(b.total_tokens, std::max(1, kWindowMaxSlots / group));
  const int variant = attention_variant();
  // Variant bit 64 (with 32), head_dim 64 or 128 (every lane's dims real): the fast build
  // (kFast: head_dim fixed, no division sequences, value chains on every thread, a settled
  // chunk's copies issued before the wait for the kernel before); bit 128 with it the tight
  // build (queries a vector load a lane, their slots padded to a multiple of 4).
  const bool paired = (variant & kAttentionLeanWindow) != 0;
  const bool fast = paired && (variant & kAttentionFastWindow) != 0 && s.head_dim == 32 * kDimLanes;
  const bool tight = fast && (variant & kAttentionTightWindow) != 0;
  const int32_t max_slots = tight ? (rows_per_group * group + 3) / 4 * 4 : rows_per_group * group;
  const int mode = window_path_mode();
  const bool lean = mode == 2 || (mode < 0 && int64_t{s.num_kv_heads} * b.max_chunks >= kLeanMinBlocks);
  // Variant bit 32: the paired build; BF16 keys staged where every key row starts 16-byte
  // aligned (can_stage checked the strides).
  const bool stage_keys =
      paired && sizeof(T) == 2 && aligned16(pool.k) && aligned16(b.k) && aligned16(pool.ring_k);
  const size_t bytes = size_t{C} * s.head_dim * sizeof(T) * (stage_keys ? 2 : 1) +
                       size_t(max_slots) * (s.head_dim + kScoreStride + 2 * kWarps) * sizeof(float);
  // Variant bit 512 (with the tight build, lean): the score steps two at a time.
  const bool step_pairs = tight && lean && (variant & kAttentionWindowStepPairs) != 0;
  auto* kernel = step_pairs ? attention_window_kernel<kDimLanes, true, true, T, true, true, true>
                 : tight    ? (lean ? attention_window_kernel<kDimLanes, true, true, T, true, true>
                                  : attention_window_kernel<kDimLanes, false, true, T, true, true>)
                 : fast   ? (lean ? attention_window_kernel<kDimLanes, true, true, T, true>
                                  : attention_window_kernel<kDimLanes, false, true, T, true>)
                 : paired ? (lean ? attention_window_kernel<kDimLanes, true, true, T>
                                  : attention_window_kernel<kDimLanes, false, true, T>)
                          : (lean ? attention_window_kernel<kDimLanes, true, false, T>
                                  : attention_window_kernel<kDimLanes, false, false, T>);
  cudaError_t e = allow_dynamic_shared(kernel, bytes);
  if (e != cudaSuccess) return e;
  e = detail::launch_dependent_shared(kernel, dim3(s.num_kv_heads, b.max_chunks), dim3(kFastThreads), bytes, stream,
                                      true, s, pool, b, rows_per_group, max_slots, stage_keys, group,
                                      SlotOf<true>::magic_of(group),
                                      int64_t{s.num_kv_heads} * b.max_chunks >= kLateValuesMinBlocks);
  if (e != cudaSuccess) return e;
  // Variant bit 1 (attention.h): a block per (row, query head) merges instead.
  if ((variant & kAttentionHeadMerge) != 0) return launch_head_merge(s, b, outb, stream);
  return launch_merge(s, b, outb, stream);
}

}  // namespace

/// Whether a batch takes the window kernel: 2..kStageMaxRows rows whose values can be
/// staged, head_dim 33..128 (the instantiated lanes), and the switch on.
template <class T>
bool use_window_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b) {
  return b.total_tokens >= 2 && can_stage<T>(s, pool, b) && s.head_dim > 32 && s.head_dim <= 128 &&
         window_path_mode() != 0;
}


template <class T>
cudaError_t launch_window_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                               cudaStream_t stream) {
  return s.head_dim <= 64 ? launch_window<2, T>(s, pool, b, outb, stream) : launch_window<4, T>(s, pool, b, outb, stream);
}

template bool use_window_path<float>(const AttentionShape&, const PagedPool&, const AttentionBatch&);
template bool use_window_path<uint16_t>(const AttentionShape&, const PagedPool&, const AttentionBatch&);
template cudaError_t launch_window_path<float>(const AttentionShape&, const PagedPool&, const AttentionBatch&,
                                               uint16_t*, cudaStream_t);
template cudaError_t launch_window_path<uint16_t>(const AttentionShape&, const PagedPool&, const AttentionBatch&,
                                                  uint16_t*, cudaStream_t);

}  // namespace specpipe::cuda::attention_detail
