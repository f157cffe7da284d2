#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace specpipe::cpu {
namespace {

// A fake pool: `total` tokens of one sequence scattered over shuffled blocks.
struct Fixture {
  AttentionShape shape;
  int32_t block, total;
  int64_t kv_dim, q_dim;
  std::vector<float> pool_k, pool_v, q, k, v;  // q/k/v: all `total` tokens, dense
  std::vector<int32_t> table;

  explicit Fixture(int32_t tokens, uint32_t seed = 1, AttentionShape s = {6, 2, 64, 0.125f}, int32_t block_size = 4)
      : shape(s), block(block_size), total(tokens), kv_dim(int64_t{s.num_kv_heads} * s.head_dim),
        q_dim(int64_t{s.num_heads} * s.head_dim) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, size_t n) { x.resize(n); for (float& e : x) e = d(rng); };
    fill(q, static_cast<size_t>(total * q_dim));
    fill(k, static_cast<size_t>(total * kv_dim));
    fill(v, static_cast<size_t>(total * kv_dim));
    const int32_t blocks = (total + block - 1) / block;
    table.resize(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    pool_k.assign(static_cast<size_t>(blocks * block * kv_dim), NAN);  // unused slots poison
    pool_v = pool_k;
    for (int32_t p = 0; p < total; ++p) {
      const int64_t slot = int64_t{table[static_cast<size_t>(p / block)]} * block + p % block;
      std::memcpy(&pool_k[static_cast<size_t>(slot * kv_dim)], &k[static_cast<size_t>(p * kv_dim)], kv_dim * 4);
      std::memcpy(&pool_v[static_cast<size_t>(slot * kv_dim)], &v[static_cast<size_t>(p * kv_dim)], kv_dim * 4);
    }
  }
  // Window of n tokens starting at `start`: prefix from the pool, the rest dense.
  AttentionWindow window(int32_t start, int32_t n, float* out) const {
    PagedPrefix prefix{pool_k.data(), pool_v.data(), kv_dim, table.data(), block, start};
    return {prefix, q.data() + start * q_dim, k.data() + start * kv_dim, v.data() + start * kv_dim,
            q_dim, kv_dim, n, out, q_dim};
  }
};

TEST(Attention, MatchesDoubleReference) {
  Fixture f(37);
  for (int32_t start : {0, 5, 16, 30}) {
    const int32_t n = f.total - start;
    std::vector<float> got(static_cast<size_t>(n * f.q_dim)), want(got.size());
    AttentionWindow w = f.window(start, n, got.data());
    attention(f.shape, {&w, 1});
    w.out = want.data();
    attention_reference(f.shape, w);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << "start=" << start << " i=" << i;
  }
}

// The heart of batch invariance: a token's output is the same bits whether its
// predecessors are in the pool or in the same window, and whatever else is batched.
TEST(Attention, TokenOutputIndependentOfWindowSplitAndBatch) {
  Fixture f(41, 5), other(23, 9);
  const int32_t pos = 33;
  std::vector<float> alone(static_cast<size_t>(f.q_dim));
  AttentionWindow w1 = f.window(pos, 1, alone.data());
  attention(f.shape, {&w1, 1});
  for (int32_t start : {0, 7, 30, 32}) {
    const int32_t n = pos - start + 1 + 3;  // the window runs past pos
    std::vector<float> out(static_cast<size_t>(n * f.q_dim)), out2(static_cast<size_t>(other.total * other.q_dim));
    AttentionWindow batch[] = {other.window(0, other.total, out2.data()), f.window(start, n, out.data())};
    attention(f.shape, batch);
    ASSERT_EQ(0, std::memcmp(alone.data(), &out[static_cast<size_t>((pos - start) * f.q_dim)], f.q_dim * 4))
        << "start=" << start;
  }
}

