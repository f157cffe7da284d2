// The host plan of a layer-wise prefill (issue 16 item 5; model/cuda/layer_prefill_plan.h):
// the chunks' windows and metadata, the dense slot's ring table, where each block goes
// when a layer is done, and the sequences it refuses. No GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "model/cuda/layer_prefill_plan.h"
#include "tests/cuda/small_config.h"

namespace specpipe::cuda {
namespace {

constexpr int32_t kPoolBlocks = 8, kBlock = 4, kRows = 16;

template <typename T>
std::vector<T> read_meta(const LayerPrefillPlan& p, size_t at, size_t n) {
  std::vector<T> v(n);
  std::memcpy(v.data(), p.meta.data() + at, n * sizeof(T));
  return v;
}

struct LayerPrefillPlanTest : ::testing::Test {
  ModelConfig config = small_plan_config();
  KvStore kv{kv_store_layout(config, kPoolBlocks, kBlock, /*device_pool=*/true)};
  ForwardGeometry geometry{kRows, kPoolBlocks, kBlock, forward_meta_layout(config, kRows, kPoolBlocks, kBlock, true)};

  LayerPrefillPlanTest() {
    const HostTierLayout layout{config.num_layers, config.num_kv_heads, config.head_dim, kBlock};
    kv.attach_host_tier(std::make_unique<HostKvTier>(layout, 16 * HostKvTier::block_bytes(layout)),
                        {[](int32_t, int32_t) {}, [](int32_t, int32_t) {}});
  }
};

TEST_F(LayerPrefillPlanTest, ChunksTheRowsAndSendsEachBlockWhereTheStoreBookedIt) {
  std::vector<int32_t> prompt(42);  // 10 full blocks and 2 tokens: 3 chunks of 16, 16, 10
  std::iota(prompt.begin(), prompt.end(), 5);
  const SeqId seq = kv.add_sequence({});
  kv.book_host_prefix(seq, std::span(prompt).first(28));  // 7 blocks on the host
  kv.reserve(seq, 42);                                     // 4 pool blocks
  const LayerPrefillPlan p = plan_layer_prefill(seq, prompt, kv, config, geometry);
  EXPECT_EQ(p.tokens, 42);
  EXPECT_EQ(p.blocks, 11);
  ASSERT_EQ(p.chunks(), 3);
  EXPECT_EQ(p.chunk_rows(2), 10);
  // A fresh tier and pool hand out consecutive blocks: one run each.
  ASSERT_EQ(p.to_host.size(), 1u);
  EXPECT_EQ(p.to_host[0].slot_first, 0);
  EXPECT_EQ(p.to_host[0].dst_first, kv.host_block_table(seq)[0]);
  EXPECT_EQ(p.to_host[0].blocks, 7);
  int32_t pool_blocks = 0;
  for (const SlotRun& r : p.to_pool) {
    for (int32_t i = 0; i < r.blocks; ++i) EXPECT_EQ(kv.block_table(seq)[r.slot_first + i], r.dst_first + i);
    pool_blocks += r.blocks;
  }
  EXPECT_EQ(pool_blocks, 4);
  EXPECT_EQ(p.to_pool.front().slot_first, 7);
  // Rows: the prompt's ids, positions = dense slots; each chunk one window whose prefix
  // is the chunks before it; the table names the slot's blocks.
  EXPECT_EQ(read_meta<int32_t>(p, p.tokens_at, 42), prompt);
  const auto slots = read_meta<int64_t>(p, p.slots_at, 42);
  const auto pos = read_meta<int32_t>(p, p.positions_at, 42);
  for (int32_t i = 0; i < 42; ++i) EXPECT_TRUE(slots[static_cast<size_t>(i)] == i && pos[static_cast<size_t>(i)] == i);
  const auto windows = read_meta<AttentionWindowDesc>(p, p.windows_at, 3);
  for (int32_t ci = 0; ci < 3; ++ci) {
    const AttentionWindowDesc& w = windows[static_cast<size_t>(ci)];
    EXPECT_TRUE(w.prefix_len == ci * kRows && w.first_token == 0 && w.n == p.chunk_rows(ci) &&
                w.block_table_offset == 0)
        << ci;
  }
  const auto table = read_meta<int32_t>(p, p.table_at, 11);
  for (int32_t i = 0; i < 11; ++i) EXPECT_EQ(ring_block_of(table[static_cast<size_t>(i)]), i);
  EXPECT_EQ(read_meta<int32_t>(p, p.zeros_at, kRows), std::vector<int32_t>(kRows, 0));
  EXPECT_EQ(read_meta<int32_t>(p, p.last_row_at, 1)[0], 9);
}

TEST_F(LayerPrefillPlanTest, AllInThePoolWorksToo) {
  const std::vector<int32_t> prompt(10, 3);
  const SeqId seq = kv.add_sequence({});
  kv.reserve(seq, 10);
  const LayerPrefillPlan p = plan_layer_prefill(seq, prompt, kv, config, geometry);
  EXPECT_TRUE(p.to_host.empty());
  ASSERT_EQ(p.to_pool.size(), 1u);
  EXPECT_EQ(p.to_pool[0].blocks, 3);
  EXPECT_EQ(p.chunks(), 1);
  EXPECT_EQ(read_meta<int32_t>(p, p.last_row_at, 1)[0], 9);
}

TEST_F(LayerPrefillPlanTest, RefusesWhatItCannotPrefill) {
  const std::vector<int32_t> prompt(12, 3);
  const SeqId seq = kv.add_sequence({});
  EXPECT_THROW(plan_layer_prefill(seq, prompt, kv, config, geometry), Error);  // nothing reserved
  kv.reserve(seq, 12);
  EXPECT_THROW(plan_layer_prefill(seq, {}, kv, config, geometry), Error);  // no prompt
  EXPECT_THROW(plan_layer_prefill(seq + 1, prompt, kv, config, geometry), Error);  // no sequence
  const std::vector<int32_t> long_prompt(257, 3);
  EXPECT_THROW(plan_layer_prefill(seq, long_prompt, kv, config, geometry), Error);  // past the positions
  kv.commit(seq, std::span(prompt).first(4));  // committed in the pool: not a fresh prompt
  EXPECT_THROW(plan_layer_prefill(seq, prompt, kv, config, geometry), Error);
  const SeqId other = kv.add_sequence({});
  kv.book_host_prefix(other, std::span(prompt).first(8));
  kv.reserve(other, 12);
  std::vector<int32_t> changed = prompt;
  changed[2] = 9;  // not the tokens booked
  EXPECT_THROW(plan_layer_prefill(other, changed, kv, config, geometry), Error);
  EXPECT_NO_THROW(plan_layer_prefill(other, prompt, kv, config, geometry));
}

}  // namespace
}  // namespace specpipe::cuda
