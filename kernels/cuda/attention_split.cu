// The split-KV kernel (attention_paths.h): decode steps and verify windows (1..16 rows a
// batch), meant to be bound by the K/V bytes at long context. Not the default: on an H100
// it is correct (same bits as every path) but slower than the chunk and window kernels
// (docs/BENCHMARKS.md section 6: 8B shape at 32K, decode 12.06 vs 11.49 ms a step);
// SPECPIPE_ATTENTION_SPLIT=1 selects it.
//
// The chunk kernel (a block per (kv head, chunk, row)) runs each block's phases one after
// another (load, score, softmax, value sums), so the memory system idles while a block
// computes: ~2x the K/V bytes' time at 32K. Here a grid of about two blocks an SM per kv
// head (grid (kv head, split)) walks the batch's (row group, chunk) tasks y, y + split, ...
// (flash-decoding's split of each row's keys across blocks), and every K and V tile of
// kTileKeys keys streams through a ring of 3 or 4 shared-memory stages with cp.async:
// the tiles of the next chunk load while this one is scored and summed. A task's rows
// (a window's rows and the GQA heads of the kv head: "slots") all read each tile once.
//
// The arithmetic is the chunk kernel's, so the bits are the same on every path
// (attention_device.cuh): chunks of 128 absolute positions; a score is the per-lane FMA
// chain over dims l, l+32, ... and warp_sum's butterfly (as a reduce-scatter, lane L
// ending with dot L); the chunk's max and sum are the warp-then-warps-in-order reductions
// over its 128 keys; a value chain adds its row's keys in ascending order; the records go
// to the same (row, head, chunk) places and launch_head_merge merges them with merge_row's
// formula.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_paths.h"
#include "kernels/cuda/pdl.cuh"

