#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace specpipe::cpu {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(Exp8, RelativeErrorWithinFewUlp) {
  for (float x = -87.0f; x < 88.0f; x += 0.01737f) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(simd::exp1(x), want, want * 5e-7) << x;
  }
  EXPECT_EQ(simd::exp1(-INFINITY), 0.0f);
  EXPECT_EQ(simd::exp1(-200.0f), 0.0f);
  EXPECT_EQ(simd::exp1(0.0f), 1.0f);
}

TEST(RmsNorm, MatchesNaiveAndIsRowIndependent) {
  const int64_t dim = 384, rows = 5;
  auto x = randn(dim * rows, 1), w = randn(dim, 2);
  std::vector<float> y(x.size()), single(dim);
  rms_norm(x.data(), dim, w.data(), 1e-6f, rows, dim, y.data(), dim);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double{x[r * dim + i]} * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
    for (int64_t i = 0; i < dim; ++i) ASSERT_NEAR(y[r * dim + i], x[r * dim + i] * inv * w[i], 1e-4);
    rms_norm(x.data() + r * dim, dim, w.data(), 1e-6f, 1, dim, single.data(), dim);
    ASSERT_TRUE(std::equal(single.begin(), single.end(), y.begin() + r * dim));
  }
}

TEST(Rope, RotatesPairsByPositionAngle) {
  const int32_t hd = 64;
  RopeTable table(hd, 1e5, 8192, {});
  for (int32_t pos : {0, 1, 17, 4000, 8191}) {
    auto x = randn(2 * hd, pos + 3);
    auto y = x;
    apply_rope(table, pos, y.data(), 2);
    for (int32_t h = 0; h < 2; ++h)
      for (int32_t i = 0; i < hd / 2; ++i) {
        const double ang = pos * std::pow(1e5, -2.0 * i / hd);
        const double a = x[h * hd + i], b = x[h * hd + i + hd / 2];
        // float32 angles drift by pos * ulp(inv_freq), as in the reference implementation.
        const double tol = 2e-6 * (1 + pos) * (std::abs(a) + std::abs(b)) + 1e-5;
        ASSERT_NEAR(y[h * hd + i], a * std::cos(ang) - b * std::sin(ang), tol);
        ASSERT_NEAR(y[h * hd + i + hd / 2], b * std::cos(ang) + a * std::sin(ang), tol);
      }
  }
  float v[64] = {};
  EXPECT_THROW(apply_rope(table, 8192, v, 1), std::exception);
}

TEST(SiluGate, MatchesFormula) {
  auto g = randn(2 * 40, 4, 3.0f), u = randn(2 * 40, 5);
  std::vector<float> out(g.size());
  silu_gate(g.data(), u.data(), out.data(), 2, 40, 40);
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(out[i], g[i] / (1 + std::exp(-double{g[i]})) * u[i], 1e-5 * (1 + std::abs(out[i])));
}

// A window's rows split over the pool by 8-float vectors (silu_gate's region): the same
// bits as 8 floats at a time on the calling thread, with a row stride past n, on 1 and 2
// threads, for counts around the region's threshold.
TEST(SiluGate, SplitOverThePoolEqualsEightFloatsAtATime) {
  for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{5, 3072}, {1, 8192}, {7, 1024}, {3, 336}}) {
    const int64_t ld = n + 24;
    auto g = randn(static_cast<size_t>(rows * ld), 6, 3.0f), u = randn(static_cast<size_t>(rows * ld), 7);
    std::vector<float> single(static_cast<size_t>(n));
    for (int threads : {2, 1}) {
      set_num_threads(threads);
      std::vector<float> out(g.size(), -1.0f);
      silu_gate(g.data(), u.data(), out.data(), rows, n, ld);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < n; i += 8)  // 8 floats a call: never a region
          silu_gate(g.data() + r * ld + i, u.data() + r * ld + i, single.data() + i, 1, 8, 8);
        ASSERT_EQ(0, std::memcmp(single.data(), out.data() + r * ld, single.size() * sizeof(float)))
            << rows << " x " << n << ", row " << r << ", " << threads << " threads";
        ASSERT_EQ(out[static_cast<size_t>(r * ld + n)], -1.0f) << "wrote past n";
      }
    }
    set_num_threads(0);
  }
}

TEST(Embedding, ConvertsRowsAndRejectsBadIds) {
  std::vector<uint16_t> table;
  for (int i = 0; i < 3 * 8; ++i) table.push_back(f32_to_bf16(static_cast<float>(i) * 0.5f));
  std::vector<float> out(2 * 8);
  std::vector<int32_t> ids = {2, 0};
  embedding(DType::bf16, table.data(), 3, 8, ids, out.data(), 8);
  EXPECT_EQ(out[0], 8.0f);
  EXPECT_EQ(out[8], 0.0f);
  ids = {3};
  EXPECT_THROW(embedding(DType::bf16, table.data(), 3, 8, ids, out.data(), 8), std::exception);
}

}  // namespace
}  // namespace specpipe::cpu
