#include "kernels/cpu/activation.h"

#include "core/error.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace specpipe::cpu {

void silu_gate(const float* gate, const float* up, float* out, int64_t rows, int64_t n, int64_t ld) {
  if (n % 8 != 0) fail(ErrorCode::unsupported, "silu_gate: n = {} is not a multiple of 8", n);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  auto rows_range = [&](int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r)
    for (int64_t i = 0; i < n; i += 8) {
      const int64_t o = r * ld + i;
      __m256 g = _mm256_loadu_ps(gate + o);
      __m256 e = simd::exp8(_mm256_xor_ps(g, sign));  // exp(-g)
      __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
      _mm256_storeu_ps(out + o, _mm256_mul_ps(silu, _mm256_loadu_ps(up + o)));
    }
  };
  if (rows >= 32) parallel_for(rows, default_grain(rows), rows_range);
  else rows_range(0, rows);
}

}  // namespace specpipe::cpu
