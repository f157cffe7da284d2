#include "kvstore/kv_tensors.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"

namespace specpipe {
namespace {

TEST(KvTensors, ShapeAndZeroInitialisation) {
  KvTensors tensors(/*num_layers=*/3, /*num_blocks=*/4, /*block_size=*/2, /*kv_heads=*/2,
                    /*head_dim=*/5);
  EXPECT_EQ(tensors.num_layers(), 3);
  EXPECT_EQ(tensors.slot_stride(), 10);
  const int64_t floats = 4 * 2 * 10;
  EXPECT_EQ(tensors.bytes(), size_t{2 * 3 * floats * sizeof(float)});
  for (int32_t layer = 0; layer < 3; ++layer) {
    for (int64_t i = 0; i < floats; ++i) {
      ASSERT_EQ(tensors.k(layer)[i], 0.0f);
      ASSERT_EQ(tensors.v(layer)[i], 0.0f);
    }
  }
}

TEST(KvTensors, CopyBlockCopiesEveryLayerAndNothingElse) {
  KvTensors tensors(2, 3, 4, 1, 2);
  const int64_t floats = 3 * 4 * 2, block_floats = 4 * 2;
  for (int32_t layer = 0; layer < 2; ++layer) {
    for (int64_t i = 0; i < floats; ++i) {
      tensors.k(layer)[i] = static_cast<float>(1000 * layer + i);
      tensors.v(layer)[i] = static_cast<float>(-1000 * layer - i);
    }
  }
  tensors.copy_block(0, 2);
  for (int32_t layer = 0; layer < 2; ++layer) {
    for (int64_t i = 0; i < floats; ++i) {
      const int64_t source = i >= 2 * block_floats ? i - 2 * block_floats : i;
      EXPECT_EQ(tensors.k(layer)[i], static_cast<float>(1000 * layer + source));
      EXPECT_EQ(tensors.v(layer)[i], static_cast<float>(-1000 * layer - source));
    }
  }
  EXPECT_THROW(tensors.copy_block(0, 3), Error);
  EXPECT_THROW(tensors.copy_block(-1, 1), Error);
}

TEST(KvTensors, RejectsEmptyShapes) {
  EXPECT_THROW(KvTensors(0, 1, 1, 1, 1), Error);
  EXPECT_THROW(KvTensors(1, 1, 1, 1, 0), Error);
  try {
    KvTensors(1, 1, 0, 1, 1);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("block_size"), std::string::npos);
  }
}

// A store whose pool lives on a device keeps only the books: no host storage, and every
// host write or copy-on-write fails loudly instead of touching memory that is not there.
TEST(KvTensors, BookkeepingOnlyStoreHoldsNoPool) {
  KvStoreConfig c{.num_layers = 2, .num_kv_heads = 1, .head_dim = 4, .block_size = 4, .num_blocks = 8,
                  .prefix_cache = false, .host_tensors = false};
  KvStore store(c);
  EXPECT_FALSE(store.tensors().holds_pool());
  EXPECT_EQ(store.tensors().bytes(), 0u);
  EXPECT_EQ(store.tensors().k(0), nullptr);
  const SeqId seq = store.add_sequence({});
  store.reserve(seq, 3);
  EXPECT_EQ(store.slot(seq, 2), store.block_table(seq)[0] * 4 + 2);  // the books work as usual
  const std::vector<float> rows(3 * 4, 1.0f);
  try {
    write_rows_to_pool(store, 0, seq, 0, 3, rows.data(), rows.data(), 4);
    FAIL() << "a host write into a device pool must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no host tensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store.tensors().copy_block(0, 1), Error);

  // The direct writer only counts rows a device forward reports with null pointers.
  DirectKvWriter writer(store);
  const WindowKvRows written{seq, 0, 3, nullptr, nullptr, 0};
  writer.write_layer(0, {&written, 1});
  writer.write_layer(1, {&written, 1});
  EXPECT_EQ(writer.stats().rows_written, 6);
  store.commit(seq, std::vector<int32_t>{1, 2, 3});
  EXPECT_EQ(store.length(seq), 3);
  store.check_invariants();
}

TEST(KvTensors, BookkeepingOnlyStoreNeedsABlockCopierForThePrefixCache) {
  KvStoreConfig c{.num_layers = 1, .num_kv_heads = 1, .head_dim = 4, .block_size = 4, .num_blocks = 8,
                  .prefix_cache = true, .host_tensors = false};
  try {
    KvStore store(c);
    FAIL() << "prefix cache without host tensors or a block copier must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("block copier"), std::string::npos) << e.what();
  }
}

// With a copier (a device model's), copy-on-write of a shared prefix block asks it to
// copy the block where the pool lives, and the books follow as on the host.
TEST(KvTensors, BookkeepingOnlyStoreCopiesSharedBlocksThroughItsCopier) {
  KvStoreConfig c{.num_layers = 1, .num_kv_heads = 1, .head_dim = 4, .block_size = 16, .num_blocks = 8,
                  .prefix_cache = true, .host_tensors = false};
  std::vector<std::pair<int32_t, int32_t>> copies;
  KvStore store(c, [&](int32_t src, int32_t dst) { copies.emplace_back(src, dst); });
  std::vector<int32_t> prompt(40);
  for (int32_t i = 0; i < 40; ++i) prompt[static_cast<size_t>(i)] = 100 + i;
  const SeqId a = store.add_sequence(prompt);
  store.reserve(a, 40);
  store.commit(a, prompt);
  const std::vector<int32_t> table_a(store.block_table(a).begin(), store.block_table(a).end());
  const SeqId b = store.add_sequence(prompt);
  ASSERT_EQ(store.length(b), 32);  // two cached full blocks, shared
  store.truncate(b, 20);          // into the shared second block
  EXPECT_TRUE(copies.empty());
  store.reserve(b, 24);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, table_a[1]);
  EXPECT_EQ(copies[0].second, store.block_table(b)[1]);
  EXPECT_NE(store.block_table(b)[1], table_a[1]);
  EXPECT_EQ(store.block_table(b)[0], table_a[0]);  // the untouched prefix stays shared
  EXPECT_EQ(std::vector<int32_t>(store.block_table(a).begin(), store.block_table(a).end()), table_a);
  store.check_invariants();
}

}  // namespace
}  // namespace specpipe
