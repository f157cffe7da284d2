#include "kernels/cpu/linear.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace specpipe::cpu {
namespace {

// Weight loaders: the 8 outputs' weights at k = 2i and 2i + 1 from a packed panel
// (layouts in packed_matrix.h). `kPairBytes` is the distance between consecutive i.
struct LoadF32 {
  static constexpr int64_t kPairBytes = 2 * kPanelOutputs * 4;
  static void load(const std::byte* p, __m256& a, __m256& b) {
    a = _mm256_load_ps(reinterpret_cast<const float*>(p));
    b = _mm256_load_ps(reinterpret_cast<const float*>(p) + 8);
  }
};
struct LoadF16 {
  static constexpr int64_t kPairBytes = 2 * kPanelOutputs * 2;
  static void load(const std::byte* p, __m256& a, __m256& b) {
    a = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
    b = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p) + 1));
  }
};
// A BF16 value is the high half of its float32: shifting each 32-bit lane (w[2i],
// w[2i+1]) left by 16 gives w[2i], masking its low half gives w[2i+1]. Two integer ops
// per 16 weights, no shuffle.
struct LoadBf16 {
  static constexpr int64_t kPairBytes = 2 * kPanelOutputs * 2;
  static void load(const std::byte* p, __m256& a, __m256& b) {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    a = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    b = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
};

struct Panels {
  const std::byte* first;  // panel of the tile's first 8 outputs
  size_t stride;           // bytes from one panel to the next
};

/// Bytes ahead of its weight reads that a tile of 4 or more rows prefetches into L2.
/// Such a tile computes for ~3x longer per byte than a 1-row one, and the hardware
/// prefetcher, which stays inside a 4 KiB page, leaves each new page of its panels to a
/// demand miss: 5 x 2 tiles ran ~15-20% faster with this (one core of the CI VM, weights
/// streamed from memory); a prefetch changes no arithmetic and never faults past the end.
constexpr int64_t kPrefetchBytes = 2048;

/// The micro-kernel: MR rows of x against NV panels (8 NV outputs). Each accumulator
/// lane is one output's FMA chain over k = 0, 1, 2, ...: nothing in its arithmetic
/// depends on MR or NV (batch invariance).
///
/// Every loop over r and v is unrolled before GCC's scalar replacement runs (the
/// pragmas): otherwise acc[][] stays an array in memory and each iteration stores all
/// of it to the stack, 8 dead stores per 16 FMAs in the 2 x 4 tile.
template <int MR, int NV, typename Load>
inline void tile(const float* x, int64_t ldx, Panels w, int64_t k, const float* bias, float* y,
                 int64_t ldy, bool accumulate, int64_t valid) {
  __m256 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
  if constexpr (MR >= 4) {
    // Many rows, few panels: the panels' weights are widened once into registers and
    // each row's two inputs are broadcast in turn (MR x NV accumulators + 2 NV weights
    // + 1 broadcast <= 16 registers).
    for (int64_t i = 0; i < k / 2; ++i) {
      __m256 wa[NV], wb[NV];
      if ((i * Load::kPairBytes) % 64 == 0)  // once a cache line of each panel
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v)
          _mm_prefetch(reinterpret_cast<const char*>(w.first + v * w.stride + i * Load::kPairBytes + kPrefetchBytes),
                       _MM_HINT_T1);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) Load::load(w.first + v * w.stride + i * Load::kPairBytes, wa[v], wb[v]);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const __m256 xa = _mm256_broadcast_ss(x + r * ldx + 2 * i);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(xa, wa[v], acc[r][v]);
        const __m256 xb = _mm256_broadcast_ss(x + r * ldx + 2 * i + 1);
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(xb, wb[v], acc[r][v]);
      }
    }
  } else {
    // Few rows: the rows' inputs are broadcast once and each panel's weights widened
    // in turn.
    for (int64_t i = 0; i < k / 2; ++i) {
      __m256 xa[MR], xb[MR];
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        xa[r] = _mm256_broadcast_ss(x + r * ldx + 2 * i);
        xb[r] = _mm256_broadcast_ss(x + r * ldx + 2 * i + 1);
      }
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        __m256 wa, wb;
        Load::load(w.first + v * w.stride + i * Load::kPairBytes, wa, wb);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
          acc[r][v] = _mm256_fmadd_ps(xa[r], wa, acc[r][v]);
          acc[r][v] = _mm256_fmadd_ps(xb[r], wb, acc[r][v]);
        }
      }
    }
  }
  // Epilogue. The accumulators are only ever indexed by constants, so they stay in
  // registers through the loop above.
  if (valid >= NV * kPanelOutputs) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        __m256 out = acc[r][v];
        float* dst = y + r * ldy + v * kPanelOutputs;
        if (bias) out = _mm256_add_ps(out, _mm256_loadu_ps(bias + v * kPanelOutputs));
        if (accumulate) out = _mm256_add_ps(_mm256_loadu_ps(dst), out);
        _mm256_storeu_ps(dst, out);
      }
    return;
  }
  alignas(32) float lanes[MR][NV * kPanelOutputs];  // the matrix's last, partial panel
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) _mm256_store_ps(&lanes[r][v * kPanelOutputs], acc[r][v]);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
    for (int64_t o = 0; o < valid; ++o) {
      float value = lanes[r][o];
      if (bias) value = value + bias[o];
      float* dst = y + r * ldy + o;
      *dst = accumulate ? *dst + value : value;
    }
}

