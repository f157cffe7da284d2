// gemm_mma_bf16: the weight-streaming tensor-core GEMM for decode-sized m (gemm.h).
//
// Decode reads every weight once per token, so the GEMM is a race to stream W at the
// memory's rate; the few activation rows ride along. W is the mma's A operand (16 output
// features a block), the rows of x are its B operand (8 rows an n-tile), so a
// weight fragment is loaded once for all rows. Batch invariance: a row of x is one B
// column, and an mma's output column depends on its own column only; the k order (the
// warp split, the steps, the fixed cross-warp sum) depends on k alone, never on m or on
// the other rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/early_launch.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/pdl.cuh"

namespace specpipe::cuda {
namespace {

/// -1 until read from SPECPIPE_GEMM_MMA_VARIANT (gemm.h).
std::atomic<int> mma_variant{-1};

/// early_launch.h: false while a NoOneRowEarlyLaunch lives on this thread.
thread_local bool one_row_early = true;

}  // namespace

bool one_row_early_launch() { return one_row_early; }

NoOneRowEarlyLaunch::NoOneRowEarlyLaunch(bool active) : previous_(one_row_early) {
  static const bool ignored = [] {
    const char* e = std::getenv("SPECPIPE_ONE_ROW_EARLY_LAUNCH");
    return e != nullptr && std::strcmp(e, "1") == 0;
  }();
  if (active && !ignored) one_row_early = false;
}

NoOneRowEarlyLaunch::~NoOneRowEarlyLaunch() { one_row_early = previous_; }

int gemm_mma_variant() {
  int v = mma_variant.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("SPECPIPE_GEMM_MMA_VARIANT");
    v = e != nullptr && *e != '\0' ? std::atoi(e) & kMmaVariantMask : kDefaultMmaVariant;
    mma_variant.store(v, std::memory_order_relaxed);
  }
  return v;
}

void set_gemm_mma_variant(int variant) { mma_variant.store(variant & kMmaVariantMask, std::memory_order_relaxed); }

namespace {

constexpr int kWarps = 4;          // warps of a block, each a quarter of the k steps
constexpr int kTile = 16;          // output features of a block (the mma's M)
constexpr int kStep = 32;          // k of one step: 4 lanes x 8 bf16 per feature row
constexpr int kUnroll = 4;         // steps whose weights are loaded together
constexpr int kMaxTiles = kMaxMmaRows / 8;

/// What a block does with its sums (gemm_mma_kernel's kEpi).
constexpr int kPlainEpi = 0;  // y = the sums
constexpr int kSiluEpi = 1;   // yb = bf16(silu(gate) * up) (gemm_mma_silu_bf16)
constexpr int kRopeEpi = 2;   // q, k rotated, k and v to their slots (gemm_mma_rope_kv_bf16)

/// Weights are read once per forward: stream them past L1. kWideFetch (variant bit 128):
/// a miss asks L2 to fetch the whole aligned 256 bytes around it from DRAM
/// (`.L2::256B`), the four warps' pieces of one feature row at one unroll step (a warp
/// loads 64 bytes of each of 8 rows, warps w .. w + 3 the next 64s), so DRAM sees one
/// 256-byte request per row and step where it saw four of 64 bytes. Same values loaded.
template <bool kWideFetch>
__device__ inline uint4 load_stream(const uint16_t* p) {
  uint4 v;
  if constexpr (kWideFetch)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  return v;
}

/// D += A B for one m16n8k16 (A: 16 features x 16 k, B: 16 k x 8 rows; bf16, f32 sums).
__device__ inline void mma16816(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// What the RoPE epilogue of a lane reads besides its sums, for rows 8j + 2t + e of tile
/// `tile` (e < 2): the rotation's cos and sin of dim i (q and k tiles) and the rows' slots.
/// Positions, slots and the table are uploaded before the forward, so a block of a grid
/// that takes one tile loads them before it waits for the kernel before (as
/// qk_norm_rope_kv does).
struct RopeRows {
  float ci[2] = {0.0f, 0.0f}, si[2] = {0.0f, 0.0f};
  int64_t slot[2] = {0, 0};
};

__device__ inline RopeRows rope_rows(const QkvRope& r, int64_t tile, int j, int32_t m) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int32_t tiles_per_head = r.head_dim / kTile, half = r.head_dim / 2;
  const bool rotated = tile < (r.q_dim + r.kv_dim) / kTile;
  const int32_t i = static_cast<int32_t>(tile % tiles_per_head) * 8 + g;
  RopeRows o;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int row = 8 * j + 2 * t + e;
    if (row >= m) continue;
    o.slot[e] = r.slots[row];
    if (rotated) {
      const int64_t at = int64_t{r.positions[row]} * half + i;
      o.ci[e] = r.cos[at];
      o.si[e] = r.sin[at];
    }
  }
  return o;
}

