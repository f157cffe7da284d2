#include "kernels/cpu/linear.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/simd.h"

namespace specpipe::cpu {
namespace {

// Columns per work item. A panel of 16 BF16 rows of k = 1024 is 32 KiB: it stays in L1/L2
// while every row block of x passes over it.
constexpr int64_t kPanel = 16;
constexpr int64_t kChunk = 16;  // k elements per step of the micro-kernel

// Weight loaders: 16 consecutive weights of a row as two float32 vectors (a, b), and
// the order the matching 16 inputs must be in (see permute_input).
struct LoadF32 {
  using W = float;
  static constexpr bool kInterleaved = false;  // a = w[0..8), b = w[8..16)
  static void load(const float* p, __m256& a, __m256& b) {
    a = _mm256_loadu_ps(p);
    b = _mm256_loadu_ps(p + 8);
  }
};
struct LoadF16 {
  using W = uint16_t;
  static constexpr bool kInterleaved = false;
  static void load(const uint16_t* p, __m256& a, __m256& b) {
    a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
};
// BF16 is the high half of a float32, so two integer ops widen 16 values without any
// shuffle: shifting each 32-bit lane left by 16 yields the even elements, masking its
// low half the odd ones. The inputs are stored even/odd to match.
struct LoadBf16 {
  using W = uint16_t;
  static constexpr bool kInterleaved = true;  // a = w[0, 2, .., 14], b = w[1, 3, .., 15]
  static void load(const uint16_t* p, __m256& a, __m256& b) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    a = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    b = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
};

/// The micro-kernel: MR rows of x times NR weight rows. Every output owns one 8-lane
/// accumulator and receives, per chunk of 16 inputs, fma(a-part) then fma(b-part): its
/// arithmetic is the same whatever MR, NR, the panel or the thread (batch invariance).
/// `prefetch`, if set, is the same tile one panel further on.
template <int MR, int NR, typename Load>
inline void tile(const float* x, int64_t ldx, const typename Load::W* w, int64_t ldw, int64_t k,
                 const float* bias, float* y, int64_t ldy, bool accumulate,
                 const typename Load::W* prefetch) {
  constexpr int64_t kStepsPerLine = 64 / (kChunk * static_cast<int64_t>(sizeof(typename Load::W)));
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; kk += kChunk) {
    // Each weight row of a tile is only a few cache lines long, too short for the
    // hardware prefetcher to lock on; fetching the next panel's lines keeps DRAM busy.
    if (prefetch && (kk / kChunk) % kStepsPerLine == 0)
      for (int j = 0; j < NR; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + j * ldw + kk), _MM_HINT_T0);
    // Column by column: only one converted weight pair is live at a time, and the
    // inputs come straight from L1 as FMA memory operands.
    for (int j = 0; j < NR; ++j) {
      __m256 wa, wb;
      Load::load(w + j * ldw + kk, wa, wb);
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + kk), wa, acc[i][j]);
        acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + kk + 8), wb, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float v = simd::hsum(acc[i][j]);
      if (bias) v = v + bias[j];
      float* out = y + i * ldy + j;
      *out = accumulate ? *out + v : v;
    }
}

// Runs a fixed-shape tile over nr <= NR columns (the panel's ragged end).
template <int MR, int NR, typename Load>
inline void tile_cols(const float* x, int64_t ldx, const typename Load::W* w, int64_t ldw,
                      int64_t k, const float* bias, float* y, int64_t ldy, bool acc, int64_t nr,
                      const typename Load::W* prefetch) {
  if constexpr (NR > 1) {
    if (nr < NR) return tile_cols<MR, NR - 1, Load>(x, ldx, w, ldw, k, bias, y, ldy, acc, nr, prefetch);
  }
  tile<MR, NR, Load>(x, ldx, w, ldw, k, bias, y, ldy, acc, prefetch);
}

// Tile shapes by rows: up to 12 accumulators, which leaves registers for one converted
// weight pair, and at least 8 independent FMA chains to cover the FMA latency.
template <int MR>
constexpr int kCols = MR == 1 ? 8 : MR == 2 ? 6 : MR == 3 ? 4 : 3;

template <int MR, typename Load>
void row_block(const float* x, int64_t ldx, const typename Load::W* w, int64_t ldw, int64_t k,
               const float* bias, float* y, int64_t ldy, bool acc, int64_t nc, bool prefetch) {
  constexpr int NR = kCols<MR>;
  for (int64_t j = 0; j < nc; j += NR)
    tile_cols<MR, NR, Load>(x, ldx, w + j * ldw, ldw, k, bias ? bias + j : nullptr, y + j, ldy,
                            acc, std::min<int64_t>(NR, nc - j),
                            prefetch ? w + (j + kPanel) * ldw : nullptr);
}

