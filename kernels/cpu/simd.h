#pragma once
/// AVX2/FMA building blocks shared by the CPU kernels (internal to kernels/cpu).
///
/// Every reduction here has one fixed order that depends only on the length reduced,
/// never on how many rows or sequences a call processes: that is what keeps the CPU
/// backend batch invariant (ARCHITECTURE.md section 7).
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/dtype.h"

namespace specpipe::cpu::simd {

/// Whether kernels may take their AVX-512 paths: the build targets x86-64-v3, so this is
/// chosen at run time, where the CPU has AVX-512F (the GPU machines' Xeons) and
/// SPECPIPE_CPU_AVX512 is not "0". Every AVX-512 path gives the same bits as its AVX2 one.
inline bool avx512() {
  static const bool on = [] {
    const char* env = std::getenv("SPECPIPE_CPU_AVX512");
    if (env && std::string_view(env) == "0") return false;
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return on;
}

/// Loads 8 consecutive elements of a weight row as float32 (exact for all three types).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p, DType t) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (t == DType::f16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16
}

struct Bf16 {
  static __m256 load(const uint16_t* p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};
struct F16 {
  static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};
struct F32 {
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
};

/// Sum of the 8 lanes in a fixed tree: (l0+l4, l1+l5, l2+l6, l3+l7), then pairs.
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);                 // 4 lanes
  __m128 sh = _mm_movehl_ps(s, s);               // lanes 2,3
  __m128 s2 = _mm_add_ps(s, sh);                 // (0+2), (1+3)
  __m128 s3 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s3);
}

/// Largest of the 8 lanes.
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

/// exp(x) for 8 lanes, relative error about 2 ulp over [-87, 88]; x < -87 gives 0.
/// Cody-Waite range reduction x = n ln2 + r, then a degree-6 polynomial for e^r.
inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f);
  const __m256 lo = _mm256_set1_ps(-87.3365478515625f);
  x = _mm256_min_ps(x, hi);
  __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n*ln2 in two steps (ln2 split into a short exact part and the rest).
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, result);
}

/// Scalar exp with exactly the lane arithmetic of exp8 (for tails and reference code).
inline float exp1(float x) { return _mm256_cvtss_f32(exp8(_mm256_set1_ps(x))); }

}  // namespace specpipe::cpu::simd
