// The host plan of a CUDA forward over sequences whose oldest blocks live on the host
// tier (issue 16): which host blocks the layer ring loads, in what order, and the block
// table entries that point the attention kernels at them. No GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tests/cuda/small_config.h"
#include "model/cuda/forward_plan.h"

namespace specpipe::cuda {
namespace {

constexpr int32_t kBlocks = 64, kBlockSize = 4, kMaxTokens = 16;

struct ForwardPlanOffloadTest : ::testing::Test {
  ModelConfig config = small_plan_config();
  KvStore kv{kv_store_layout(config, kBlocks, kBlockSize, /*device_pool=*/true)};
  ForwardGeometry geometry{kMaxTokens, kBlocks, kBlockSize,
                           forward_meta_layout(config, kMaxTokens, kBlocks, kBlockSize)};
  std::vector<std::pair<int32_t, int32_t>> to_host;  // (pool block, host block) as the store asked

  ForwardPlanOffloadTest() {
    const HostTierLayout layout{config.num_layers, config.num_kv_heads, config.head_dim, kBlockSize};
    kv.attach_host_tier(std::make_unique<HostKvTier>(layout, 32 * HostKvTier::block_bytes(layout)),
                        {[this](int32_t pool, int32_t host) { to_host.emplace_back(pool, host); },
                         [](int32_t, int32_t) {}});
  }
  /// A sequence of `committed` tokens, one more position reserved, its oldest `host`
  /// blocks moved to the host tier.
  SeqId add(int32_t committed, int32_t host) {
    const std::vector<int32_t> prompt(static_cast<size_t>(committed), 7);
    const SeqId s = kv.add_sequence(prompt);
    kv.reserve(s, committed + 1);
    kv.commit(s, prompt);
    if (host > 0) kv.offload_prefix(s, host);
    return s;
  }
  std::vector<int32_t> table(SeqId s) const {
    const auto t = kv.block_table(s);
    return {t.begin(), t.end()};
  }
  std::vector<int32_t> host(SeqId s) const {
    const auto t = kv.host_block_table(s);
    return {t.begin(), t.end()};
  }
};

TEST(RingTableEntry, NegativeAndRoundTrips) {
  for (const int32_t block : {0, 1, 17, 1 << 20}) {
    EXPECT_LT(ring_table_entry(block), 0);
    EXPECT_EQ(ring_block_of(ring_table_entry(block)), block);
  }
}

TEST_F(ForwardPlanOffloadTest, HostBlocksComeFromTheRingInSequenceOrder) {
  const SeqId a = add(20, 3), b = add(9, 0), c = add(13, 2);
  ASSERT_EQ(host(a).size(), 3u);
  ASSERT_EQ(host(c).size(), 2u);
  ASSERT_EQ(to_host.size(), 5u);  // the store asked for every block's copy to the host
  const int32_t t = 5;
  const ForwardWindow windows[] = {{a, {&t, 1}}, {b, {&t, 1}}, {c, {&t, 1}}};
  const ForwardPlan p = plan_forward(windows, 1, false, false, kv, config, geometry);
  ASSERT_TRUE(p.streams_host_kv());
  // Ring blocks: a's host blocks, then c's, each in position order.
  std::vector<int32_t> ring = host(a);
  for (const int32_t h : host(c)) ring.push_back(h);
  EXPECT_EQ(p.ring_host_blocks, ring);
  // a's first three entries point at ring blocks 0..2, c's first two at 3..4; pool
  // blocks stay as the store has them.
  std::vector<int32_t> expect = table(a);
  for (int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(expect[static_cast<size_t>(i)], KvStore::kOnHost);
    expect[static_cast<size_t>(i)] = ring_table_entry(i);
  }
  const std::vector<int32_t> tb = table(b);
  expect.insert(expect.end(), tb.begin(), tb.end());
  std::vector<int32_t> tc = table(c);
  for (int32_t i = 0; i < 2; ++i) tc[static_cast<size_t>(i)] = ring_table_entry(3 + i);
  expect.insert(expect.end(), tc.begin(), tc.end());
  EXPECT_EQ(p.block_tables, expect);
  for (size_t i = 3; i < table(a).size(); ++i) EXPECT_GE(p.block_tables[i], 0);
  // The pool slots of the new tokens are where they were.
  EXPECT_EQ(p.slots, (std::vector<int64_t>{kv.slot(a, 20), kv.slot(b, 9), kv.slot(c, 13)}));
}

TEST(ForwardMetaLayout, WithAHostTierTablesCoverEveryPositionNotJustThePool) {
  const ModelConfig c = small_plan_config();  // 256 positions: 65 blocks of 4 (+1)
  EXPECT_EQ(forward_meta_layout(c, kMaxTokens, 8, kBlockSize).table_capacity(), size_t{kMaxTokens} * 8);
  EXPECT_EQ(forward_meta_layout(c, kMaxTokens, 8, kBlockSize, true).table_capacity(), size_t{kMaxTokens} * 65);
}

TEST_F(ForwardPlanOffloadTest, ASmallPoolWithAHostTierPlansALongSequence) {
  // 8 pool blocks, a sequence of 120 tokens (30 blocks, 29 of them on the host tier):
  // its table outgrows the pool, which only a host-tier layout has room for.
  KvStore small(kv_store_layout(config, 8, kBlockSize, /*device_pool=*/true));
  const HostTierLayout layout{config.num_layers, config.num_kv_heads, config.head_dim, kBlockSize};
  small.attach_host_tier(std::make_unique<HostKvTier>(layout, 40 * HostKvTier::block_bytes(layout)),
                         {[](int32_t, int32_t) {}, [](int32_t, int32_t) {}});
  const std::vector<int32_t> chunk(4, 7);
  const SeqId s = small.add_sequence(chunk);
  for (int32_t i = 0; i < 30; ++i) {
    small.reserve(s, small.length(s) + 4);
    small.commit(s, chunk);
    if (small.offloadable_blocks(s) > 1) small.offload_prefix(s, small.offloadable_blocks(s) - 1);
  }
  small.reserve(s, 121);
  const int32_t t = 5;
  const ForwardWindow w[] = {{s, {&t, 1}}};
  // Metadata for one row: 8 table entries (the pool), or 65 (every position's block).
  const ForwardGeometry one_row_pool_only{kMaxTokens, 8, kBlockSize, forward_meta_layout(config, 1, 8, kBlockSize)};
  const ForwardGeometry with_host{kMaxTokens, 8, kBlockSize, forward_meta_layout(config, 1, 8, kBlockSize, true)};
  try {
    plan_forward(w, 1, false, false, small, config, one_row_pool_only);
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  }
  const ForwardPlan p = plan_forward(w, 1, false, false, small, config, with_host);
  EXPECT_EQ(p.ring_host_blocks.size(), 29u);
  EXPECT_EQ(p.block_tables.size(), 31u);
}

TEST_F(ForwardPlanOffloadTest, NoHostBlocksNoRing) {
  const SeqId b = add(9, 0);
  const std::vector<int32_t> tokens = {1};
  const ForwardWindow windows[] = {{b, tokens}};
  const ForwardPlan p = plan_forward(windows, 1, false, false, kv, config, geometry);
  EXPECT_FALSE(p.streams_host_kv());
  EXPECT_EQ(p.block_tables, table(b));
}

TEST_F(ForwardPlanOffloadTest, RefusesGreedyChainsOverHostBlocks) {
  const SeqId a = add(20, 2), b = add(9, 0);
  kv.reserve(a, 24);
  kv.reserve(b, 12);
  const std::vector<int32_t> tokens = {1};
  const ForwardWindow over_host[] = {{a, tokens}};
  try {
    plan_forward(over_host, 2, true, false, kv, config, geometry);
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
  }
  const ForwardWindow pool_only[] = {{b, tokens}};
  EXPECT_NO_THROW(plan_forward(pool_only, 2, true, false, kv, config, geometry));
}

}  // namespace
}  // namespace specpipe::cuda

