// SpecPV view copies of host-tier blocks (KvStore::set_view_copies): each layer's copy
// block holds that layer's K/V of the host block it names, the books hold the blocks
// until the next refresh, a rollback below the host boundary or release; a pool too small
// is one out_of_capacity that leaves no copies; and retrieval summarises host-tier blocks
// from the tier as it would from the pool.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "core/error.h"
#include "kvstore/kv_store.h"
#include "kvstore/retrieval_index.h"

namespace specpipe::view_copies_test {
namespace {

constexpr int32_t kB = 4, kLayers = 2, kHeads = 2, kDim = 3;

float value(int32_t pos, int32_t layer, int32_t which, int64_t e) {
  return static_cast<float>(pos * 1000 + layer * 100 + which * 10) + static_cast<float>(e) * 0.5f;
}

struct ViewCopies : ::testing::Test {
  KvStore kv{[] {
    KvStoreConfig c;
    c.num_layers = kLayers;
    c.num_kv_heads = kHeads;
    c.head_dim = kDim;
    c.block_size = kB;
    c.num_blocks = 8;
    c.prefix_cache = false;
    return c;
  }()};
  SeqId seq = -1;

  ViewCopies() {
    const HostTierLayout l{kLayers, kHeads, kDim, kB};
    kv.attach_host_tier(std::make_unique<HostKvTier>(l, 8 * HostKvTier::block_bytes(l)));
    const std::vector<int32_t> prompt(16, 3);
    seq = kv.add_sequence(prompt);
    kv.reserve(seq, 16);
    KvTensors& t = kv.tensors();
    for (int32_t pos = 0; pos < 16; ++pos)
      for (int32_t layer = 0; layer < kLayers; ++layer)
        for (int64_t e = 0; e < t.slot_stride(); ++e) {
          t.k(layer)[kv.slot(seq, pos) * t.slot_stride() + e] = value(pos, layer, 0, e);
          t.v(layer)[kv.slot(seq, pos) * t.slot_stride() + e] = value(pos, layer, 1, e);
        }
    kv.commit(seq, prompt);
  }
  /// Layer `layer` of pool block `block` holds the K/V of positions [first, first + kB).
  ::testing::AssertionResult holds(int32_t block, int32_t layer, int32_t first) const {
    const KvTensors& t = kv.tensors();
    for (int32_t i = 0; i < kB; ++i)
      for (int64_t e = 0; e < t.slot_stride(); ++e) {
        const int64_t at = (int64_t{block} * kB + i) * t.slot_stride() + e;
        if (t.k(layer)[at] != value(first + i, layer, 0, e) || t.v(layer)[at] != value(first + i, layer, 1, e))
          return ::testing::AssertionFailure() << "block " << block << " layer " << layer << " row " << i;
      }
    return ::testing::AssertionSuccess();
  }
};

TEST_F(ViewCopies, EachLayerCopiesItsOwnHostBlocksIntoSharedCopyBlocks) {
  kv.offload_prefix(seq, 3);  // blocks 0-2 on the host, 3 in the pool
  const int32_t free_before = kv.free_blocks();
  const std::vector<std::vector<int32_t>> idx = {{0, 2}, {1}};
  EXPECT_EQ(kv.set_view_copies(seq, idx), 3 * 2 * int64_t{kB} * kHeads * kDim * 4);
  EXPECT_EQ(kv.view_copy_blocks(seq), 2);  // max over layers, not their union
  EXPECT_EQ(kv.free_blocks(), free_before - 2);
  const int32_t c00 = kv.view_copy(seq, 0, 0), c02 = kv.view_copy(seq, 0, 2), c11 = kv.view_copy(seq, 1, 1);
  EXPECT_EQ(kv.view_copy(seq, 1, 0), -1);
  EXPECT_EQ(kv.view_copy(seq, 0, 1), -1);
  EXPECT_EQ(c11, c00);  // layer 1's first copy shares layer 0's first copy block
  EXPECT_TRUE(holds(c00, 0, 0));
  EXPECT_TRUE(holds(c02, 0, 8));
  EXPECT_TRUE(holds(c11, 1, 4));
  kv.check_invariants();
  // A refresh replaces them; a rollback below the host boundary drops them.
  kv.set_view_copies(seq, std::vector<std::vector<int32_t>>{{1}, {}});
  EXPECT_EQ(kv.view_copy_blocks(seq), 1);
  EXPECT_TRUE(holds(kv.view_copy(seq, 0, 1), 0, 4));
  kv.truncate(seq, 10);
  EXPECT_EQ(kv.view_copy_blocks(seq), 0);
  kv.check_invariants();
  kv.release(seq);
  EXPECT_EQ(kv.free_blocks(), kv.total_blocks());
}

TEST_F(ViewCopies, NoRoomIsOneErrorAndNoCopiesBadIndicesChangeNothing) {
  kv.offload_prefix(seq, 3);
  kv.set_view_copies(seq, std::vector<std::vector<int32_t>>{{0}, {0}});
  EXPECT_THROW(kv.set_view_copies(seq, std::vector<std::vector<int32_t>>{{3}, {}}), Error);  // block 3 is in the pool
  EXPECT_EQ(kv.view_copy_blocks(seq), 1);
  EXPECT_FALSE(kv.view_copies_refused(seq));
  const SeqId other = kv.add_sequence(std::vector<int32_t>{1});
  kv.reserve(other, kv.free_blocks() * kB);  // every free block: the old copy's comes back, one short
  try {
    kv.set_view_copies(seq, std::vector<std::vector<int32_t>>{{0, 1}, {2}});
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_capacity) << e.what();
  }
  EXPECT_TRUE(kv.view_copies_refused(seq));
  EXPECT_EQ(kv.view_copy_blocks(seq), 0);
  kv.check_invariants();
}

TEST_F(ViewCopies, RetrievalSummarisesHostBlocksFromTheTierAsFromThePool) {
  const SummaryShape shape{kLayers, kHeads, kDim, kB};
  RetrievalIndex pool(shape), host(shape);
  pool.update(kv, seq, 16);
  kv.offload_prefix(seq, 3);
  host.update(kv, seq, 16);
  EXPECT_EQ(host.summarised_blocks(seq), 4);
  std::mt19937 rng(5);
  std::normal_distribution<float> n;
  std::vector<float> q(2 * kHeads * kDim);
  for (int round = 0; round < 8; ++round) {
    for (float& x : q) x = n(rng);
    for (int32_t l = 0; l < kLayers; ++l) {
      pool.select(seq, l, q.data(), 2, kHeads * kDim, kHeads, 2, 0, 4);
      host.select(seq, l, q.data(), 2, kHeads * kDim, kHeads, 2, 0, 4);
      EXPECT_EQ(std::vector<int32_t>(pool.retrieved(seq, l).begin(), pool.retrieved(seq, l).end()),
                std::vector<int32_t>(host.retrieved(seq, l).begin(), host.retrieved(seq, l).end()));
    }
  }
}

}  // namespace
}  // namespace specpipe::view_copies_test