/// The RoPE epilogue of gemm_mma_rope_kv_bf16 (gemm.h), lane (g, t) of warp 0 holding
/// v = the sums of tile `tile`, n-tile j: v[e] of row 8j + 2t + e (e < 2) and feature
/// f0 + g, v[e + 2] of the same row and feature f0 + g + 8 (rr: rope_rows of the same).
/// Over q and k (tiles below (q_dim + kv_dim) / 16) W's rows are laid out by
/// interleave_rope_halves, so those two are dims i = 8c + g and i + head_dim / 2 of head
/// `tile / (head_dim / 16)` (c = tile mod that): the pair one RoPE rotation takes. Each is
/// rotated with qk_norm_rope_kv's formula (no norm), stored to y and, for k, to its slot;
/// v's tiles are in W's own order and go to y and to their slot unrotated.
__device__ inline void rope_epilogue(const QkvRope& r, const RopeRows& rr, int64_t tile, int j, const float* v,
                                     float* y, int64_t ldy, int32_t m, int64_t n) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int32_t tiles_per_head = r.head_dim / kTile, half = r.head_dim / 2;
  const int64_t qk_tiles = (r.q_dim + r.kv_dim) / kTile;
  if (tile < qk_tiles) {
    const int32_t i = static_cast<int32_t>(tile % tiles_per_head) * 8 + g;
    const int64_t lo = tile / tiles_per_head * r.head_dim + i;  // feature of dim i; dim i + half at lo + half
    const bool is_k = lo >= r.q_dim;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int row = 8 * j + 2 * t + e;
      if (row >= m) continue;
      const float ci = rr.ci[e], si = rr.si[e];
      const float a = v[e], b = v[e + 2];
      const float ra = a * ci - b * si;
      const float rb = b * ci + a * si;
      y[row * ldy + lo] = ra;
      y[row * ldy + lo + half] = rb;
      if (is_k) {
        float* dst = r.rows_k + rr.slot[e] * r.slot_stride + (lo - r.q_dim);
        dst[0] = ra;
        dst[half] = rb;
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = 8 * j + 2 * t + (e & 1);
      const int64_t f = tile * kTile + g + (e >= 2 ? 8 : 0);
      if (row >= m || f >= n) continue;
      y[row * ldy + f] = v[e];
      r.rows_v[rr.slot[e & 1] * r.slot_stride + (f - r.q_dim - r.kv_dim)] = v[e];
    }
  }
}