namespace specpipe::cuda::attention_detail {
namespace {

constexpr int kSplitThreads = 256;
constexpr int kSplitWarps = kSplitThreads / 32;
constexpr int kTileKeys = 32;                      // keys of one pipeline stage
constexpr int kTilesPerChunk = C / kTileKeys;      // K tiles, then V tiles, of a chunk
// Stages of the tile ring (tiles in flight or in use) and blocks an SM: template parameters
// (split_blocks picks). An 8-stage ring at one block an SM was 2.6x slower than 4 stages at
// two (H100, 8B shape, 32K: 504 vs 195 us a layer): a block's time per chunk barely
// changes with the ring's depth, so resident blocks, not bytes in flight, set the rate.
constexpr int kSplitMaxSlots = 32;                 // (row, query head) slots of a task
constexpr int kSplitScoreStride = C + 4;           // floats per slot's scores (16-byte rows)
constexpr int kMaxChains = 16;                     // value chains a thread: slots / (threads / head_dim)
static_assert(kTileKeys == 4 * kSplitWarps && C % kTileKeys == 0);

/// One task: rows [first, rows) of the group starting at row0 (first: its first row with
/// keys in the chunk), keys [j0, j0 + C) of chunk `chunk`.
struct SplitTask {
  AttentionWindowDesc w;
  int32_t row0, rows, first, keys0, j0, chunk, slots, count_min, count_max;
  /// Keys of the chunk that local row k sees.
  __device__ int32_t count(int32_t k) const { return min(C, keys0 + k - j0); }
};

__device__ inline SplitTask split_task(const AttentionBatch& b, const RowGroups& g, int32_t task, int32_t group) {
  int32_t gi = 0;
  while (gi + 1 < g.count && g.task0[gi + 1] <= task) ++gi;
  SplitTask t;
  t.chunk = task - g.task0[gi];
  t.row0 = g.first[gi];
  t.rows = g.rows[gi];
  t.w = b.windows[b.token_window[t.row0]];
  t.keys0 = t.w.prefix_len + (t.row0 - t.w.first_token) + 1;
  t.j0 = t.chunk * C;
  t.first = max(0, t.j0 - t.keys0 + 1);
  t.slots = (t.rows - t.first) * group;
  t.count_min = t.count(t.first);
  t.count_max = t.count(t.rows - 1);
  return t;
}

/// Enqueues tile `tile` of the block's stream (task k = tile / (2 kTilesPerChunk): its K
/// tiles, then its V tiles) into its stage, one cp.async group per thread (empty past
/// the last tile, so the wait counts stay uniform).
template <int kSt, class T>
__device__ inline void issue_tile(const PagedPool& pool, const AttentionBatch& b, const RowGroups& g, int32_t tile,
                                  int32_t tiles, int32_t group, int32_t hd, int32_t kvh, T* stages) {
  if (tile < tiles) {
    constexpr int kVec = kVecElems<T>;
    const int vecs = hd / kVec;
    const int32_t k = tile / (2 * kTilesPerChunk), phase = tile % (2 * kTilesPerChunk);
    const bool values = phase >= kTilesPerChunk;
    const int32_t sub = phase % kTilesPerChunk;
    const SplitTask t = split_task(b, g, static_cast<int32_t>(blockIdx.y + k * gridDim.y), group);
    T* stage = stages + (tile % kSt) * (kTileKeys * hd);
    const int64_t head_off = int64_t{kvh} * hd;
    for (int i = threadIdx.x; i < kTileKeys * vecs; i += kSplitThreads) {
      const int key = i / vecs, jl = sub * kTileKeys + key;
      if (jl >= t.count_max) break;  // i ascends: so does the key
      const int32_t j = t.j0 + jl;
      const T *krow, *vrow;
      if (j < t.w.prefix_len) pool_rows(pool, t.w, j, head_off, krow, vrow);
      else window_rows(b, t.w, j, head_off, krow, vrow);
      copy_async16(stage + key * hd + (i % vecs) * kVec, (values ? vrow : krow) + (i % vecs) * kVec);
    }
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

/// Waits until this thread's copies of the oldest pending tile have landed.
template <int kSt>
__device__ inline void wait_oldest_tile() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kSt - 2) : "memory");
}

/// What the value phase of a task needs besides the tile ring.
struct ValueCtx {
  const float* sp;   // scores (numerators) [slots][kSplitScoreStride]
  int32_t vpart, parts, d, hd, group, kvh;
};

/// The value sums of task t over its kTilesPerChunk V tiles (consumed from the ring as
/// they land, the next tiles issued): thread (vpart, d) runs K chains of dim d, for its
/// slots vpart, vpart + parts, ..., in registers from tile to tile; each chain is the
/// chunk kernel's (keys in ascending order, stopping at its row's last key). Then the
/// chains' records. Returns the next tile to consume.
template <int K, int kSt, class T>
__device__ inline int32_t value_phase(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                      const RowGroups& g, const SplitTask& t, const ValueCtx& c, int32_t tile,
                                      int32_t tiles, T* stages) {
  float acc[K];
  int32_t cnt[K];
  int32_t cnt_min = C;
  const float* p0 = c.sp + c.vpart * kSplitScoreStride;
  const int32_t pstride = c.parts * kSplitScoreStride;
  const bool active = c.vpart < c.parts;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int32_t sl = c.vpart + i * c.parts;
    acc[i] = 0.0f;
    cnt[i] = active && sl < t.slots ? t.count(t.first + sl / c.group) : 0;
    cnt_min = min(cnt_min, cnt[i]);
  }
  const int32_t hd = c.hd, d = c.d;
  for (int sub = 0; sub < kTilesPerChunk; ++sub, ++tile) {
    wait_oldest_tile<kSt>();
    __syncthreads();  // everyone's copies landed; the stage the next issue reuses is free
    issue_tile<kSt>(pool, b, g, tile + kSt - 1, tiles, c.group, hd, c.kvh, stages);
    const T* sv = stages + (tile % kSt) * (kTileKeys * hd);
    const int32_t key0 = sub * kTileKeys;
    if (!active || key0 >= t.count_max) continue;
    if (key0 + kTileKeys <= cnt_min) {
#pragma unroll 2
      for (int jl = 0; jl < kTileKeys; jl += 4) {
        const float v0 = kv_float(sv[(jl + 0) * hd + d]), v1 = kv_float(sv[(jl + 1) * hd + d]);
        const float v2 = kv_float(sv[(jl + 2) * hd + d]), v3 = kv_float(sv[(jl + 3) * hd + d]);
#pragma unroll
        for (int i = 0; i < K; ++i) {
          const float4 p = *reinterpret_cast<const float4*>(p0 + i * pstride + key0 + jl);
          acc[i] = fmaf(p.x, v0, acc[i]);
          acc[i] = fmaf(p.y, v1, acc[i]);
          acc[i] = fmaf(p.z, v2, acc[i]);
          acc[i] = fmaf(p.w, v3, acc[i]);
        }
      }
    } else {
      for (int jl = 0; jl < kTileKeys; ++jl) {
        const float vv = kv_float(sv[jl * hd + d]);
#pragma unroll
        for (int i = 0; i < K; ++i)
          if (key0 + jl < cnt[i]) acc[i] = fmaf(p0[i * pstride + key0 + jl], vv, acc[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int32_t sl = c.vpart + i * c.parts;
    if (active && sl < t.slots) {
      const int32_t row = t.row0 + t.first + sl / c.group;
      const int64_t h = int64_t{c.kvh} * c.group + sl % c.group;
      b.workspace[((int64_t{row} * s.num_heads + h) * b.max_chunks + t.chunk) * (hd + 2) + 2 + d] = acc[i];
    }
  }
  return tile;
}

/// Grid (kv head, split): block y takes tasks y, y + split, ... Dynamic shared memory:
/// kSt tiles [kTileKeys][hd] of the storage type, the slots' queries
/// [max_slots][hd], scores [max_slots][kSplitScoreStride], two [max_slots][kWarps]
/// reduction arrays. Writes the chunk records; launch_head_merge merges them.
template <int kDimLanes, int kSt, int kBlocks, class T>
__global__ void __launch_bounds__(kSplitThreads, kBlocks)
    attention_split_kernel(AttentionShape s, PagedPool pool, AttentionBatch b, int32_t rows_per_group,
                           int32_t max_slots) {
  __shared__ RowGroups g;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // The batch's groups and their tasks (metadata only: before waiting for the kernel before).
  if (warp == 0) scan_row_groups(b, rows_per_group, g);
  __syncthreads();
  const int32_t tasks = g.task0[g.count];
  if (static_cast<int32_t>(blockIdx.y) >= tasks) return;
  detail::begin_dependent_kernel();

  const int32_t hd = s.head_dim, group = s.num_heads / s.num_kv_heads, kvh = blockIdx.x;
  T* stages = reinterpret_cast<T*>(staged_values);
  float* sq = reinterpret_cast<float*>(stages + kSt * kTileKeys * hd);  // [max_slots][hd]
  float* sp = sq + max_slots * hd;                                           // [max_slots][kSplitScoreStride]
  float* red = sp + max_slots * kSplitScoreStride;                           // [max_slots][kWarps]
  float* red2 = red + max_slots * kWarps;
  const int32_t my_tasks = (tasks - static_cast<int32_t>(blockIdx.y) + gridDim.y - 1) / gridDim.y;
  const int32_t tiles = my_tasks * 2 * kTilesPerChunk;
#pragma unroll
  for (int i = 0; i < kSt - 1; ++i) issue_tile<kSt>(pool, b, g, i, tiles, group, hd, kvh, stages);
  int32_t tile = 0;  // the next tile to consume

  // Value chains: thread (vpart, d) runs the slots vpart, vpart + parts, ...
  const int span = hd, parts = kSplitThreads / span, vpart = tid / span, d = tid % span;

  for (int32_t k = 0; k < my_tasks; ++k) {
    const SplitTask t = split_task(b, g, static_cast<int32_t>(blockIdx.y + k * gridDim.y), group);
    const int32_t slots = t.slots;
    // The slots' queries (the previous task read them before its softmax's barriers).
    for (int i = tid; i < slots * hd; i += kSplitThreads) {
      const int32_t sl = i / hd, dd = i % hd;
      const int32_t row = t.row0 + t.first + sl / group;
      sq[i] = b.q[int64_t{row} * b.ld_q + (int64_t{kvh} * group + sl % group) * hd + dd];
    }

    // Scores of each K tile: warp w holds keys w, w + 8, w + 16, w + 24 of it (lane l: dims
    // l, l+32, ...) and scores them against 4 slots at a time: 16 dot products, each the
    // chunk kernel's chain, then one reduce-scatter (lanes L, L ^ 1: dot L / 2).
    for (int sub = 0; sub < kTilesPerChunk; ++sub, ++tile) {
      wait_oldest_tile<kSt>();
      __syncthreads();  // everyone's copies landed; the stage the next issue reuses is free
      issue_tile<kSt>(pool, b, g, tile + kSt - 1, tiles, group, hd, kvh, stages);
      const T* sk = stages + (tile % kSt) * (kTileKeys * hd);
      float kreg[4][kDimLanes];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int key = warp + u * kSplitWarps, jl = sub * kTileKeys + key;
#pragma unroll
        for (int dl = 0; dl < kDimLanes; ++dl)
          kreg[u][dl] = jl < t.count_max && lane + 32 * dl < hd ? kv_float(sk[key * hd + lane + 32 * dl]) : 0.0f;
      }
      for (int sl0 = 0; sl0 < slots; sl0 += 4) {
        float v[16];
        pass_dots(sq, sl0, slots, hd, lane, kreg, v);
        const float dot = reduce_scatter(v, lane);
        const int index = lane >> 1;
        const int u = index >> 2, sl = sl0 + (index & 3), jl = sub * kTileKeys + warp + u * kSplitWarps;
        if (sl < slots && (lane & 1) == 0)
          sp[sl * kSplitScoreStride + jl] = jl < t.count(t.first + sl / group) ? dot * s.scale : -INFINITY;
      }
    }
    __syncthreads();

    // Softmax numerators and the chunk's max and sum per slot (the chunk kernel's reductions).
    slot_softmax<kSplitThreads>(sp, kSplitScoreStride, red, red2, slots,
                                [&](int32_t sl) { return t.count(t.first + sl / group); });
    __syncthreads();
    if (tid < slots)
      store_slot_stats(s, b, red, red2, tid, t.row0 + t.first + tid / group, int64_t{kvh} * group + tid % group,
                       t.chunk);

    // Value sums over the V tiles: K chains a thread in registers (K rounded up).
    const int32_t chains = (slots + parts - 1) / parts;
    const ValueCtx vc{sp, vpart, parts, d, hd, group, kvh};
    if (chains <= 1) tile = value_phase<1, kSt>(s, pool, b, g, t, vc, tile, tiles, stages);
    else if (chains <= 2) tile = value_phase<2, kSt>(s, pool, b, g, t, vc, tile, tiles, stages);
    else if (chains <= 4) tile = value_phase<4, kSt>(s, pool, b, g, t, vc, tile, tiles, stages);
    else if (chains <= 5) tile = value_phase<5, kSt>(s, pool, b, g, t, vc, tile, tiles, stages);
    else if (chains <= 8) tile = value_phase<8, kSt>(s, pool, b, g, t, vc, tile, tiles, stages);
    else if (chains <= 10) tile = value_phase<10, kSt>(s, pool, b, g, t, vc, tile, tiles, stages);
    else tile = value_phase<16, kSt>(s, pool, b, g, t, vc, tile, tiles, stages);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");  // no copy outlives the block
}

/// Streaming multiprocessors of the current device (asked once: a launch under graph
/// capture must not query the runtime each time).
int32_t multiprocessors() {
  static const int32_t n = [] {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || count <= 0)
      return 132;
    return count;
  }();
  return n;
}

/// SPECPIPE_ATTENTION_SPLIT_BLOCKS in the environment (read once): blocks an SM the
/// kernel is built for, 2 (128 registers, a 4-stage ring; the default), 3 (80 registers, 4
/// stages) or 4 (64 registers, 3 stages). The same bits in every build.
int split_blocks() {
  static const int blocks = [] {
    const char* v = std::getenv("SPECPIPE_ATTENTION_SPLIT_BLOCKS");
    if (v != nullptr && std::strcmp(v, "3") == 0) return 3;
    if (v != nullptr && std::strcmp(v, "4") == 0) return 4;
    return 2;
  }();
  return blocks;
}

template <int kDimLanes, int kSt, int kBlocks, class T>
cudaError_t launch_split(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                         cudaStream_t stream) {
  const int32_t group = s.num_heads / s.num_kv_heads;
  const int32_t rows_per_group = std::min(b.total_tokens, std::max(1, kSplitMaxSlots / group));
  const int32_t max_slots = rows_per_group * group;
  const size_t bytes = size_t{kSt} * kTileKeys * s.head_dim * sizeof(T) +
                       size_t(max_slots) * (s.head_dim + kSplitScoreStride + 2 * kWarps) * sizeof(float);
  // The blocks an SM holds (228 KiB of shared memory an SM, 1 KiB of it reserved a block;
  // registers: kBlocks), over all kv heads; never more than the tasks.
  const int64_t resident = std::clamp<int64_t>(int64_t{228 * 1024} / int64_t(bytes + 1024), 1, kBlocks);
  const int64_t per_head = (resident * multiprocessors() + s.num_kv_heads - 1) / s.num_kv_heads;
  const int64_t split = std::min<int64_t>({per_head, int64_t{b.total_tokens} * b.max_chunks, 65535});
  auto* kernel = attention_split_kernel<kDimLanes, kSt, kBlocks, T>;
  cudaError_t e = allow_dynamic_shared(kernel, bytes);
  if (e != cudaSuccess) return e;
  e = detail::launch_dependent_shared(kernel, dim3(s.num_kv_heads, static_cast<unsigned>(split)),
                                      dim3(kSplitThreads), bytes, stream, true, s, pool, b, rows_per_group, max_slots);
  if (e != cudaSuccess) return e;
  return launch_head_merge(s, b, outb, stream);
}

/// SPECPIPE_ATTENTION_SPLIT=1 in the environment (read once) takes the split path for 1..16
/// rows; unset (the default) keeps the previous paths (the chunk kernel for decode, the
/// window kernel for 2..16 rows), which were faster on an H100 at every context measured
/// (docs/BENCHMARKS.md section 6). The same bits either way.
bool split_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SPECPIPE_ATTENTION_SPLIT");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace

template <class T>
bool use_split_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b) {
  return split_enabled() && can_stage<T>(s, pool, b) && s.head_dim > 32 && s.head_dim <= 128 &&
         kSplitThreads / s.head_dim * kMaxChains >= kSplitMaxSlots;
}

template <class T>
cudaError_t launch_split_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                              cudaStream_t stream) {
  switch (split_blocks()) {
    case 3:
      return s.head_dim <= 64 ? launch_split<2, 4, 3, T>(s, pool, b, outb, stream)
                              : launch_split<4, 4, 3, T>(s, pool, b, outb, stream);
    case 4:
      return s.head_dim <= 64 ? launch_split<2, 3, 4, T>(s, pool, b, outb, stream)
                              : launch_split<4, 3, 4, T>(s, pool, b, outb, stream);
    default:
      return s.head_dim <= 64 ? launch_split<2, 4, 2, T>(s, pool, b, outb, stream)
                              : launch_split<4, 4, 2, T>(s, pool, b, outb, stream);
  }
}

template bool use_split_path<float>(const AttentionShape&, const PagedPool&, const AttentionBatch&);
template bool use_split_path<uint16_t>(const AttentionShape&, const PagedPool&, const AttentionBatch&);
template cudaError_t launch_split_path<float>(const AttentionShape&, const PagedPool&, const AttentionBatch&,
                                              uint16_t*, cudaStream_t);
template cudaError_t launch_split_path<uint16_t>(const AttentionShape&, const PagedPool&, const AttentionBatch&,
                                                 uint16_t*, cudaStream_t);

}  // namespace specpipe::cuda::attention_detail