// Every token of a window against the same token alone (a 1-token window over the same
// keys), bit for bit, over the shapes the kernel's tiles split differently: a kv head's
// rows of all the window's tokens go in tiles of up to 6, the tokens seeing different
// numbers of a key block's keys (the window's own), windows past one item (8 tokens),
// groups of 1 to 16 query heads, 1 and 2 threads, and windows batched.
TEST(Attention, WindowTokensEqualTheTokenAloneOnEveryTileSplit) {
  const AttentionShape shapes[] = {{2, 2, 64, 0.125f},  {4, 2, 64, 0.125f},  {6, 2, 32, 0.17f},
                                   {16, 8, 128, 0.088f}, {8, 1, 16, 0.25f}, {16, 1, 64, 0.125f},
                                   {12, 4, 256, 0.0625f}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const AttentionShape& shape : shapes) {
      Fixture f(60, 3, shape, 16), other(21, 4, shape, 16);
      for (int32_t start : {0, 3, 16, 29, 40}) {
        for (int32_t n = 1; n <= 12 && start + n <= f.total; ++n) {
          std::vector<float> out(static_cast<size_t>(n * f.q_dim)), out2(static_cast<size_t>(other.total * f.q_dim));
          AttentionWindow batch[] = {f.window(start, n, out.data()), other.window(0, other.total, out2.data())};
          attention(shape, {batch, n % 2 == 0 ? 2u : 1u});
          for (int32_t i = 0; i < n; ++i) {
            std::vector<float> alone(static_cast<size_t>(f.q_dim));
            AttentionWindow w = f.window(start + i, 1, alone.data());
            attention(shape, {&w, 1});
            ASSERT_EQ(0, std::memcmp(alone.data(), &out[static_cast<size_t>(i * f.q_dim)], f.q_dim * 4))
                << "heads " << shape.num_heads << "/" << shape.num_kv_heads << " head_dim " << shape.head_dim
                << " threads " << threads << " start " << start << " n " << n << " token " << i;
          }
        }
      }
    }
  }
  set_num_threads(0);
}

// The host tier's segment: positions [0, dense) read from a dense copy (a layer ring
// slot) instead of the pool must give the same bits as the all-in-pool prefix, with the
// pool's copies of those positions poisoned so a stray read would show; for a dense
// length on and off a block boundary, and in a batch beside an all-in-pool window.
TEST(Attention, DenseSegmentMatchesAllInPoolBitForBit) {
  Fixture f(45, 11), other(19, 3);
  for (int32_t start : {8, 29, 44}) {
    for (int32_t dense : {0, 1, 4, 7, 8, start}) {
      if (dense > start) continue;
      const int32_t n = f.total - start;
      std::vector<float> want(static_cast<size_t>(n * f.q_dim)), got(want.size()), ref_want(want.size()),
          ref_got(want.size()), other_out(static_cast<size_t>(other.total * other.q_dim));
      AttentionWindow pooled = f.window(start, n, want.data());
      attention(f.shape, {&pooled, 1});

      Fixture g = f;  // the same tokens; its pool loses positions [0, dense)
      for (int32_t p = 0; p < dense; ++p) {
        const int64_t slot = int64_t{g.table[static_cast<size_t>(p / g.block)]} * g.block + p % g.block;
        std::fill_n(&g.pool_k[static_cast<size_t>(slot * g.kv_dim)], g.kv_dim, NAN);
        std::fill_n(&g.pool_v[static_cast<size_t>(slot * g.kv_dim)], g.kv_dim, NAN);
      }
      AttentionWindow batch[] = {other.window(0, other.total, other_out.data()), g.window(start, n, got.data())};
      batch[1].prefix.dense_k = f.k.data();  // dense rows [0, dense): the tokens' own K/V
      batch[1].prefix.dense_v = f.v.data();
      batch[1].prefix.dense_length = dense;
      attention(f.shape, batch);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << "start=" << start << " dense=" << dense;

      // The reference reads keys in the same order from the same places.
      pooled.out = ref_want.data();
      attention_reference(f.shape, pooled);
      batch[1].out = ref_got.data();
      attention_reference(f.shape, batch[1]);
      ASSERT_EQ(0, std::memcmp(ref_want.data(), ref_got.data(), want.size() * 4)) << "start=" << start;
    }
  }
}