/// One tile: features [16 b, 16 b + 16) for rows [0, 8 * kTiles). Lane (g = lane / 4,
/// t = lane % 4) loads bf16 k = s*32 + 8t .. +7 of feature rows g and g + 8, and of x
/// rows 8j + g; the mma's k slots are a permutation of those 32 k, the same for A and B:
/// words 0-1 feed the first mma, words 2-3 the second.
/// kEpi == kSiluEpi: W's rows are gate and up interleaved by 8 (interleave_gate_up), so a
/// lane holds gate and up of MLP feature 8 b + g side by side, and the block writes
/// yb = bf16(silu(gate) * up) to [m, ldy] instead of y (n = W's rows = 2 features).
/// kEpi == kRopeEpi: q and k rows interleaved by half heads (interleave_rope_halves), so
/// a lane holds the two dims of a RoPE pair; rope_epilogue rotates them and writes y and
/// the K/V slots. No epilogue changes a sum.
/// kDepth: steps whose weights one register buffer holds (4; 8 doubles the loads in
/// flight of a warp for grids of at most two blocks an SM). kPersistent: the block takes
/// tiles blockIdx.x, + gridDim.x, ... and its weight loads run on across its tiles, so the
/// next tile's loads are in flight during a tile's cross-warp sum and store (no block
/// start, no drained pipeline per tile). Neither changes a sum: a warp's steps are summed
/// in ascending order and the warps in warp order in every variant.
/// Blocks an SM the register budget must allow: 4 for persistent blocks of one row tile
/// (as many as the plain kernel holds; at 134 registers they had 3 and lost to it),
/// else no bound.
constexpr int min_blocks(int tiles, bool persistent) { return persistent && tiles == 1 ? 4 : 1; }

