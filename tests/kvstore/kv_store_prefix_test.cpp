// KvStore's prefix cache: sharing, what gets hashed, chained keys, eviction, survival
// past release, and copy-on-write of shared or cached blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kv_pattern.h"
#include "kvstore/kv_store.h"

namespace specpipe {
namespace {

using kv_test::positions_hold;
using kv_test::prefix_keys;
using kv_test::table_of;
using kv_test::tokens_from;
using kv_test::write_positions;

KvStore make_store(int32_t num_blocks, int32_t block_size = 16, bool prefix_cache = true) {
  KvStoreConfig config;
  config.num_layers = 2;
  config.num_kv_heads = 1;
  config.head_dim = 4;
  config.block_size = block_size;
  config.num_blocks = num_blocks;
  config.prefix_cache = prefix_cache;
  return KvStore(config);
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Adds `tokens` as a prompt and runs it through: reserve, write the pattern, commit
/// everything (no truncate: the caller decides).
SeqId prefill(KvStore& store, const std::vector<int32_t>& tokens) {
  const SeqId seq = store.add_sequence(tokens);
  const int32_t cached = store.length(seq);
  const auto n = static_cast<int32_t>(tokens.size());
  store.reserve(seq, n);
  const std::vector<uint64_t> keys = prefix_keys(tokens);
  write_positions(store, seq, cached, std::span<const uint64_t>(keys).subspan(cached));
  store.commit(seq, std::span<const int32_t>(tokens).subspan(cached));
  return seq;
}

TEST(KvStorePrefix, SecondSequenceWithTheSamePromptSharesFullBlocks) {
  KvStore store = make_store(8);
  const std::vector<int32_t> prompt = tokens_from(0, 40);
  const SeqId a = prefill(store, prompt);
  EXPECT_EQ(store.prefix_cache().size(), 2u);
  EXPECT_EQ(store.free_blocks(), 5);

  int32_t cached = -1;
  const SeqId b = store.add_sequence(prompt, &cached);
  EXPECT_EQ(cached, 32);
  EXPECT_EQ(store.length(b), 32);
  EXPECT_EQ(store.reserved(b), 32);
  EXPECT_TRUE(std::ranges::equal(store.tokens(b), std::span<const int32_t>(prompt).first(32)));
  const std::vector<int32_t> table_a = table_of(store, a);
  EXPECT_EQ(table_of(store, b), (std::vector<int32_t>{table_a[0], table_a[1]}));
  EXPECT_EQ(store.pool().ref_count(table_a[0]), 2);
  EXPECT_EQ(store.pool().ref_count(table_a[1]), 2);
  EXPECT_EQ(store.pool().ref_count(table_a[2]), 1);
  EXPECT_EQ(store.free_blocks(), 5);  // sharing allocates nothing
  const std::vector<uint64_t> keys = prefix_keys(prompt);
  EXPECT_TRUE(positions_hold(store, b, std::span<const uint64_t>(keys).first(32)));

  // The rest of the prompt goes into a block of b's own.
  EXPECT_EQ(store.blocks_needed(b, 40), 1);
  store.reserve(b, 40);
  EXPECT_NE(store.block_table(b)[2], table_a[2]);
  store.check_invariants();
}

TEST(KvStorePrefix, LeavesAtLeastOnePromptTokenToCompute) {
  KvStore store = make_store(8);
  const std::vector<int32_t> tokens = tokens_from(0, 48);
  prefill(store, tokens);
  ASSERT_EQ(store.prefix_cache().size(), 3u);
  const std::pair<int32_t, int32_t> cases[] = {{48, 32}, {33, 32}, {32, 16}, {17, 16},
                                               {16, 0},  {1, 0},   {0, 0}};
  for (const auto& [prompt_length, expected] : cases) {
    int32_t cached = -1;
    const SeqId seq =
        store.add_sequence(std::span<const int32_t>(tokens).first(prompt_length), &cached);
    EXPECT_EQ(cached, expected) << "prompt of " << prompt_length;
    store.release(seq);
  }
}

TEST(KvStorePrefix, OnlyFullCommittedBlocksAreCached) {
  KvStore store = make_store(8);
  const std::vector<int32_t> tokens = tokens_from(0, 48);
  const std::vector<uint64_t> keys = prefix_keys(tokens);
  const SeqId seq = store.add_sequence(tokens);
  store.reserve(seq, 48);
  write_positions(store, seq, 0, keys);  // all 48 written, none committed yet

  store.commit(seq, std::span<const int32_t>(tokens).first(15));
  EXPECT_EQ(store.prefix_cache().size(), 0u);
  for (int32_t block : store.block_table(seq)) EXPECT_FALSE(store.pool().hash(block));

  store.commit(seq, std::span<const int32_t>(tokens).subspan(15, 1));
  EXPECT_EQ(store.prefix_cache().size(), 1u);
  const std::vector<int32_t> table = table_of(store, seq);
  EXPECT_TRUE(store.pool().hash(table[0]));
  EXPECT_FALSE(store.pool().hash(table[1]));  // written, reserved, not committed
  EXPECT_FALSE(store.pool().hash(table[2]));

  store.commit(seq, std::span<const int32_t>(tokens).subspan(16, 20));  // length 36
  EXPECT_EQ(store.prefix_cache().size(), 2u);
  EXPECT_TRUE(store.pool().hash(table[1]));
  EXPECT_FALSE(store.pool().hash(table[2]));  // partially filled

  // A prompt covering everything that was written still matches only what was committed.
  int32_t cached = -1;
  store.add_sequence(concat(tokens, {99}), &cached);
  EXPECT_EQ(cached, 32);
  store.check_invariants();
}

TEST(KvStorePrefix, ChainedHashDiffersWhenAnEarlierBlockDiffers) {
  KvStore store = make_store(16);
  const std::vector<int32_t> x = tokens_from(0, 16), y = tokens_from(100, 16);
  std::vector<int32_t> x2 = x;
  x2[7] = -5;
  std::vector<int32_t> y2 = y;
  y2[15] = -5;
  const SeqId a = prefill(store, concat(concat(x, y), {1}));

  int32_t cached = -1;
  store.add_sequence(concat(concat(x2, y), {1}), &cached);
  EXPECT_EQ(cached, 0);  // same second block, different history
  store.add_sequence(concat(concat(x, y2), {1}), &cached);
  EXPECT_EQ(cached, 16);
  store.add_sequence(concat(concat(x, y), {2}), &cached);
  EXPECT_EQ(cached, 32);

  const uint64_t root = PrefixCache::kRootHash;
  const uint64_t expected = PrefixCache::chain_hash(PrefixCache::chain_hash(root, x), y);
  EXPECT_EQ(store.pool().hash(store.block_table(a)[1]), expected);
  EXPECT_FALSE(
      store.prefix_cache().contains(PrefixCache::chain_hash(PrefixCache::chain_hash(root, x2), y)));
  EXPECT_FALSE(store.prefix_cache().contains(PrefixCache::chain_hash(root, y)));
}

TEST(KvStorePrefix, DuplicateContentKeepsTheFirstMapping) {
  KvStore store = make_store(16);
  const std::vector<int32_t> prompt = tokens_from(0, 33);
  const SeqId a = store.add_sequence(prompt);
  const SeqId b = store.add_sequence(prompt);  // before a committed anything: no hit
  for (SeqId seq : {a, b}) {
    store.reserve(seq, 33);
    store.commit(seq, prompt);
  }
  EXPECT_EQ(store.prefix_cache().size(), 2u);
  for (int32_t block : store.block_table(b)) {
    EXPECT_FALSE(store.pool().hash(block));
    EXPECT_TRUE(store.pool().writable(block));
  }
  const SeqId c = store.add_sequence(prompt);
  EXPECT_EQ(table_of(store, c),
            (std::vector<int32_t>{store.block_table(a)[0], store.block_table(a)[1]}));
  // b's duplicates are plain blocks: releasing b frees them outright.
  store.release(b);
  EXPECT_EQ(store.pool().num_evictable(), 0);
  store.check_invariants();
}

TEST(KvStorePrefix, CachedBlocksSurviveReleaseAndAreReused) {
  KvStore store = make_store(8);
  const std::vector<int32_t> prompt = tokens_from(0, 40);
  const SeqId a = prefill(store, prompt);
  const std::vector<int32_t> table_a = table_of(store, a);
  store.release(a);
  EXPECT_EQ(store.free_blocks(), 8);
  EXPECT_EQ(store.pool().num_evictable(), 2);
  EXPECT_EQ(store.prefix_cache().size(), 2u);

  int32_t cached = -1;
  const SeqId b = store.add_sequence(prompt, &cached);
  EXPECT_EQ(cached, 32);
  EXPECT_EQ(table_of(store, b), (std::vector<int32_t>{table_a[0], table_a[1]}));
  EXPECT_EQ(store.pool().ref_count(table_a[0]), 1);
  EXPECT_EQ(store.pool().num_evictable(), 0);
  EXPECT_EQ(store.free_blocks(), 6);
  const std::vector<uint64_t> keys = prefix_keys(prompt);
  EXPECT_TRUE(positions_hold(store, b, std::span<const uint64_t>(keys).first(32)));
  store.check_invariants();
}

TEST(KvStorePrefix, EvictsTheLeastRecentlyReleasedBlockWhenTheFreeListIsEmpty) {
  KvStore store = make_store(4, /*block_size=*/4);
  const std::vector<int32_t> first = tokens_from(10, 4), second = tokens_from(20, 4);
  const SeqId a = prefill(store, first);
  const SeqId b = prefill(store, second);
  const int32_t block_a = store.block_table(a)[0], block_b = store.block_table(b)[0];
  store.release(a);  // released first: evicted first
  store.release(b);
  ASSERT_EQ(store.pool().num_evictable(), 2);
  ASSERT_EQ(store.pool().num_free(), 2);

  const SeqId c = store.add_sequence(tokens_from(30, 13));
  store.reserve(c, 8);  // the two free blocks
  EXPECT_EQ(store.prefix_cache().size(), 2u);
  store.reserve(c, 12);  // free list empty: evicts a's block
  EXPECT_EQ(store.block_table(c)[2], block_a);
  EXPECT_EQ(store.prefix_cache().size(), 1u);
  EXPECT_FALSE(store.pool().hash(block_a));
  EXPECT_EQ(store.free_blocks(), 1);

  int32_t cached = -1;
  store.release(store.add_sequence(concat(first, {1}), &cached));
  EXPECT_EQ(cached, 0);
  const SeqId d = store.add_sequence(concat(second, {1}), &cached);
  EXPECT_EQ(cached, 4);
  EXPECT_EQ(store.block_table(d)[0], block_b);
  store.check_invariants();
}

TEST(KvStorePrefix, EvictsTheDeepestBlockOfAReleasedChainFirst) {
  KvStore store = make_store(3, /*block_size=*/4);
  const std::vector<int32_t> prompt = tokens_from(0, 8);
  store.release(prefill(store, prompt));
  const SeqId other = store.add_sequence(tokens_from(50, 9));
  store.reserve(other, 8);  // one free block, then one eviction
  int32_t cached = -1;
  store.add_sequence(concat(prompt, {1}), &cached);
  EXPECT_EQ(cached, 4);  // the chain's root survived
  store.check_invariants();
}

TEST(KvStorePrefix, CopyOnWriteLeavesTheSharedBlockUntouched) {
  KvStore store = make_store(8);
  const std::vector<int32_t> prompt = tokens_from(0, 40);
  const std::vector<uint64_t> keys = prefix_keys(prompt);
  const SeqId a = prefill(store, prompt);
  const SeqId b = store.add_sequence(prompt);
  const std::vector<int32_t> table_a = table_of(store, a);
  ASSERT_EQ(store.block_table(b)[1], table_a[1]);

  store.truncate(b, 20);  // into the shared second block
  EXPECT_EQ(store.pool().ref_count(table_a[1]), 2);
  EXPECT_EQ(store.blocks_needed(b, 24), 1);
  store.reserve(b, 24);
  const int32_t copy = store.block_table(b)[1];
  EXPECT_NE(copy, table_a[1]);
  EXPECT_EQ(store.block_table(b)[0], table_a[0]);  // untouched prefix stays shared
  EXPECT_EQ(store.pool().ref_count(table_a[1]), 1);
  // The copy holds the whole old block, including the stale positions 20..31.
  for (int32_t pos = 16; pos < 32; ++pos) {
    EXPECT_TRUE(kv_test::slot_has(store.tensors(), int64_t{copy} * 16 + pos - 16, keys[pos]));
  }

  // b diverges: new tokens at 20..23.
  const std::vector<int32_t> fork =
      concat(std::vector<int32_t>(prompt.begin(), prompt.begin() + 20), {-1, -2, -3, -4});
  const std::vector<uint64_t> fork_keys = prefix_keys(fork);
  write_positions(store, b, 20, std::span<const uint64_t>(fork_keys).subspan(20));
  store.commit(b, std::span<const int32_t>(fork).subspan(20));
  EXPECT_TRUE(positions_hold(store, a, keys));
  EXPECT_TRUE(positions_hold(store, b, fork_keys));
  store.check_invariants();
}

TEST(KvStorePrefix, CopyOnWriteOfAnUnsharedCachedBlockKeepsTheCacheValid) {
  KvStore store = make_store(8);
  const std::vector<int32_t> prompt = tokens_from(0, 32);
  const std::vector<uint64_t> keys = prefix_keys(prompt);
  const SeqId a = prefill(store, prompt);
  const int32_t cached_block = store.block_table(a)[1];
  store.truncate(a, 20);  // rollback into a full, cached block that only a holds
  EXPECT_EQ(store.free_blocks(), 6);
  EXPECT_EQ(store.blocks_needed(a, 21), 1);
  store.reserve(a, 21);
  EXPECT_NE(store.block_table(a)[1], cached_block);
  EXPECT_EQ(store.pool().ref_count(cached_block), 0);
  EXPECT_EQ(store.pool().num_evictable(), 1);
  EXPECT_EQ(store.free_blocks(), 6);  // one taken, the cached original evictable again

  const std::vector<int32_t> fork =
      concat(std::vector<int32_t>(prompt.begin(), prompt.begin() + 20), {77});
  write_positions(store, a, 20, std::span<const uint64_t>(prefix_keys(fork)).subspan(20));
  store.commit(a, std::vector<int32_t>{77});

  int32_t cached = -1;
  const SeqId b = store.add_sequence(concat(prompt, {5}), &cached);
  EXPECT_EQ(cached, 32);
  EXPECT_EQ(store.block_table(b)[1], cached_block);
  EXPECT_TRUE(positions_hold(store, b, keys));
  store.check_invariants();
}

TEST(KvStorePrefix, CopyOnWriteThatDoesNotFitChangesNothing) {
  KvStore store = make_store(3);
  const std::vector<int32_t> prompt = tokens_from(0, 33);
  const SeqId a = prefill(store, prompt);  // 3 blocks, 2 cached
  const SeqId b = store.add_sequence(prompt);
  store.truncate(b, 8);
  ASSERT_EQ(store.free_blocks(), 0);
  const std::vector<int32_t> table_b = table_of(store, b);
  try {
    store.reserve(b, 9);
    FAIL() << "reserve should not fit";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_capacity);
  }
  EXPECT_EQ(table_of(store, b), table_b);
  EXPECT_EQ(store.pool().ref_count(table_b[0]), 2);
  EXPECT_EQ(store.reserved(b), 8);
  store.release(a);
  store.reserve(b, 9);                               // a's third block is free now
  EXPECT_EQ(store.pool().ref_count(table_b[0]), 0);  // evictable, no longer shared
  store.check_invariants();
}

TEST(KvStorePrefix, DisabledCacheHashesNothing) {
  KvStore store = make_store(8, 16, /*prefix_cache=*/false);
  const std::vector<int32_t> prompt = tokens_from(0, 40);
  const SeqId a = prefill(store, prompt);
  int32_t cached = -1;
  const SeqId b = store.add_sequence(prompt, &cached);
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(store.prefix_cache().size(), 0u);
  store.release(a);
  store.release(b);
  EXPECT_EQ(store.pool().num_free(), 8);
  store.check_invariants();
}

}  // namespace
}  // namespace specpipe