/// Where the CPU has AVX-512 (the build targets x86-64-v3, so this is chosen at run
/// time): BF16 tiles of 4-5 rows take 8 panels, two panels a 16-lane vector. A 5-token
/// verify window is FMA-bound on AVX2 (5 x 2 tiles at about half the core's peak while
/// the weights stream); here it issues half the FMA instructions, widens each weight once
/// for all rows as before, and streams 8 panels side by side as the 1-row GEMV does. Each
/// lane is still one output's FMA chain over k in ascending order, then `+ bias`, then
/// added to y: the same bits as the AVX2 tiles. SPECPIPE_CPU_AVX512=0 turns it off.
constexpr int64_t kWidePanels = 8;

template <int MR>
__attribute__((target("avx512f"))) void tile_bf16_avx512(const float* x, int64_t ldx, Panels w, int64_t k,
                                                          const float* bias, float* y, int64_t ldy, bool accumulate) {
  constexpr int NZ = kWidePanels / 2;  // vectors of 16 outputs: MR x NZ accumulators + 2 NZ weights <= 32
  constexpr int64_t kPairBytes = LoadBf16::kPairBytes;
  __m512 acc[MR][NZ];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int z = 0; z < NZ; ++z) acc[r][z] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t i = 0; i < k / 2; ++i) {
    if ((i * kPairBytes) % 64 == 0)
#pragma GCC unroll 16
      for (int v = 0; v < kWidePanels; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(w.first + v * w.stride + i * kPairBytes + kPrefetchBytes),
                     _MM_HINT_T1);
    __m512 wa[NZ], wb[NZ];
#pragma GCC unroll 16
    for (int z = 0; z < NZ; ++z) {
      // Panels 2z and 2z + 1: lanes 0-7 and 8-15, widened as in LoadBf16.
      const std::byte* p = w.first + 2 * z * w.stride + i * kPairBytes;
      // (a masked broadcast rather than _mm512_inserti64x4, and the zero-masked shift:
      // the plain forms' undefined sources trip GCC 12's -Wmaybe-uninitialized; the
      // same instructions)
      const __m512i v = _mm512_mask_broadcast_i64x4(
          _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(p))), 0xf0,
          _mm256_load_si256(reinterpret_cast<const __m256i*>(p + w.stride)));
      wa[z] = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, v, 16));
      wb[z] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 xa = _mm512_set1_ps(x[r * ldx + 2 * i]);
#pragma GCC unroll 16
      for (int z = 0; z < NZ; ++z) acc[r][z] = _mm512_fmadd_ps(xa, wa[z], acc[r][z]);
      const __m512 xb = _mm512_set1_ps(x[r * ldx + 2 * i + 1]);
#pragma GCC unroll 16
      for (int z = 0; z < NZ; ++z) acc[r][z] = _mm512_fmadd_ps(xb, wb[z], acc[r][z]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 16
    for (int z = 0; z < NZ; ++z) {
      __m512 out = acc[r][z];
      float* dst = y + r * ldy + z * 16;
      if (bias) out = _mm512_add_ps(out, _mm512_loadu_ps(bias + z * 16));
      if (accumulate) out = _mm512_add_ps(_mm512_loadu_ps(dst), out);
      _mm512_storeu_ps(dst, out);
    }
}

// Panels per tile by rows: the registers each loop form above needs fit the 16 AVX2
// registers, with at least 8 independent FMA chains from 4 rows up (3 x 2 has 6).
template <int MR>
constexpr int kPanelsPerTile = MR == 1 ? 8 : MR == 2 ? 4 : 2;

template <int MR, int NV, typename Load>
inline void tile_panels(const float* x, int64_t ldx, Panels w, int64_t k, const float* bias,
                        float* y, int64_t ldy, bool acc, int64_t panels, int64_t valid) {
  if constexpr (NV > 1) {
    if (panels < NV) return tile_panels<MR, NV - 1, Load>(x, ldx, w, k, bias, y, ldy, acc, panels, valid);
  }
  tile<MR, NV, Load>(x, ldx, w, k, bias, y, ldy, acc, valid);
}