template <int kTiles, int kEpi, int kDepth, bool kPersistent, bool kPipeX = false, bool kWideFetch = false>
__global__ void __launch_bounds__(kWarps * 32, min_blocks(kTiles, kPersistent))
    gemm_mma_kernel(const uint16_t* __restrict__ x, int64_t ldx, const uint16_t* __restrict__ w, int64_t n, int64_t k,
                    float* __restrict__ y, uint16_t* __restrict__ yb, int64_t ldy, int32_t m, bool early_launch,
                    QkvRope rope) {
  __shared__ float partial[kWarps - 1][kTiles][4][32];
  // The RoPE epilogue's cos, sin and slots, loaded before the wait where a block has one
  // tile of at most 16 rows (more would cost the main loop registers).
  constexpr bool kPrefetchRope = kEpi == kRopeEpi && !kPersistent && kTiles <= 2;
  [[maybe_unused]] RopeRows rope_pre[kPrefetchRope ? kTiles : 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t steps = k / kStep;
  // Warp `warp` takes steps warp, warp + kWarps, ...; kDepth of them per iteration.
  constexpr int64_t per_iter = int64_t{kWarps} * kDepth;
  const int32_t iters = static_cast<int32_t>((steps + per_iter - 1) / per_iter);
  // Iteration gi of this block: iteration gi % iters of its (gi / iters)-th tile.
  int32_t total = iters;
  if constexpr (kPersistent) {
    const int32_t tiles = static_cast<int32_t>((n + kTile - 1) / kTile);
    total = (tiles - static_cast<int32_t>(blockIdx.x) + static_cast<int32_t>(gridDim.x) - 1) /
            static_cast<int32_t>(gridDim.x) * iters;
  }
  auto tile_of = [&](int32_t gi) -> int64_t {
    if constexpr (kPersistent) return blockIdx.x + int64_t{gi / iters} * gridDim.x;
    return blockIdx.x;
  };
  auto iter_of = [&](int32_t gi) -> int32_t {
    if constexpr (kPersistent) return gi % iters;
    return gi;
  };

  // Two register buffers of kDepth steps' weights, filled and drained in turn, so one
  // iteration's loads are in flight while the other's are multiplied (a copy from one to
  // the other would wait for the loads to land). One buffer with more warps per SM, and
  // 8 warps per block, were slower on an H100 (kernels/cuda/README.md).
  uint4 buf_lo[2][kDepth], buf_hi[2][kDepth];
  auto load_weights = [&](int b, int32_t gi) {
    const int64_t f0 = tile_of(gi) * kTile, it = iter_of(gi);
    // Rows of W past n read the last row (kept in bounds; their sums are never stored).
    const uint16_t* w_lo = w + min(f0 + g, n - 1) * k + 8 * t;
    const uint16_t* w_hi = w + min(f0 + g + 8, n - 1) * k + 8 * t;
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const int64_t s = it * per_iter + u * kWarps + warp;
      if (s < steps) {
        buf_lo[b][u] = load_stream<kWideFetch>(w_lo + s * kStep);
        buf_hi[b][u] = load_stream<kWideFetch>(w_hi + s * kStep);
      }
    }
  };
  float acc[kTiles][4] = {};
  // Every x fragment of an iteration together, so their loads overlap (one at a time,
  // each in front of its mma, this kernel was ~10% slower).
  auto load_x = [&](uint4 (&xb)[kDepth][kTiles], int64_t it) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const int64_t s = it * per_iter + u * kWarps + warp;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const int row = 8 * j + g;
        xb[u][j] = make_uint4(0, 0, 0, 0);  // rows past m multiply zeros; their sums are dropped
        if (row < m && s < steps) xb[u][j] = __ldg(reinterpret_cast<const uint4*>(x + row * ldx + s * kStep + 8 * t));
      }
    }
  };
  // kPipeX (one tile a block): the next iteration's x fragments, loaded as an iteration's
  // mma are issued, so no iteration waits for its x before it can refill its weights.
  [[maybe_unused]] uint4 x_next[kPipeX ? kDepth : 1][kPipeX ? kTiles : 1];
  auto multiply = [&](int b, int64_t it) {
    uint4 xb[kDepth][kTiles];
    if constexpr (kPipeX) {
#pragma unroll
      for (int u = 0; u < kDepth; ++u)
#pragma unroll
        for (int j = 0; j < kTiles; ++j) xb[u][j] = x_next[u][j];
    } else {
      load_x(xb, it);
    }
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      const int64_t s = it * per_iter + u * kWarps + warp;
      if (s >= steps) break;
      const uint4& lo = buf_lo[b][u];
      const uint4& hi = buf_hi[b][u];
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        mma16816(acc[j], lo.x, hi.x, lo.y, hi.y, xb[u][j].x, xb[u][j].y);
        mma16816(acc[j], lo.z, hi.z, lo.w, hi.w, xb[u][j].z, xb[u][j].w);
      }
    }
    if constexpr (kPipeX) load_x(x_next, it + 1);  // past the last step: no loads
  };
  // Sum the warps' partials in warp order, then store: acc[j] holds features g, g + 8
  // (elements 0-1, 2-3) of rows 8j + 2t, 8j + 2t + 1.
  auto finish = [&](int64_t tile) {
    const int64_t f0 = tile * kTile;
    if (warp > 0) {
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) partial[warp - 1][j][e][lane] = acc[j][e];
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          v[e] = acc[j][e];
#pragma unroll
          for (int p = 0; p < kWarps - 1; ++p) v[e] += partial[p][j][e][lane];
        }
        if constexpr (kEpi == kSiluEpi) {
          const int64_t f = f0 / 2 + g;  // gate in v[0..1], up in v[2..3]
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int row = 8 * j + 2 * t + e;
            if (row < m && f < n / 2) yb[row * ldy + f] = detail::f32_to_bf16_rne(detail::silu_gate_value(v[e], v[e + 2]));
          }
        } else if constexpr (kEpi == kRopeEpi) {
          if constexpr (kPrefetchRope) rope_epilogue(rope, rope_pre[j], tile, j, v, y, ldy, m, n);
          else rope_epilogue(rope, rope_rows(rope, tile, j, m), tile, j, v, y, ldy, m, n);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = 8 * j + 2 * t + (e & 1);
            const int64_t f = f0 + g + (e >= 2 ? 8 : 0);
            if (row < m && f < n) y[row * ldy + f] = v[e];
          }
        }
      }
    }
    if constexpr (kPersistent) {
      __syncthreads();  // warp 0 has read `partial` before the next tile writes it
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;
    }
  };
  // One iteration: multiply buffer b, refill it two iterations ahead (possibly the next
  // tile's weights), and close the tile after its last iteration.
  auto step = [&](int b, int32_t gi) {
    multiply(b, iter_of(gi));
    if (gi + 2 < total) load_weights(b, gi + 2);
    if constexpr (kPersistent) {
      if (iter_of(gi) == iters - 1) {
        if (gi == total - 1) detail::allow_dependent_launch();
        finish(tile_of(gi));
      }
    }
  };
  // Weights do not depend on the kernel before: the first loads are issued before waiting
  // for it (under programmatic dependent launch, while it still runs).
  load_weights(0, 0);
  if (total > 1) load_weights(1, 1);
  if constexpr (kPrefetchRope) {
    if (warp == 0)
#pragma unroll
      for (int j = 0; j < kTiles; ++j) rope_pre[j] = rope_rows(rope, blockIdx.x, j, m);
  }
  // early_launch (a one-wave grid): the next kernel may launch now; its blocks wait,
  // resident, for this grid to finish.
  if (early_launch) detail::allow_dependent_launch();
  detail::wait_for_prerequisite_grid();
  if constexpr (kPipeX) load_x(x_next, 0);
  for (int32_t gi = 0; gi < total; gi += 2) {
    step(0, gi);
    if (gi + 1 >= total) break;
    step(1, gi + 1);
  }
  if constexpr (!kPersistent) {
    detail::allow_dependent_launch();
    finish(blockIdx.x);
  }
}

