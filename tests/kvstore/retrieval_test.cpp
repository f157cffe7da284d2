// SpecPV retrieval and partial views: block summaries against a naive max / min, the
// Quest bound against every key's real dot product, top-k selection, the view's blocks
// (sink, retrieved, recent region; the last block always in view) and its refusals, and
// the index reading a real KV store (only fully verified blocks summarised).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "kvstore/block_summaries.h"
#include "kvstore/host_tier.h"
#include "kvstore/kv_store.h"
#include "kvstore/partial_view.h"
#include "kvstore/retrieval_index.h"

namespace specpipe {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(BlockSummaries, MaxMinAndQuestBoundHoldForEveryKey) {
  const SummaryShape shape{2, 2, 8, 4};  // 2 layers, 2 KV heads of 8, blocks of 4
  const int32_t d = shape.kv_dim(), blocks = 5, heads = 4;  // 2 query heads per KV head
  const auto keys = random_floats(static_cast<size_t>(blocks * shape.block_size * d), 1);
  BlockSummaries s(shape);
  for (int32_t b = 0; b < blocks; ++b) {
    for (int32_t layer = 0; layer < 2; ++layer) s.add_layer_block(layer, keys.data() + b * shape.block_size * d, d);
    s.finish_block();
  }
  ASSERT_EQ(s.blocks(), blocks);
  for (int32_t b = 0; b < blocks; ++b)
    for (int32_t i = 0; i < d; ++i) {
      float mx = -1e30f, mn = 1e30f;
      for (int32_t r = 0; r < shape.block_size; ++r) {
        mx = std::max(mx, keys[static_cast<size_t>((b * shape.block_size + r) * d + i)]);
        mn = std::min(mn, keys[static_cast<size_t>((b * shape.block_size + r) * d + i)]);
      }
      EXPECT_EQ(s.kmax(1, b)[i], mx);
      EXPECT_EQ(s.kmin(1, b)[i], mn);
    }
  // One query row: the score of a block bounds every key's dot product from above,
  // summed over the query heads.
  const auto q = random_floats(static_cast<size_t>(heads * shape.head_dim), 2);
  std::vector<float> scores(blocks);
  s.score(0, q.data(), 1, heads * shape.head_dim, heads, scores);
  for (int32_t b = 0; b < blocks; ++b)
    for (int32_t r = 0; r < shape.block_size; ++r) {
      double dot = 0;
      for (int32_t h = 0; h < heads; ++h)
        for (int32_t e = 0; e < shape.head_dim; ++e)
          dot += q[static_cast<size_t>(h * shape.head_dim + e)] *
                 keys[static_cast<size_t>((b * shape.block_size + r) * d + (h / 2) * shape.head_dim + e)];
      EXPECT_GE(scores[static_cast<size_t>(b)] + 1e-4, dot) << "block " << b << " row " << r;
    }
  s.truncate(2);
  EXPECT_EQ(s.blocks(), 2);
  s.add_layer_block(0, keys.data(), d);
  EXPECT_THROW(s.add_layer_block(0, keys.data(), d), std::exception) << "layer 0 is a block ahead already";
}

TEST(BlockSummaries, TopBlocksAscendingDeterministicFromFirst) {
  const std::vector<float> scores{5, 1, 9, 9, 3, 7};
  EXPECT_EQ(top_blocks(scores, 3), (std::vector<int32_t>{2, 3, 5}));
  EXPECT_EQ(top_blocks(scores, 2, 3), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(top_blocks(scores, 1), (std::vector<int32_t>{2}));  // a tie goes to the earlier block
  EXPECT_EQ(top_blocks(scores, 10, 4).size(), 2u);
  EXPECT_TRUE(top_blocks(scores, 0).empty());
}

TEST(PartialView, SinkRetrievedRecentAndTheLastBlock) {
  // 200 tokens in blocks of 16 (13 blocks, the last holding 8); verified up to 190.
  const ViewBudget budget{16, 2, 32, 64};
  const std::vector<int32_t> retrieved{3, 7};
  ViewRefusal why{};
  const auto blocks = view_blocks(200, 190, 16, budget, retrieved, &why);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(why, ViewRefusal::none);
  // sink block 0; retrieved 3, 7; recent from min(190, 200 - 32) = 168: block 10 on.
  EXPECT_EQ(*blocks, (std::vector<int32_t>{0, 3, 7, 10, 11, 12}));
  EXPECT_EQ(view_length(*blocks, 200, 16), 5 * 16 + 8);
  // Unverified tokens since 150 widen the recent region to block 9.
  EXPECT_EQ(view_blocks(200, 150, 16, budget, retrieved)->at(3), 9);
  // Retrieved blocks inside the sink or the recent region are not counted twice.
  EXPECT_EQ(view_blocks(200, 190, 16, budget, std::vector<int32_t>{0, 11})->size(), 4u);
  // A block boundary: the last full block is still the view's last.
  const auto aligned = view_blocks(192, 192, 16, ViewBudget{0, 1, 0, 64}, std::vector<int32_t>{2});
  ASSERT_TRUE(aligned);
  EXPECT_EQ(aligned->back(), 11);
  EXPECT_EQ(view_length(*aligned, 192, 16), 32);
}

TEST(PartialView, RefusesWholeContextAndFullBuffer) {
  ViewRefusal why{};
  EXPECT_FALSE(view_blocks(40, 40, 16, ViewBudget{64, 4, 256, 64}, {}, &why));
  EXPECT_EQ(why, ViewRefusal::covers_context);
  EXPECT_FALSE(view_blocks(0, 0, 16, ViewBudget{0, 1, 0, 0}, {}, &why));
  EXPECT_EQ(why, ViewRefusal::covers_context);
  EXPECT_FALSE(view_blocks(500, 400, 16, ViewBudget{16, 2, 32, 64}, {}, &why));
  EXPECT_EQ(why, ViewRefusal::buffer_full);
}

// The store of the RetrievalIndex tests: 2 layers, 1 KV head of 4, blocks of 4 tokens.
KvStoreConfig two_layer_store() {
  KvStoreConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.block_size = 4;
  c.num_blocks = 16;
  c.prefix_cache = false;
  return c;
}

TEST(RetrievalIndex, SummarisesVerifiedFullBlocksFromThePool) {
  KvStore kv(two_layer_store());
  const SeqId seq = kv.add_sequence({});
  std::vector<int32_t> tokens(14);
  kv.reserve(seq, 14);
  // Key of position p, layer l, element i: p * 10 + l + i / 10.
  for (int32_t p = 0; p < 14; ++p)
    for (int32_t l = 0; l < 2; ++l)
      for (int32_t i = 0; i < 4; ++i)
        kv.tensors().k(l)[kv.slot(seq, p) * 4 + i] = static_cast<float>(p * 10 + l) + static_cast<float>(i) / 10;
  kv.commit(seq, tokens);
  RetrievalIndex index({2, 1, 4, 4});
  index.update(kv, seq, 9);  // verified 9: blocks 0 and 1 are full and verified
  EXPECT_EQ(index.summarised_blocks(seq), 2);
  index.update(kv, seq, 14);
  EXPECT_EQ(index.summarised_blocks(seq), 3);
  // A query along element 0: block 2 (positions 8-11) scores highest, then 1.
  const std::vector<float> q{1, 0, 0, 0};
  index.select(seq, 1, q.data(), 1, 4, 1, 2, 0, 3);
  EXPECT_EQ(std::vector<int32_t>(index.retrieved(seq, 1).begin(), index.retrieved(seq, 1).end()),
            (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(index.ready(seq));
  index.mark_ready(seq);
  EXPECT_TRUE(index.ready(seq));
  kv.truncate(seq, 6);
  index.update(kv, seq, 14);  // the store holds 6 now: one full block
  EXPECT_EQ(index.summarised_blocks(seq), 1);
  kv.release(seq);
  index.forget_all_but(kv);
  EXPECT_EQ(index.summarised_blocks(seq), 0);
}

// A sequence of 14 committed tokens over random keys (layer l's shifted by l), after
// another sequence's block so that its pool ids differ from its block indices.
SeqId random_fourteen(KvStore& kv, uint32_t seed) {
  const SeqId other = kv.add_sequence({});
  kv.reserve(other, 4);
  const SeqId seq = kv.add_sequence({});
  kv.reserve(seq, 14);
  const auto keys = random_floats(static_cast<size_t>(kv.config().num_blocks * 4 * 4), seed);
  for (int32_t l = 0; l < 2; ++l)
    for (size_t i = 0; i < keys.size(); ++i) kv.tensors().k(l)[i] = keys[i] + static_cast<float>(l);
  kv.commit(seq, std::vector<int32_t>(14));
  return seq;
}

// A device pool's path (ForwardModel::key_summariser): the summariser is asked only for
// the newly full, verified blocks, by pool block id, all layers at once, and its answer
// gives the same summaries as the keys read from the pool.
TEST(RetrievalIndex, SummariserAnswersEqualThePoolsKeys) {
  KvStore kv(two_layer_store());
  const SeqId seq = random_fourteen(kv, 3);
  std::vector<std::vector<int32_t>> asked;
  const KeySummariser summarise = [&](std::span<const int32_t> blocks, float* kmax, float* kmin) {
    asked.emplace_back(blocks.begin(), blocks.end());
    BlockSummaries s({2, 1, 4, 4});
    for (int32_t b : blocks) {
      for (int32_t l = 0; l < 2; ++l) s.add_layer_block(l, kv.tensors().k(l) + b * 16, 4);
      s.finish_block();
    }
    const auto n = static_cast<int64_t>(blocks.size());
    for (int32_t l = 0; l < 2; ++l)
      for (int32_t b = 0; b < n; ++b)
        for (int32_t i = 0; i < 4; ++i) {
          kmax[(l * n + b) * 4 + i] = s.kmax(l, b)[i];
          kmin[(l * n + b) * 4 + i] = s.kmin(l, b)[i];
        }
  };
  RetrievalIndex device({2, 1, 4, 4}), host({2, 1, 4, 4});
  device.update(kv, seq, 5, summarise);
  device.update(kv, seq, 14, summarise);
  host.update(kv, seq, 14);
  const auto table = kv.block_table(seq);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0], (std::vector<int32_t>{table[0]}));
  EXPECT_EQ(asked[1], (std::vector<int32_t>{table[1], table[2]}));
  ASSERT_EQ(device.summarised_blocks(seq), 3);
  const std::vector<float> q{1, -1, 0.5f, 2};
  for (int32_t l = 0; l < 2; ++l) {
    device.select(seq, l, q.data(), 1, 4, 1, 2, 0, 3);
    host.select(seq, l, q.data(), 1, 4, 1, 2, 0, 3);
    EXPECT_EQ(std::vector<int32_t>(device.retrieved(seq, l).begin(), device.retrieved(seq, l).end()),
              std::vector<int32_t>(host.retrieved(seq, l).begin(), host.retrieved(seq, l).end()));
  }
  device.update(kv, seq, 14, summarise);  // nothing new: not asked again
  EXPECT_EQ(asked.size(), 2u);
}

// Device mode (DeviceRetrieval, a CUDA pool's; here a host stand-in keeping the
// summaries it is given by block index and picking as top_blocks does): the index asks
// it for the newly verified blocks only - host-tier blocks summarised from the tier and
// uploaded, pool blocks by pool id -, again after a truncation, forgets released
// sequences, and chooses what the host index chooses from the same sums.
class HostStandIn final : public DeviceRetrieval {
 public:
  HostStandIn(SummaryShape shape, const KvStore& kv) : shape_(shape), kv_(kv) {}
  struct Call {
    bool pool;
    int32_t first;
    std::vector<int32_t> blocks;  // pool ids (pool), or n (uploads)
    bool operator==(const Call&) const = default;
  };
  std::vector<Call> calls;
  std::vector<SeqId> forgotten;
  std::vector<std::vector<QuerySums>> sums;  // by handle, per layer

  void summarise(SeqId seq, int32_t first, std::span<const int32_t> pool_blocks) override {
    calls.push_back({true, first, {pool_blocks.begin(), pool_blocks.end()}});
    const int32_t B = shape_.block_size, d = shape_.kv_dim();
    for (size_t i = 0; i < pool_blocks.size(); ++i) {
      BlockSummaries one(shape_);
      for (int32_t l = 0; l < shape_.num_layers; ++l)
        one.add_layer_block(l, kv_.tensors().k(l) + int64_t{pool_blocks[i]} * B * d, d);
      one.finish_block();
      for (int32_t l = 0; l < shape_.num_layers; ++l) put(seq, l, first + static_cast<int32_t>(i), one.kmax(l, 0), one.kmin(l, 0));
    }
  }
  void upload(SeqId seq, int32_t first, int32_t n, const float* kmax, const float* kmin) override {
    calls.push_back({false, first, {n}});
    const int32_t d = shape_.kv_dim();
    for (int32_t l = 0; l < shape_.num_layers; ++l)
      for (int32_t b = 0; b < n; ++b) put(seq, l, first + b, kmax + (l * n + b) * d, kmin + (l * n + b) * d);
  }
  void select(SeqId seq, int32_t handle, int32_t blocks, int32_t k, int32_t first,
              std::vector<std::vector<int32_t>>& out) override {
    BlockSummaries s(shape_);
    for (int32_t b = 0; b < blocks; ++b) {
      for (int32_t l = 0; l < shape_.num_layers; ++l)
        s.add_layer_summary(l, at(seq, l, b, max_), at(seq, l, b, min_));
      s.finish_block();
    }
    out.assign(static_cast<size_t>(shape_.num_layers), {});
    std::vector<float> scores(static_cast<size_t>(blocks));
    for (int32_t l = 0; l < shape_.num_layers; ++l) {
      s.score(l, sums.at(static_cast<size_t>(handle)).at(static_cast<size_t>(l)), scores);
      out[static_cast<size_t>(l)] = top_blocks(scores, k, first);
    }
  }
  void forget(SeqId seq) override { forgotten.push_back(seq); }

 private:
  static constexpr int32_t kCap = 16;
  float* at(SeqId seq, int32_t l, int32_t b, std::map<SeqId, std::vector<float>>& m) {
    std::vector<float>& v = m[seq];
    v.resize(static_cast<size_t>(shape_.num_layers * kCap * shape_.kv_dim()));
    return v.data() + (l * kCap + b) * shape_.kv_dim();
  }
  void put(SeqId seq, int32_t l, int32_t b, const float* kmax, const float* kmin) {
    std::copy_n(kmax, shape_.kv_dim(), at(seq, l, b, max_));
    std::copy_n(kmin, shape_.kv_dim(), at(seq, l, b, min_));
  }
  SummaryShape shape_;
  const KvStore& kv_;
  std::map<SeqId, std::vector<float>> max_, min_;
};

TEST(RetrievalIndex, DeviceModeAsksForNewBlocksOnlyAndChoosesAsTheHost) {
  KvStore kv(two_layer_store());
  const HostTierLayout layout{2, 1, 4, 4};
  kv.attach_host_tier(std::make_unique<HostKvTier>(layout, 8 * HostKvTier::block_bytes(layout)));
  const SeqId seq = random_fourteen(kv, 4);
  kv.offload_prefix(seq, 2);  // blocks 0-1 on the host tier, 2-3 in the pool
  const SummaryShape shape{2, 1, 4, 4};
  auto dev = std::make_shared<HostStandIn>(shape, kv);
  RetrievalIndex device(shape, dev), host(shape);
  ASSERT_TRUE(device.on_device());
  const std::vector<float> q{1, -1, 0.5f, 2, -0.25f, 3, -2, 1};  // two rows
  dev->sums.push_back({QuerySums::of(shape, q.data(), 2, 4, 1), QuerySums::of(shape, q.data() + 4, 1, 4, 1)});
  auto expect_same = [&](int32_t k, int32_t first, int32_t last) {
    device.select_on_device(seq, 0, k, first, last);
    for (int32_t l = 0; l < 2; ++l) {
      host.select(seq, l, dev->sums[0][static_cast<size_t>(l)], k, first, last);
      EXPECT_EQ(std::vector<int32_t>(device.retrieved(seq, l).begin(), device.retrieved(seq, l).end()),
                std::vector<int32_t>(host.retrieved(seq, l).begin(), host.retrieved(seq, l).end()))
          << "layer " << l << " k " << k;
    }
  };
  device.update_on_device(kv, seq, 5);  // one verified full block, on the host tier
  device.update_on_device(kv, seq, 14);
  host.update(kv, seq, 14);
  const auto table = kv.block_table(seq);
  using Call = HostStandIn::Call;
  EXPECT_EQ(dev->calls, (std::vector<Call>{{false, 0, {1}}, {false, 1, {1}}, {true, 2, {table[2]}}}));
  EXPECT_EQ(device.summarised_blocks(seq), 3);
  expect_same(2, 0, 3);
  expect_same(1, 1, 3);
  expect_same(5, 0, 3);  // more than there are: all
  device.update_on_device(kv, seq, 14);  // nothing new: not asked
  EXPECT_EQ(dev->calls.size(), 3u);
  // A rollback past block 2, written again: block 2 is summarised again from the pool.
  kv.truncate(seq, 9);
  device.update_on_device(kv, seq, 9);
  EXPECT_EQ(device.summarised_blocks(seq), 2);
  kv.reserve(seq, 14);
  for (int32_t p = 9; p < 14; ++p)
    for (int32_t l = 0; l < 2; ++l)
      for (int32_t i = 0; i < 4; ++i) kv.tensors().k(l)[kv.slot(seq, p) * 4 + i] = static_cast<float>(p - i * l);
  kv.commit(seq, std::vector<int32_t>(5));
  device.update_on_device(kv, seq, 14);
  host.update(kv, seq, 9);
  host.update(kv, seq, 14);
  ASSERT_EQ(dev->calls.size(), 4u);
  EXPECT_EQ(dev->calls.back(), (Call{true, 2, {kv.block_table(seq)[2]}}));
  expect_same(2, 0, 3);
  kv.release(seq);
  device.forget_all_but(kv);
  EXPECT_EQ(dev->forgotten, std::vector<SeqId>{seq});
  EXPECT_EQ(device.summarised_blocks(seq), 0);
}

// Many host-tier blocks (a long prompt booked on the tier): summarised on the host by
// several threads, each a share of the blocks; the one upload holds the summaries of one
// BlockSummaries over the tier's keys, bit for bit, in layer-major order.
class UploadCapture final : public DeviceRetrieval {
 public:
  void summarise(SeqId, int32_t, std::span<const int32_t> pool_blocks) override { pool += pool_blocks.size(); }
  void upload(SeqId, int32_t first_block, int32_t blocks, const float* kmax, const float* kmin) override {
    first = first_block;
    n = blocks;
    const size_t size = static_cast<size_t>(2 * blocks * 4);  // two layers of kv_dim 4
    max.assign(kmax, kmax + size);
    min.assign(kmin, kmin + size);
    ++uploads;
  }
  void select(SeqId, int32_t, int32_t, int32_t, int32_t, std::vector<std::vector<int32_t>>&) override {}
  void forget(SeqId) override {}
  size_t pool = 0;
  int32_t uploads = 0, first = -1, n = 0;
  std::vector<float> max, min;
};

TEST(RetrievalIndex, DeviceModeSummarisesManyHostTierBlocksInThreadsAsOneBlockSummaries) {
  KvStore kv(two_layer_store());
  const HostTierLayout layout{2, 1, 4, 4};
  constexpr int32_t kBlocks = 600;  // 1,200 block-layers: shared out among the threads
  kv.attach_host_tier(std::make_unique<HostKvTier>(layout, kBlocks * HostKvTier::block_bytes(layout)));
  const SeqId seq = kv.add_sequence({});
  ASSERT_GT(kv.book_host_prefix(seq, std::vector<int32_t>(kBlocks * 4)), 0);
  HostKvTier& tier = *kv.host_tier();
  const auto host = kv.host_block_table(seq);
  const auto keys = random_floats(static_cast<size_t>(kBlocks * 4 * 4), 5);
  for (int32_t l = 0; l < 2; ++l)
    for (int32_t b = 0; b < kBlocks; ++b)
      for (int32_t i = 0; i < 16; ++i)
        tier.k(l)[int64_t{host[static_cast<size_t>(b)]} * 16 + i] = keys[static_cast<size_t>(b * 16 + i)] * (l + 1.0f);
  auto dev = std::make_shared<UploadCapture>();
  RetrievalIndex index({2, 1, 4, 4}, dev);
  index.update_on_device(kv, seq, kBlocks * 4);
  ASSERT_EQ(dev->uploads, 1);
  EXPECT_EQ(dev->first, 0);
  ASSERT_EQ(dev->n, kBlocks);
  EXPECT_EQ(dev->pool, 0u);
  BlockSummaries want({2, 1, 4, 4});
  for (int32_t b = 0; b < kBlocks; ++b) {
    for (int32_t l = 0; l < 2; ++l) want.add_layer_block(l, tier.k(l) + int64_t{host[static_cast<size_t>(b)]} * 16, 4);
    want.finish_block();
  }
  for (int32_t l = 0; l < 2; ++l) {
    const auto at = static_cast<size_t>(l * kBlocks * 4);
    EXPECT_TRUE(std::equal(want.kmax(l, 0), want.kmax(l, 0) + kBlocks * 4, dev->max.begin() + static_cast<std::ptrdiff_t>(at)))
        << "layer " << l;
    EXPECT_TRUE(std::equal(want.kmin(l, 0), want.kmin(l, 0) + kBlocks * 4, dev->min.begin() + static_cast<std::ptrdiff_t>(at)))
        << "layer " << l;
  }
  EXPECT_EQ(index.summarised_blocks(seq), kBlocks);
}

}  // namespace
}  // namespace specpipe