/// Rows [0, mr) of x (mr = MR) against panels [p0, p1) of one matrix.
template <int MR, typename Load>
void row_block(const float* x, int64_t ldx, const PackedMatrix& w, int64_t p0, int64_t p1,
               const float* bias, float* y, int64_t ldy, bool acc) {
  constexpr int NV = kPanelsPerTile<MR>;
  int64_t p = p0;
  if constexpr (MR >= 4 && std::is_same_v<Load, LoadBf16>) {
    if (simd::avx512())  // whole tiles of 8 full panels; what is left takes the AVX2 tiles
      for (; p + kWidePanels <= p1 && (p + kWidePanels) * kPanelOutputs <= w.n(); p += kWidePanels) {
        const int64_t o = p * kPanelOutputs;
        tile_bf16_avx512<MR>(x, ldx, {w.panel(p), w.panel_bytes()}, w.k(), bias ? bias + o : nullptr, y + o, ldy, acc);
      }
  }
  for (; p < p1; p += NV) {
    const int64_t panels = std::min<int64_t>(NV, p1 - p);
    const int64_t o = p * kPanelOutputs;
    tile_panels<MR, NV, Load>(x, ldx, {w.panel(p), w.panel_bytes()}, w.k(), bias ? bias + o : nullptr,
                              y + o, ldy, acc, panels, w.n() - o);
  }
}

/// Every row of x against panels [p0, p1) of one target: column chunks of up to 8
/// panels (at most 128 KiB of BF16 weights, kept in L2 while every row block passes).
/// Rows go in blocks of up to 5, so a verify window of up to 5 tokens widens each
/// weight once: 1, 2, 3, 4, 5, 4+2, 4+3, 4+4, 5+4, 5+5, 5+5+1, ... (5 x 2 panels runs
/// at ~88% of the FMA peak from L2 on the CI machine, against ~56% for 3 x 2 + 2 x 4).
template <typename Load>
void target_range(const float* x, int64_t m, int64_t ldx, const LinearTarget& t, int64_t p0, int64_t p1) {
  for (int64_t c = p0; c < p1; c += 8) {
    const int64_t c1 = std::min(p1, c + 8);
    for (int64_t i = 0; i < m;) {
      const int64_t left = m - i;
      const int64_t rows = left <= 5 ? left : left <= 8 ? 4 : 5;
      const float* xi = x + i * ldx;
      float* yi = t.y + i * t.ldy;
      switch (rows) {
        case 5: row_block<5, Load>(xi, ldx, *t.weight, c, c1, t.bias, yi, t.ldy, t.accumulate); break;
        case 4: row_block<4, Load>(xi, ldx, *t.weight, c, c1, t.bias, yi, t.ldy, t.accumulate); break;
        case 3: row_block<3, Load>(xi, ldx, *t.weight, c, c1, t.bias, yi, t.ldy, t.accumulate); break;
        case 2: row_block<2, Load>(xi, ldx, *t.weight, c, c1, t.bias, yi, t.ldy, t.accumulate); break;
        default: row_block<1, Load>(xi, ldx, *t.weight, c, c1, t.bias, yi, t.ldy, t.accumulate); break;
      }
      i += rows;
    }
  }
}

void run_range(const float* x, int64_t m, int64_t ldx, const LinearTarget& t, int64_t p0, int64_t p1) {
  switch (t.weight->dtype()) {
    case DType::f32: return target_range<LoadF32>(x, m, ldx, t, p0, p1);
    case DType::f16: return target_range<LoadF16>(x, m, ldx, t, p0, p1);
    default: return target_range<LoadBf16>(x, m, ldx, t, p0, p1);
  }
}

}  // namespace

void linear(const float* x, int64_t m, int64_t k, int64_t ldx, std::span<const LinearTarget> targets) {
  int64_t total = 0;  // panels of all targets, numbered consecutively
  for (const LinearTarget& t : targets) {
    if (t.weight->k() != k)
      fail(ErrorCode::invalid_argument, "linear: weight has k = {}, the input {}", t.weight->k(), k);
    total += t.weight->panels();
  }
  if (m == 0 || total == 0) return;
  // Chunks of consecutive panels: whoever claims one streams it front to back. They
  // shrink as the panels run out, down to one whole 8-panel tile, so the threads finish
  // within about one tile of each other. With equal chunks of 1/8 of the panels, a
  // region's end waited on half a chunk: the calling thread of a 0.6B decode step (141
  // regions) waited 2.6 of its 38 ms for the other thread on the GPU machine's Xeon.
  parallel_for_guided(total, kWidePanels, [&](int64_t begin, int64_t end) {
    int64_t first = 0;
    for (const LinearTarget& t : targets) {
      const int64_t p0 = std::max(begin, first) - first, p1 = std::min(end, first + t.weight->panels()) - first;
      if (p0 < p1) run_range(x, m, ldx, t, p0, p1);
      first += t.weight->panels();
    }
  });
}

void linear_reference(const float* x, int64_t m, int64_t k, int64_t ldx, const LinearTarget& t) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < t.weight->n(); ++j) {
      float acc = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) acc = std::fma(x[i * ldx + kk], t.weight->at(j, kk), acc);
      if (t.bias) acc = acc + t.bias[j];
      float* out = t.y + i * t.ldy + j;
      *out = t.accumulate ? *out + acc : acc;
    }
}

}  // namespace specpipe::cpu