/// Resident blocks of one kernel variant on the device (SMs x blocks an SM), asked on its
/// first launch (an eager forward runs before a shape is captured into a graph) and kept:
/// a persistent grid fills this many. One device per process, as the engine runs.
template <int kTiles, int kEpi, int kDepth, bool kPersistent, bool kPipeX = false>
int64_t resident_blocks() {
  static const int64_t blocks = [] {
    int dev = 0, sms = 0, per_sm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, gemm_mma_kernel<kTiles, kEpi, kDepth, kPersistent, kPipeX>, kWarps * 32, 0) != cudaSuccess)
      return int64_t{0};
    return int64_t{sms} * per_sm;
  }();
  return blocks;
}

template <int kTiles, int kEpi, int kDepth, bool kPersistent, bool kPipeX = false>
cudaError_t launch_variant(int64_t blocks, const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k,
                           float* y, uint16_t* yb, int64_t ldy, int32_t m, cudaStream_t stream, bool overlap_previous,
                           const QkvRope& rope) {
  const int variant = gemm_mma_variant();
  const bool small_weights = 2 * n * k <= kEarlyLaunchMaxWeightBytes;  // W: n rows of k bf16
  // Bit 8 only where the thread allows it (early_launch.h: not a draft beside a verify).
  const bool one_row = (variant & 8) && small_weights && m == 1 && one_row_early_launch();
  const bool early_launch = ((variant & 4) || one_row) && overlap_previous &&
                            blocks <= resident_blocks<kTiles, kEpi, kDepth, kPersistent, kPipeX>();
  // Bit 128 (decode steps and verify windows, up to 16 rows, W over
  // kEarlyLaunchMaxWeightBytes): the wide L2 fetch, the same kernel otherwise (its
  // occupancy is the plain build's: the hint costs no register). Smaller weights keep the
  // plain loads: with the hint on every GEMM the demo pair (whose weights fit in L2) drafted
  // and verified at the same kernel times but sped up 1-3% less in two pairs of runs.
  if constexpr (kTiles <= 2) {
    if ((variant & 128) && !small_weights)
      return detail::launch_dependent(gemm_mma_kernel<kTiles, kEpi, kDepth, kPersistent, kPipeX, true>,
                                      dim3(static_cast<unsigned>(blocks)), dim3(kWarps * 32), stream,
                                      overlap_previous, x, ldx, w, n, k, y, yb, ldy, m, early_launch, rope);
  }
  return detail::launch_dependent(gemm_mma_kernel<kTiles, kEpi, kDepth, kPersistent, kPipeX>,
                                  dim3(static_cast<unsigned>(blocks)), dim3(kWarps * 32), stream, overlap_previous, x,
                                  ldx, w, n, k, y, yb, ldy, m, early_launch, rope);
}

