#include "kernels/cpu/linear.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/thread_pool.h"

namespace specpipe::cpu {
namespace {

PackedMatrix random_weights(DType dtype, int64_t n, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> f32;
  std::vector<uint16_t> half;
  for (int64_t i = 0; i < n * k; ++i) {
    float v = dist(rng);
    if (dtype == DType::f32) f32.push_back(v);
    else half.push_back(dtype == DType::bf16 ? f32_to_bf16(v) : f32_to_f16(v));
  }
  return {dtype, dtype == DType::f32 ? static_cast<const void*>(f32.data()) : half.data(), n, k};
}

std::vector<float> random_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class LinearTest : public ::testing::TestWithParam<DType> {};

// The kernel and the naive reference share one summation order, so they agree bit for
// bit; any tile shape or thread split that changed the order would show here.
TEST_P(LinearTest, MatchesReferenceBitwiseForManyShapes) {
  std::mt19937 rng(7);
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 17}) {  // every row-block split up to 5+5+1
    for (int64_t n : {1, 5, 8, 16, 37, 96, 200}) {
      const int64_t k = 2 * (1 + (m * n) % 97);
      PackedMatrix w = random_weights(GetParam(), n, k, rng);
      std::vector<float> x = random_vector(static_cast<size_t>(m * k), rng);
      std::vector<float> bias = random_vector(static_cast<size_t>(n), rng);
      std::vector<float> got(static_cast<size_t>(m * n)), want(got.size());
      LinearTarget t{&w, bias.data(), got.data(), n, false};
      linear(x.data(), m, k, k, {&t, 1});
      t.y = want.data();
      linear_reference(x.data(), m, k, k, t);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "m=" << m << " n=" << n;
    }
  }
}

// Shapes the small ones above miss: tiles of 8 whole panels (the AVX-512 tiles of 4-5
// BF16 rows, where the CPU has them: every other CPU checks its AVX2 tiles here), with
// partial tiles and a partial last panel after them, k long enough for the prefetches
// to cross 4 KiB pages, odd leading dimensions, bias and accumulate; 1 and 2 threads.
TEST_P(LinearTest, MatchesReferenceBitwiseOnWideShapes) {
  std::mt19937 rng(13);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t m : {1, 4, 5, 9, 10}) {
      for (int64_t n : {64, 72, 130, 520}) {
        const int64_t k = n == 520 ? 2048 : 2 * (48 + (m * n) % 200);
        const int64_t ldx = k + 3, ldy = n + 5;
        PackedMatrix w = random_weights(GetParam(), n, k, rng);
        std::vector<float> x = random_vector(static_cast<size_t>(m * ldx), rng);
        std::vector<float> bias = random_vector(static_cast<size_t>(n), rng);
        std::vector<float> got = random_vector(static_cast<size_t>(m * ldy), rng), want = got;
        const bool accumulate = n % 2 == 0;
        LinearTarget t{&w, n == 72 ? nullptr : bias.data(), got.data(), ldy, accumulate};
        linear(x.data(), m, k, ldx, {&t, 1});
        t.y = want.data();
        linear_reference(x.data(), m, k, ldx, t);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
            << "m=" << m << " n=" << n << " k=" << k << " threads=" << threads;
      }
    }
  }
  set_num_threads(0);
}

TEST_P(LinearTest, RowResultIndependentOfBatchAndThreads) {
  std::mt19937 rng(11);
  const int64_t n = 200, k = 384;
  PackedMatrix w = random_weights(GetParam(), n, k, rng);
  std::vector<float> rows = random_vector(static_cast<size_t>(9 * k), rng);
  // Row 0 computed alone, with one thread.
  set_num_threads(1);
  std::vector<float> alone(static_cast<size_t>(n));
  LinearTarget t{&w, nullptr, alone.data(), n, false};
  linear(rows.data(), 1, k, k, {&t, 1});
  set_num_threads(2);
  for (int64_t m = 1; m <= 9; ++m) {
    std::vector<float> batch(static_cast<size_t>(m * n));
    t.y = batch.data();
    linear(rows.data(), m, k, k, {&t, 1});
    ASSERT_EQ(0, std::memcmp(batch.data(), alone.data(), alone.size() * 4)) << "m=" << m;
  }
}

TEST_P(LinearTest, SeveralTargetsAndAccumulate) {
  std::mt19937 rng(3);
  const int64_t m = 3, k = 64;
  PackedMatrix a = random_weights(GetParam(), 24, k, rng), b = random_weights(GetParam(), 37, k, rng);
  std::vector<float> x = random_vector(static_cast<size_t>(m * k), rng);
  std::vector<float> ya(static_cast<size_t>(m * 24)), yb = random_vector(static_cast<size_t>(m * 37), rng);
  std::vector<float> ra(ya.size()), rb = yb;
  LinearTarget targets[] = {{&a, nullptr, ya.data(), 24, false}, {&b, nullptr, yb.data(), 37, true}};
  linear(x.data(), m, k, k, targets);
  LinearTarget ta = targets[0], tb = targets[1];
  ta.y = ra.data();
  tb.y = rb.data();
  linear_reference(x.data(), m, k, k, ta);
  linear_reference(x.data(), m, k, k, tb);
  EXPECT_EQ(ya, ra);
  EXPECT_EQ(yb, rb);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearTest, ::testing::Values(DType::f32, DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

TEST(Linear, RejectsMismatchedK) {
  std::vector<float> x(12), w(12), y(1);
  PackedMatrix p(DType::f32, w.data(), 1, 12);
  LinearTarget t{&p, nullptr, y.data(), 1, false};
  EXPECT_THROW(linear(x.data(), 1, 10, 12, {&t, 1}), std::exception);
}

TEST(PackedMatrix, RoundTripsEveryElementAndRejectsOddK) {
  std::mt19937 rng(5);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<float> f32;
    std::vector<uint16_t> half;
    for (int i = 0; i < 13 * 6; ++i) {
      f32.push_back(static_cast<float>(i) * 0.25f);
      half.push_back(t == DType::bf16 ? f32_to_bf16(f32.back()) : f32_to_f16(f32.back()));
    }
    PackedMatrix p(t, t == DType::f32 ? static_cast<const void*>(f32.data()) : half.data(), 13, 6);
    for (int r = 0; r < 13; ++r)
      for (int c = 0; c < 6; ++c) ASSERT_EQ(p.at(r, c), f32[static_cast<size_t>(r * 6 + c)]);
  }
  std::vector<float> w(9);
  EXPECT_THROW(PackedMatrix(DType::f32, w.data(), 3, 3), std::exception);
}

// A matrix of 2 MiB or more starts on a 2 MiB boundary in a mapping advised for
// transparent huge pages ("hg" in its VmFlags), as the decode step's streams want.
TEST(PackedMatrix, LargeMatricesAskForHugePages) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "no transparent huge pages";
  std::vector<uint16_t> half(static_cast<size_t>(1024 * 1056), f32_to_bf16(0.5f));
  const PackedMatrix p(DType::bf16, half.data(), 1024, 1056);  // 2.06 MiB
  const auto start = reinterpret_cast<uintptr_t>(p.panel(0));
  EXPECT_EQ(start % (uintptr_t{2} << 20), 0u);
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false, advised = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' '))
      inside = lo <= start && start < hi;
    else if (inside && line.rfind("VmFlags:", 0) == 0)
      advised = (line + " ").find(" hg ") != std::string::npos;
  }
  EXPECT_TRUE(advised);
}

}  // namespace
}  // namespace specpipe::cpu
