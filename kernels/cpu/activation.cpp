#include "kernels/cpu/activation.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace specpipe::cpu {
namespace {
// 8-float vectors a chunk at least: ~2-3 us of exp / div, a few times a region's cost.
constexpr int64_t kSiluGrain = 512;
}  // namespace

void silu_gate(const float* gate, const float* up, float* out, int64_t rows, int64_t n, int64_t ld) {
  if (n % 8 != 0) fail(ErrorCode::unsupported, "silu_gate: n = {} is not a multiple of 8", n);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // Element-wise, so any split gives the same bits: the region splits the rows' 8-float
  // vectors (a verify window's few rows are ~0.4 ms of a 0.6B forward on one thread); a
  // range of under two grains (a decode step's row) stays on the calling thread.
  const int64_t vectors = n / 8, count = rows * vectors;
  if (count == 0) return;
  auto range = [&](int64_t begin, int64_t end) {
    for (int64_t u = begin, r = begin / vectors, i = begin % vectors; u < end; ++u) {
      const int64_t o = r * ld + i * 8;
      if (++i == vectors) {
        i = 0;
        ++r;
      }
      __m256 g = _mm256_loadu_ps(gate + o);
      __m256 e = simd::exp8(_mm256_xor_ps(g, sign));  // exp(-g)
      __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
      _mm256_storeu_ps(out + o, _mm256_mul_ps(silu, _mm256_loadu_ps(up + o)));
    }
  };
  if (count >= 2 * kSiluGrain) parallel_for(count, std::max(kSiluGrain, default_grain(count)), range);
  else range(0, count);
}

}  // namespace specpipe::cpu
