#include "kernels/cpu/norm.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace specpipe::cpu {

void rms_norm(const float* x, int64_t ldx, const float* weight, float eps, int64_t rows,
              int64_t dim, float* y, int64_t ldy) {
  if (dim % 8 != 0) fail(ErrorCode::unsupported, "rms_norm: dim = {} is not a multiple of 8", dim);
  auto norm_rows = [&](int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < dim; i += 8) {
      __m256 v = _mm256_loadu_ps(xr + i);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    const float mean = simd::hsum(acc) / static_cast<float>(dim);
    const __m256 scale = _mm256_set1_ps(1.0f / std::sqrt(mean + eps));
    for (int64_t i = 0; i < dim; i += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + i), scale);
      _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(weight + i), v));
    }
  }
  };
  // Rows are independent; a parallel region only pays off for prefill-sized batches.
  if (rows >= 32) parallel_for(rows, default_grain(rows), norm_rows);
  else norm_rows(0, rows);
}

}  // namespace specpipe::cpu