// SpecPV over the host tier: a window with a partial view of pool blocks only (copies of
// its host blocks stand in here as any pool blocks) streams nothing, while the same
// sequence's full window streams its host part; a view naming a host entry is refused.
namespace specpipe::cuda {
namespace {

TEST_F(ForwardPlanOffloadTest, APartialViewOfAHostTierSequenceStreamsNothing) {
  const SeqId a = add(20, 3);  // blocks 0-2 on the host, 3-4 (full) and 5 in the pool
  const std::vector<int32_t> tokens = {1};
  const auto t = kv.block_table(a);
  PrefixView view;
  // Every layer: a pool block in place of a host block's copy, then the last committed block.
  view.pool_blocks.assign(static_cast<size_t>(config.num_layers), {t[3], t[4]});
  view.lengths.assign(static_cast<size_t>(config.num_layers), 2 * kBlockSize);
  ForwardWindow w{a, tokens};
  w.view = &view;
  const ForwardPlan partial = plan_forward({&w, 1}, 1, false, false, kv, config, geometry);
  EXPECT_FALSE(partial.streams_host_kv());
  EXPECT_TRUE(partial.views());
  const ForwardWindow full{a, tokens};
  EXPECT_TRUE(plan_forward({&full, 1}, 1, false, false, kv, config, geometry).streams_host_kv());
  view.pool_blocks.front().front() = KvStore::kOnHost;
  EXPECT_THROW(plan_forward({&w, 1}, 1, false, false, kv, config, geometry), Error);
}

// A batch with a partial view beside a full window of a host-tier sequence: that window's
// per-layer tables (the view forward reads those, not the batch's table) point its host
// blocks at their ring blocks, as its batch table does.
TEST_F(ForwardPlanOffloadTest, AFullWindowBesideAViewReadsItsHostBlocksFromTheRing) {
  const SeqId a = add(20, 3), c = add(10, 2);
  kv.reserve(c, 11);
  const std::vector<int32_t> tokens = {1};
  const auto t = kv.block_table(a);
  PrefixView view;
  view.pool_blocks.assign(static_cast<size_t>(config.num_layers), {t[3], t[4]});
  view.lengths.assign(static_cast<size_t>(config.num_layers), 2 * kBlockSize);
  ForwardWindow windows[] = {{a, tokens}, {c, tokens}};
  windows[0].view = &view;
  const ForwardPlan p = plan_forward(windows, 1, false, false, kv, config, geometry);
  ASSERT_TRUE(p.views());
  EXPECT_TRUE(p.streams_host_kv());
  const std::span<const int32_t> batch_table =
      std::span<const int32_t>(p.block_tables).subspan(static_cast<size_t>(p.attention.windows[1].block_table_offset),
                                                       kv.block_table(c).size());
  for (int32_t l = 0; l < config.num_layers; ++l) {
    const AttentionWindowDesc& d = p.layer_windows[static_cast<size_t>(l) * 2 + 1];
    const auto layer_table = std::span<const int32_t>(p.layer_tables)
                                 .subspan(static_cast<size_t>(l * p.layer_table_len + d.block_table_offset),
                                          batch_table.size());
    EXPECT_TRUE(std::equal(layer_table.begin(), layer_table.end(), batch_table.begin())) << "layer " << l;
  }
  // c's two host blocks are ring blocks 0 and 1 (a, with its view, loads none); the
  // store's kOnHost (-1) would have sent both to ring block 0.
  EXPECT_EQ(batch_table[0], ring_table_entry(0));
  EXPECT_EQ(batch_table[1], ring_table_entry(1));
}

}  // namespace
}  // namespace specpipe::cuda