/// One pass over W for up to kMaxMmaRows rows, in the variant gemm_mma_variant() allows:
/// deep buffers where the plain grid leaves at most two blocks an SM (one row tile only:
/// more would not fit the registers), persistent blocks where it needs more than one wave
/// (up to two row tiles).
template <int kTiles, int kEpi>
cudaError_t launch(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, float* y, uint16_t* yb,
                   int64_t ldy, int32_t m, cudaStream_t stream, bool overlap_previous, const QkvRope& rope) {
  const int64_t tiles = (n + kTile - 1) / kTile;
  const int variant = gemm_mma_variant();
  // Decode steps and verify windows (up to 16 rows) only: the variants of longer
  // batches would double this file's kernels for forwards that are not weight-bound.
  if constexpr (kTiles <= 2) {
    if (variant & 2) {
      const int64_t resident = resident_blocks<kTiles, kEpi, kUnroll, true>();
      if (resident > 0 && tiles > resident) {
        const int64_t per_block = (tiles + resident - 1) / resident;  // equal shares: no tail
        return launch_variant<kTiles, kEpi, kUnroll, true>((tiles + per_block - 1) / per_block, x, ldx, w, n, k,
                                                                y, yb, ldy, m, stream, overlap_previous, rope);
      }
    }
  }
  if constexpr (kTiles == 1) {
    if (variant & 1) {
      // Bit 64 for weights of more than kEarlyLaunchMaxWeightBytes (the 8B shape's o_proj
      // and down_proj gained; the 0.6B shape's down_proj, 6 MiB, lost 1-2% of its step).
      const bool pipe_x = (variant & 64) && 2 * n * k > kEarlyLaunchMaxWeightBytes;
      const int64_t resident = pipe_x ? resident_blocks<kTiles, kEpi, 2 * kUnroll, false, true>()
                                      : resident_blocks<kTiles, kEpi, 2 * kUnroll, false>();
      const int64_t plain = resident_blocks<kTiles, kEpi, kUnroll, false>();
      if (resident > 0 && plain > 0 && tiles <= resident && 2 * tiles <= plain) {
        if (pipe_x)
          return launch_variant<kTiles, kEpi, 2 * kUnroll, false, true>(tiles, x, ldx, w, n, k, y, yb, ldy, m,
                                                                        stream, overlap_previous, rope);
        return launch_variant<kTiles, kEpi, 2 * kUnroll, false>(tiles, x, ldx, w, n, k, y, yb, ldy, m, stream,
                                                                overlap_previous, rope);
      }
    }
  }
  return launch_variant<kTiles, kEpi, kUnroll, false>(tiles, x, ldx, w, n, k, y, yb, ldy, m, stream,
                                                      overlap_previous, rope);
}

/// Asks every variant's occupancy on the first GEMM of the process (an eager forward), so
/// no occupancy query runs while a later forward is being captured into a graph.
void query_resident_blocks() {
  static const bool asked = [] {
    // Every epilogue's variants (plain, SiLU gate, RoPE + K/V): their registers differ.
    [&]<int... kE>(std::integer_sequence<int, kE...>) {
      ((resident_blocks<1, kE, kUnroll, false>(), resident_blocks<1, kE, 2 * kUnroll, false>(),
        resident_blocks<1, kE, 2 * kUnroll, false, true>(),
        resident_blocks<1, kE, kUnroll, true>(), resident_blocks<2, kE, kUnroll, false>(),
        resident_blocks<2, kE, kUnroll, true>(), resident_blocks<4, kE, kUnroll, false>(),
        resident_blocks<kMaxTiles, kE, kUnroll, false>()),
       ...);
    }(std::integer_sequence<int, kPlainEpi, kSiluEpi, kRopeEpi>{});
    return true;
  }();
  (void)asked;
}

