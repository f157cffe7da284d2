// The CPU's asynchronous write-back (kvstore/async_write_back.h): a block leaving the pool
// is copied to the host tier by the copy stream, later; the store's own writes of pool
// blocks (a block back from the host here) wait for the queued copies first; the
// store's end drains them, and a fence outliving the store still answers.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kv_pattern.h"
#include "kvstore/async_write_back.h"
#include "kvstore/kv_store.h"
#include "manual_copy_stream.h"

namespace specpipe::async_write_back_test {

constexpr int32_t kTokensPerBlock = 4;
const HostTierLayout kLayout{2, 2, 3, kTokensPerBlock};

struct MovedSequence {
  std::shared_ptr<kvtest::ManualStream> stream = std::make_shared<kvtest::ManualStream>();
  std::shared_ptr<WriteBackQueue> queue = std::make_shared<WriteBackQueue>(stream);
  std::unique_ptr<KvStore> store;
  SeqId seq = -1;
  std::vector<uint64_t> keys;

  /// A 4-block pool, an 8-block host tier, one sequence of 2 full committed blocks.
  MovedSequence() {
    KvStoreConfig c;
    c.num_layers = 2;
    c.num_kv_heads = 2;
    c.head_dim = 3;
    c.block_size = kTokensPerBlock;
    c.num_blocks = 4;
    c.prefix_cache = false;
    store = std::make_unique<KvStore>(c);
    auto tier = std::make_unique<HostKvTier>(kLayout, 8 * HostKvTier::block_bytes(kLayout));
    HostTierCopier copier = async_host_copier(queue, store->tensors(), *tier);
    store->attach_host_tier(std::move(tier), std::move(copier));
    const std::vector<int32_t> tokens = kv_test::tokens_from(7, 2 * kTokensPerBlock);
    seq = store->add_sequence({});
    store->reserve(seq, 2 * kTokensPerBlock);
    keys = kv_test::prefix_keys(tokens);
    kv_test::write_positions(*store, seq, 0, keys);
    store->commit(seq, tokens);
  }

  /// Host block `index` of the sequence holds the pattern of its positions.
  bool host_holds(int32_t index) const {
    const HostKvTier& tier = *store->host_tier();
    const int64_t stride = tier.slot_stride();
    const int32_t block = store->host_block_table(seq)[static_cast<size_t>(index)];
    for (int32_t t = 0; t < kTokensPerBlock; ++t)
      for (int32_t layer = 0; layer < 2; ++layer)
        for (int64_t e = 0; e < stride; ++e) {
          const int64_t at = (int64_t{block} * kTokensPerBlock + t) * stride + e;
          const uint64_t key = keys[static_cast<size_t>(index * kTokensPerBlock + t)];
          if (tier.k(layer)[at] != kv_test::pattern_value(key, layer, 0, e) ||
              tier.v(layer)[at] != kv_test::pattern_value(key, layer, 1, e))
            return false;
        }
    return true;
  }
};

TEST(AsyncWriteBack, TheMoveIsCopiedWhenTheFenceIsWaitedOn) {
  MovedSequence s;
  EXPECT_TRUE(s.queue->fence().empty());
  s.store->offload_prefix(s.seq, 1);
  EXPECT_EQ(s.store->free_blocks(), 3);  // released at once
  ASSERT_EQ(s.stream->jobs.size(), 1u);
  EXPECT_EQ(s.stream->ran, 0u);
  EXPECT_FALSE(s.host_holds(0));  // not copied yet: the copy runs beside the compute
  const CopyFence fence = s.queue->fence();
  EXPECT_TRUE(fence.wait());  // a stall: the copy had not run
  EXPECT_TRUE(s.host_holds(0));
  EXPECT_FALSE(fence.wait());
  EXPECT_EQ(s.queue->blocks_queued(), 1);
  s.store->check_invariants();
}

TEST(AsyncWriteBack, AStoreWriteWaitsForTheQueuedCopies) {
  MovedSequence s;
  s.store->offload_prefix(s.seq, 1);
  // A rollback into the moved block brings it back to a pool block, copied on the host
  // by the store: from the host block, so the queued copy must have written it first.
  s.store->truncate(s.seq, 2);
  EXPECT_EQ(s.stream->ran, 1u);
  EXPECT_EQ(s.queue->stalls(), 1);
  EXPECT_TRUE(kv_test::positions_hold(*s.store, s.seq, std::span(s.keys).first(2)));
  s.store->check_invariants();
}

TEST(AsyncWriteBack, TheStoresEndDrainsTheCopiesAndAFenceOutlivesIt) {
  MovedSequence s;
  s.store->offload_prefix(s.seq, 2);
  const CopyFence fence = s.queue->fence();
  s.store.reset();  // its copier drains the queue while the memory is still there
  EXPECT_EQ(s.stream->ran, 2u);
  EXPECT_FALSE(fence.wait());
}

}  // namespace specpipe::async_write_back_test