/// All m rows of x against the nc (<= kPanel) weight rows of one panel, in as few row
/// blocks of at most 4 as possible, of near-equal size (9 = 3 + 3 + 3: single-row blocks
/// are the least efficient). Only the first block prefetches; later ones find the panel
/// in cache.
template <typename Load>
void panel(const float* x, int64_t m, int64_t ldx, const typename Load::W* w, int64_t k,
           const float* bias, float* y, int64_t ldy, bool acc, int64_t nc) {
  const int64_t blocks = (m + 3) / 4;
  for (int64_t b = 0, i = 0; b < blocks; ++b) {
    const int64_t rows = (m - i) / (blocks - b);
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy;
    const bool first = i == 0;
    switch (rows) {
      case 4: row_block<4, Load>(xi, ldx, w, k, k, bias, yi, ldy, acc, nc, first); break;
      case 3: row_block<3, Load>(xi, ldx, w, k, k, bias, yi, ldy, acc, nc, first); break;
      case 2: row_block<2, Load>(xi, ldx, w, k, k, bias, yi, ldy, acc, nc, first); break;
      default: row_block<1, Load>(xi, ldx, w, k, k, bias, yi, ldy, acc, nc, first); break;
    }
    i += rows;
  }
}

struct WorkItem {
  const LinearTarget* target;
  int64_t col0, cols;
};

/// x as the BF16 kernel wants it: each chunk of 16 inputs stored as its 8 even elements
/// then its 8 odd ones.
void permute_input(const float* x, int64_t m, int64_t k, int64_t ldx, std::vector<float>& out) {
  out.resize(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; kk += kChunk)
      for (int64_t l = 0; l < 8; ++l) {
        out[static_cast<size_t>(i * k + kk + l)] = x[i * ldx + kk + 2 * l];
        out[static_cast<size_t>(i * k + kk + 8 + l)] = x[i * ldx + kk + 2 * l + 1];
      }
}

void run_item(const WorkItem& item, const float* x, const float* x_even_odd, int64_t m, int64_t k,
              int64_t ldx) {
  const LinearTarget& t = *item.target;
  const float* bias = t.bias ? t.bias + item.col0 : nullptr;
  float* y = t.y + item.col0;
  switch (t.dtype) {
    case DType::f32:
      return panel<LoadF32>(x, m, ldx, static_cast<const float*>(t.weight) + item.col0 * k, k,
                            bias, y, t.ldy, t.accumulate, item.cols);
    case DType::f16:
      return panel<LoadF16>(x, m, ldx, static_cast<const uint16_t*>(t.weight) + item.col0 * k, k,
                            bias, y, t.ldy, t.accumulate, item.cols);
    default:
      return panel<LoadBf16>(x_even_odd, m, k, static_cast<const uint16_t*>(t.weight) + item.col0 * k,
                             k, bias, y, t.ldy, t.accumulate, item.cols);
  }
}

}  // namespace

void linear(const float* x, int64_t m, int64_t k, int64_t ldx, std::span<const LinearTarget> targets) {
  if (k % kChunk != 0) fail(ErrorCode::unsupported, "linear: k = {} is not a multiple of 16", k);
  if (m == 0) return;
  std::vector<WorkItem> items;
  bool any_bf16 = false;
  for (const LinearTarget& t : targets) {
    if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
      fail(ErrorCode::unsupported, "linear: weight dtype {} not supported", dtype_name(t.dtype));
    any_bf16 |= t.dtype == DType::bf16;
    for (int64_t c = 0; c < t.n; c += kPanel) items.push_back({&t, c, std::min(kPanel, t.n - c)});
  }
  thread_local std::vector<float> x_even_odd;
  if (any_bf16) permute_input(x, m, k, ldx, x_even_odd);
  const float* xp = x_even_odd.data();
  const int64_t count = static_cast<int64_t>(items.size());
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), count));
#pragma omp parallel num_threads(threads)
  {
    const int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
    // Contiguous ranges: each thread streams its share of the weights front to back.
    for (int64_t i = count * tid / nt; i < count * (tid + 1) / nt; ++i)
      run_item(items[static_cast<size_t>(i)], x, xp, m, k, ldx);
  }
}

void linear_reference(const float* x, int64_t m, int64_t k, int64_t ldx, const LinearTarget& t) {
  auto weight = [&](int64_t j, int64_t kk) {
    if (t.dtype == DType::f32) return static_cast<const float*>(t.weight)[j * k + kk];
    const uint16_t bits = static_cast<const uint16_t*>(t.weight)[j * k + kk];
    return t.dtype == DType::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
  };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < t.n; ++j) {
      float lanes[8] = {};
      for (int64_t kk = 0; kk < k; kk += kChunk)
        for (int part = 0; part < 2; ++part)  // the a-part of every lane, then the b-part
          for (int64_t l = 0; l < 8; ++l) {
            const int64_t e = t.dtype == DType::bf16 ? kk + 2 * l + part : kk + 8 * part + l;
            lanes[l] = std::fma(x[i * ldx + e], weight(j, e), lanes[l]);
          }
      float s = simd::hsum(_mm256_loadu_ps(lanes));
      if (t.bias) s = s + t.bias[j];
      float* out = t.y + i * t.ldy + j;
      *out = t.accumulate ? *out + s : s;
    }
}

}  // namespace specpipe::cpu