/// Both entry points: W of n rows, y (float) or yb (the SiLU gate's bf16) of ldy.
template <int kEpi>
cudaError_t gemm_mma(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, float* y, uint16_t* yb,
                     int64_t ldy, int32_t m, cudaStream_t stream, bool overlap_previous, QkvRope rope = {}) {
  if (k % kStep != 0 || ldx % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0)
    return cudaErrorInvalidValue;
  if (m <= 0 || n <= 0) return cudaSuccess;
  query_resident_blocks();
  // Rows in groups of kMaxMmaRows, each group's rows in the fewest n-tiles that hold them:
  // a row's sums are the same in every variant (see the header comment).
  for (int32_t r0 = 0; r0 < m; r0 += kMaxMmaRows) {
    const int32_t rows = std::min(m - r0, kMaxMmaRows);
    const uint16_t* xr = x + int64_t{r0} * ldx;
    float* yr = y ? y + int64_t{r0} * ldy : nullptr;
    uint16_t* ybr = yb ? yb + int64_t{r0} * ldy : nullptr;
    QkvRope rr = rope;  // the group's rows' positions and slots
    if (rr.positions) {
      rr.positions += r0;
      rr.slots += r0;
    }
    cudaError_t e;
    if (rows <= 8) e = launch<1, kEpi>(xr, ldx, w, n, k, yr, ybr, ldy, rows, stream, overlap_previous, rr);
    else if (rows <= 16) e = launch<2, kEpi>(xr, ldx, w, n, k, yr, ybr, ldy, rows, stream, overlap_previous, rr);
    else if (rows <= 32) e = launch<4, kEpi>(xr, ldx, w, n, k, yr, ybr, ldy, rows, stream, overlap_previous, rr);
    else e = launch<kMaxTiles, kEpi>(xr, ldx, w, n, k, yr, ybr, ldy, rows, stream, overlap_previous, rr);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t gemm_mma_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, float* y,
                          int64_t ldy, int32_t m, cudaStream_t stream, bool overlap_previous) {
  return gemm_mma<kPlainEpi>(x, ldx, w, n, k, y, nullptr, ldy, m, stream, overlap_previous);
}

cudaError_t gemm_mma_silu_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t n, int64_t k, uint16_t* yb,
                               int64_t ldyb, int32_t m, cudaStream_t stream, bool overlap_previous) {
  if (n % 8 != 0) return cudaErrorInvalidValue;
  return gemm_mma<kSiluEpi>(x, ldx, w, 2 * n, k, nullptr, yb, ldyb, m, stream, overlap_previous);
}

cudaError_t gemm_mma_rope_kv_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t k, float* y, int64_t ldy,
                                  int32_t m, const QkvRope& rope, cudaStream_t stream, bool overlap_previous) {
  const int64_t n = int64_t{rope.q_dim} + 2 * int64_t{rope.kv_dim};
  if (rope.head_dim <= 0 || rope.head_dim % kTile != 0 || rope.q_dim % rope.head_dim != 0 ||
      rope.kv_dim % rope.head_dim != 0 || ldy < n || !rope.cos || !rope.sin || !rope.positions || !rope.slots ||
      !rope.rows_k || !rope.rows_v)
    return cudaErrorInvalidValue;
  return gemm_mma<kRopeEpi>(x, ldx, w, n, k, y, nullptr, ldy, m, stream, overlap_previous, rope);
}

void interleave_rope_halves(const uint16_t* qkv, int64_t q_dim, int64_t kv_dim, int64_t head_dim, int64_t k,
                            uint16_t* out) {
  const int64_t half = head_dim / 2;
  for (int64_t h0 = 0; h0 < q_dim + kv_dim; h0 += head_dim)  // q's and k's heads
    for (int64_t c = 0; c < half; c += 8)
      for (int64_t i = 0; i < 8; ++i) {  // dims c + i, then c + i + half
        std::copy_n(qkv + (h0 + c + i) * k, k, out + (h0 + 2 * c + i) * k);
        std::copy_n(qkv + (h0 + half + c + i) * k, k, out + (h0 + 2 * c + 8 + i) * k);
      }
  std::copy_n(qkv + (q_dim + kv_dim) * k, kv_dim * k, out + (q_dim + kv_dim) * k);  // v as it is
}

void interleave_gate_up(const uint16_t* gate_up, int64_t n, int64_t k, uint16_t* out) {
  for (int64_t f0 = 0; f0 < n; f0 += 8)
    for (int64_t half = 0; half < 2; ++half)  // 8 gate rows, then the same 8 features' up rows
      for (int64_t i = 0; i < 8; ++i)
        std::copy_n(gate_up + (half * n + f0 + i) * k, k, out + (2 * f0 + 8 * half + i) * k);
}

}  // namespace specpipe::cuda
