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

/// The micro-kernel: MR rows of x times NR weight rows. Every output keeps its own
/// accumulator, so its arithmetic is independent of MR and NR (batch invariance).
template <int MR, int NR, typename Load, typename W>
inline void tile(const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t k,
                 const float* bias, float* y, int64_t ldy, bool accumulate) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; kk += 8) {
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * ldx + kk);
    for (int j = 0; j < NR; ++j) {
      __m256 wv = Load::load(w + j * ldw + kk);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
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

// Dispatches a runtime column count nr <= NR onto the fixed-shape tiles.
template <int MR, int NR, typename Load, typename W>
inline void tile_cols(const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t k,
                      const float* bias, float* y, int64_t ldy, bool acc, int64_t nr) {
  if constexpr (NR > 1) {
    if (nr < NR) return tile_cols<MR, NR - 1, Load>(x, ldx, w, ldw, k, bias, y, ldy, acc, nr);
  }
  tile<MR, NR, Load>(x, ldx, w, ldw, k, bias, y, ldy, acc);
}

/// Rows [0, m) of x against weight rows [0, nc) of one panel (nc <= kPanel). The tile
/// shapes favour register reuse; they do not change any output's arithmetic.
template <typename Load, typename W>
void panel(const float* x, int64_t m, int64_t ldx, const W* w, int64_t ldw, int64_t k,
           const float* bias, float* y, int64_t ldy, bool acc, int64_t nc) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4)
    for (int64_t j = 0; j < nc; j += 2)
      tile_cols<4, 2, Load>(x + i * ldx, ldx, w + j * ldw, ldw, k, bias ? bias + j : nullptr,
                            y + i * ldy + j, ldy, acc, std::min<int64_t>(2, nc - j));
  const int64_t rest = m - i;
  const float* xr = x + i * ldx;
  float* yr = y + i * ldy;
  for (int64_t j = 0; j < nc; j += 8) {
    const int64_t nr = std::min<int64_t>(8, nc - j);
    const float* b = bias ? bias + j : nullptr;
    if (rest == 3) {
      tile_cols<3, 3, Load>(xr, ldx, w + j * ldw, ldw, k, b, yr + j, ldy, acc, std::min<int64_t>(3, nr));
      if (nr > 3) tile_cols<3, 3, Load>(xr, ldx, w + (j + 3) * ldw, ldw, k, b ? b + 3 : nullptr, yr + j + 3, ldy, acc, std::min<int64_t>(3, nr - 3));
      if (nr > 6) tile_cols<3, 2, Load>(xr, ldx, w + (j + 6) * ldw, ldw, k, b ? b + 6 : nullptr, yr + j + 6, ldy, acc, nr - 6);
    } else if (rest == 2) {
      tile_cols<2, 4, Load>(xr, ldx, w + j * ldw, ldw, k, b, yr + j, ldy, acc, std::min<int64_t>(4, nr));
      if (nr > 4) tile_cols<2, 4, Load>(xr, ldx, w + (j + 4) * ldw, ldw, k, b ? b + 4 : nullptr, yr + j + 4, ldy, acc, nr - 4);
    } else if (rest == 1) {
      tile_cols<1, 8, Load>(xr, ldx, w + j * ldw, ldw, k, b, yr + j, ldy, acc, nr);
    }
  }
}

struct WorkItem {
  const LinearTarget* target;
  int64_t col0, cols;
};

void run_item(const WorkItem& item, const float* x, int64_t m, int64_t k, int64_t ldx,
              std::vector<float>& converted) {
  const LinearTarget& t = *item.target;
  const float* bias = t.bias ? t.bias + item.col0 : nullptr;
  float* y = t.y + item.col0;
  if (t.dtype == DType::f32) {
    const float* w = static_cast<const float*>(t.weight) + item.col0 * k;
    return panel<simd::F32>(x, m, ldx, w, k, k, bias, y, t.ldy, t.accumulate, item.cols);
  }
  const uint16_t* w = static_cast<const uint16_t*>(t.weight) + item.col0 * k;
  if (m > 4) {
    // Many rows reuse the panel: widen it to float32 once (exact) instead of per row block.
    converted.resize(static_cast<size_t>(item.cols * k));
    for (int64_t r = 0; r < item.cols; ++r)
      for (int64_t kk = 0; kk < k; kk += 8)
        _mm256_storeu_ps(converted.data() + r * k + kk, simd::load8(w + r * k + kk, t.dtype));
    return panel<simd::F32>(x, m, ldx, converted.data(), k, k, bias, y, t.ldy, t.accumulate,
                            item.cols);
  }
  if (t.dtype == DType::bf16)
    return panel<simd::Bf16>(x, m, ldx, w, k, k, bias, y, t.ldy, t.accumulate, item.cols);
  return panel<simd::F16>(x, m, ldx, w, k, k, bias, y, t.ldy, t.accumulate, item.cols);
}

}  // namespace

void linear(const float* x, int64_t m, int64_t k, int64_t ldx, std::span<const LinearTarget> targets) {
  if (k % 8 != 0) fail(ErrorCode::unsupported, "linear: k = {} is not a multiple of 8", k);
  if (m == 0) return;
  std::vector<WorkItem> items;
  for (const LinearTarget& t : targets) {
    if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
      fail(ErrorCode::unsupported, "linear: weight dtype {} not supported", dtype_name(t.dtype));
    for (int64_t c = 0; c < t.n; c += kPanel) items.push_back({&t, c, std::min(kPanel, t.n - c)});
  }
  const int64_t count = static_cast<int64_t>(items.size());
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), count));
#pragma omp parallel num_threads(threads)
  {
    thread_local std::vector<float> converted;
    const int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
    // Contiguous ranges: each thread streams its share of the weights front to back.
    for (int64_t i = count * tid / nt; i < count * (tid + 1) / nt; ++i)
      run_item(items[static_cast<size_t>(i)], x, m, k, ldx, converted);
  }
}

void linear_reference(const float* x, int64_t m, int64_t k, int64_t ldx, const LinearTarget& t) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < t.n; ++j) {
      float lanes[8] = {};
      for (int64_t kk = 0; kk < k; ++kk) {
        float w;
        if (t.dtype == DType::f32) w = static_cast<const float*>(t.weight)[j * k + kk];
        else if (t.dtype == DType::bf16) w = bf16_to_f32(static_cast<const uint16_t*>(t.weight)[j * k + kk]);
        else w = f16_to_f32(static_cast<const uint16_t*>(t.weight)[j * k + kk]);
        lanes[kk % 8] = std::fma(x[i * ldx + kk], w, lanes[kk % 8]);
      }
      float s = simd::hsum(_mm256_loadu_ps(lanes));
      if (t.bias) s = s + t.bias[j];
      float* out = t.y + i * t.ldy + j;
      *out = t.accumulate ? *out + s : s;
    }
}

}  // namespace specpipe::cpu