// SpecPV's retrieval by attention mass: the optional per-block mass is each prefix
// block's softmax probability summed over the kv head's query heads (checked against a
// double reference, dense segment included), and asking for it changes no output bit.
TEST(Attention, BlockMassIsThePrefixBlocksProbabilityAndChangesNoBit) {
  Fixture f(45, 7);
  const int32_t group = f.shape.num_heads / f.shape.num_kv_heads, hd = f.shape.head_dim;
  for (int32_t start : {13, 30, 44}) {
    for (int32_t dense : {0, 8}) {
      const int32_t n = f.total - start, blocks = (start + f.block - 1) / f.block;
      std::vector<float> plain(static_cast<size_t>(n * f.q_dim)), with(plain.size());
      std::vector<float> mass(static_cast<size_t>(n * f.shape.num_kv_heads * blocks), NAN);
      AttentionWindow w = f.window(start, n, plain.data());
      w.prefix.dense_k = f.k.data();
      w.prefix.dense_v = f.v.data();
      w.prefix.dense_length = dense;
      attention(f.shape, {&w, 1});
      w.out = with.data();
      w.block_mass = mass.data();
      attention(f.shape, {&w, 1});
      ASSERT_EQ(0, std::memcmp(plain.data(), with.data(), plain.size() * 4)) << "start=" << start;
      for (int32_t i = 0; i < n; ++i)
        for (int32_t g = 0; g < f.shape.num_kv_heads; ++g) {
          std::vector<double> want(static_cast<size_t>(blocks), 0.0);
          for (int32_t h = g * group; h < (g + 1) * group; ++h) {
            const int32_t len = start + i + 1;
            std::vector<double> p(static_cast<size_t>(len));
            double top = -1e300, sum = 0;
            for (int32_t j = 0; j < len; ++j) {
              double d = 0;
              for (int32_t e = 0; e < hd; ++e)
                d += double{f.q[static_cast<size_t>((start + i) * f.q_dim + h * hd + e)]} *
                     f.k[static_cast<size_t>(j * f.kv_dim + g * hd + e)];
              top = std::max(top, p[static_cast<size_t>(j)] = d * f.shape.scale);
            }
            for (double& x : p) sum += (x = std::exp(x - top));
            for (int32_t j = 0; j < start; ++j) want[static_cast<size_t>(j / f.block)] += p[static_cast<size_t>(j)] / sum;
          }
          for (int32_t b = 0; b < blocks; ++b)
            ASSERT_NEAR(mass[static_cast<size_t>((i * f.shape.num_kv_heads + g) * blocks + b)], want[static_cast<size_t>(b)], 1e-5)
                << "start=" << start << " dense=" << dense << " i=" << i << " g=" << g << " b=" << b;
        }
    }
  }
}

TEST(Attention, RejectsADenseSegmentPastThePrefix) {
  Fixture f(20);
  std::vector<float> out(static_cast<size_t>(4 * f.q_dim));
  AttentionWindow w = f.window(16, 4, out.data());
  w.prefix.dense_k = f.k.data();
  w.prefix.dense_v = f.v.data();
  w.prefix.dense_length = 17;
  EXPECT_THROW(attention(f.shape, {&w, 1}), std::exception);
  w.prefix.dense_length = 4;
  w.prefix.dense_v = nullptr;
  EXPECT_THROW(attention(f.shape, {&w, 1}), std::exception);
}

TEST(Attention, RejectsUnsupportedShapes) {
  AttentionShape bad{6, 4, 64, 1.0f};
  EXPECT_THROW(attention(bad, {}), std::exception);
}

}  // namespace
}  // namespace specpipe::cpu
