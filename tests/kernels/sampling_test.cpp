#include "kernels/cpu/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace specpipe::cpu {
namespace {

TEST(Argmax, LowestIndexWinsTies) {
  std::vector<float> l = {1, 3, 2, 3};
  EXPECT_EQ(argmax(l), 1);
}

TEST(SamplingDistribution, TemperatureSoftmax) {
  std::vector<float> l = {0, std::log(2.0f), std::log(4.0f)}, p;
  sampling_distribution(l, {1.0f, 0, 1.0f}, p);
  EXPECT_NEAR(p[0], 1.0 / 7, 1e-6);
  EXPECT_NEAR(p[2], 4.0 / 7, 1e-6);
  sampling_distribution(l, {0.5f, 0, 1.0f}, p);  // squares the odds
  EXPECT_NEAR(p[2], 16.0 / 21, 1e-6);
  EXPECT_THROW(sampling_distribution(l, {0.0f, 0, 1.0f}, p), std::exception);
  EXPECT_THROW(sampling_distribution(l, {NAN, 0, 1.0f}, p), std::exception);
}

TEST(SamplingDistribution, TopKThenTopP) {
  // probabilities 0.4, 0.3, 0.2, 0.1
  std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)}, p;
  sampling_distribution(l, {1.0f, 2, 1.0f}, p);
  EXPECT_NEAR(p[0], 4.0 / 7, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  sampling_distribution(l, {1.0f, 0, 0.65f}, p);  // 0.4 + 0.3 reaches 0.65
  EXPECT_NEAR(p[1], 3.0 / 7, 1e-6);
  EXPECT_EQ(p[2], 0.0f);
  sampling_distribution(l, {1.0f, 0, 0.01f}, p);  // always keeps one token
  EXPECT_EQ(p[0], 1.0f);
  sampling_distribution(l, {1.0f, 3, 0.7f}, p);  // top-p over the top-3 mass 0.9: 0.63 of it = 0.4+0.3
  EXPECT_NEAR(p[0] + p[1], 1.0, 1e-6);
}

TEST(SampleFrom, InverseCdfSkipsZeros) {
  std::vector<float> p = {0.0f, 0.25f, 0.0f, 0.75f};
  EXPECT_EQ(sample_from(p, 0.0), 1);
  EXPECT_EQ(sample_from(p, 0.2499), 1);
  EXPECT_EQ(sample_from(p, 0.25), 3);
  EXPECT_EQ(sample_from(p, 0.999999), 3);
  std::vector<float> zero(3, 0.0f);
  EXPECT_THROW(sample_from(zero, 0.5), std::exception);
}

}  // namespace
}  // namespace specpipe::cpu
