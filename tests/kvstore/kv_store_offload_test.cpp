// KvStore with a host tier: offload_prefix moves the oldest full committed blocks to the
// host (data and books), truncate below the host boundary, release, the prefix cache,
// the invariants and the error cases.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv_pattern.h"
#include "kvstore/kv_store.h"
#include "kvstore/offload_policy.h"

namespace specpipe::offload_test {

using kv_test::pattern_value;
using kv_test::prefix_keys;
using kv_test::tokens_from;
using kv_test::write_positions;

constexpr int32_t kBlock = 4;

KvStoreConfig config_with(int32_t num_blocks, bool prefix_cache = true) {
  KvStoreConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 3;
  c.block_size = kBlock;
  c.num_blocks = num_blocks;
  c.prefix_cache = prefix_cache;
  return c;
}

KvStore store_with(int32_t pool_blocks, int32_t host_blocks, bool prefix_cache = true) {
  KvStore store(config_with(pool_blocks, prefix_cache));
  const HostTierLayout l{2, 2, 3, kBlock};
  store.attach_host_tier(std::make_unique<HostKvTier>(l, host_blocks * HostKvTier::block_bytes(l)));
  return store;
}

/// Where position `pos` of `seq` lives, on the host or in the pool, holds key's pattern.
::testing::AssertionResult holds(const KvStore& store, SeqId seq, const std::vector<uint64_t>& keys) {
  const int64_t stride = store.tensors().slot_stride();
  const int32_t host_end = store.host_blocks(seq) * kBlock;
  for (int32_t pos = 0; pos < static_cast<int32_t>(keys.size()); ++pos)
    for (int32_t layer = 0; layer < 2; ++layer) {
      const float *k, *v;
      int64_t slot;
      if (pos < host_end) {
        slot = int64_t{store.host_block_table(seq)[static_cast<size_t>(pos / kBlock)]} * kBlock + pos % kBlock;
        k = store.host_tier()->k(layer);
        v = store.host_tier()->v(layer);
      } else {
        slot = store.slot(seq, pos);
        k = store.tensors().k(layer);
        v = store.tensors().v(layer);
      }
      for (int64_t e = 0; e < stride; ++e)
        if (k[slot * stride + e] != pattern_value(keys[static_cast<size_t>(pos)], layer, 0, e) ||
            v[slot * stride + e] != pattern_value(keys[static_cast<size_t>(pos)], layer, 1, e))
          return ::testing::AssertionFailure() << "position " << pos << " layer " << layer << " (host end "
                                               << host_end << ")";
    }
  return ::testing::AssertionSuccess();
}

/// A sequence of `n` committed tokens with their patterns written.
SeqId committed(KvStore& store, const std::vector<int32_t>& tokens) {
  const SeqId seq = store.add_sequence({});
  store.reserve(seq, static_cast<int32_t>(tokens.size()));
  write_positions(store, seq, 0, prefix_keys(tokens));
  store.commit(seq, tokens);
  return seq;
}

TEST(KvStoreOffload, MovesTheOldestFullBlocksWithTheirData) {
  for (bool cache : {false, true}) {
    KvStore store = store_with(8, 8, cache);
    const auto tokens = tokens_from(100, 18);  // 4 full blocks and 2 tokens
    const SeqId seq = committed(store, tokens);
    EXPECT_EQ(store.offloadable_blocks(seq), 4);
    EXPECT_EQ(store.free_blocks(), 3);
    EXPECT_EQ(store.blocks_freed_by_offload(seq, 3), 3);
    EXPECT_EQ(store.offload_prefix(seq, 3), 3 * HostKvTier::block_bytes({2, 2, 3, kBlock}));
    store.check_invariants();
    EXPECT_EQ(store.host_blocks(seq), 3);
    EXPECT_EQ(store.offloadable_blocks(seq), 1);
    EXPECT_EQ(store.free_blocks(), 6);  // cached ones count as evictable
    EXPECT_EQ(store.block_table(seq)[0], KvStore::kOnHost);
    EXPECT_EQ(store.block_table(seq)[2], KvStore::kOnHost);
    EXPECT_NE(store.block_table(seq)[3], KvStore::kOnHost);
    EXPECT_TRUE(holds(store, seq, prefix_keys(tokens)));
    EXPECT_THROW(store.slot(seq, 11), Error);  // on the host
    EXPECT_EQ(store.slot(seq, 12) / kBlock, store.block_table(seq)[3]);
    EXPECT_EQ(store.offload_stats().blocks_to_host, 3);

    // It keeps growing in the pool; later blocks go to the host after the first three.
    store.reserve(seq, 26);
    auto more = tokens_from(200, 8);
    auto all = tokens;
    all.insert(all.end(), more.begin(), more.end());
    const auto all_keys = prefix_keys(all);
    write_positions(store, seq, 18, std::span(all_keys).subspan(18));
    store.commit(seq, more);
    store.offload_prefix(seq, 2);
    store.check_invariants();
    EXPECT_EQ(store.host_blocks(seq), 5);
    EXPECT_TRUE(holds(store, seq, prefix_keys(all)));
    store.release(seq);
    store.check_invariants();
    EXPECT_EQ(store.free_blocks(), store.total_blocks());
    EXPECT_EQ(store.host_tier()->free_blocks(), 8);
  }
}

TEST(KvStoreOffload, TruncateBelowTheHostBoundaryBringsThePartialBlockBack) {
  KvStore store = store_with(8, 8);
  const auto tokens = tokens_from(7, 20);
  const auto keys = prefix_keys(tokens);
  for (int32_t to : {0, 3, 4, 9, 12, 13}) {
    const SeqId seq = committed(store, tokens);
    store.offload_prefix(seq, 4);  // positions [0, 16) on the host
    store.truncate(seq, to);
    store.check_invariants();
    EXPECT_EQ(store.length(seq), to);
    EXPECT_EQ(store.host_blocks(seq), to / kBlock) << to;
    EXPECT_TRUE(holds(store, seq, std::vector<uint64_t>(keys.begin(), keys.begin() + to))) << to;
    // Writable again from `to` on, and the rest recomputed gives the same store.
    store.reserve(seq, 20);
    store.check_invariants();
    write_positions(store, seq, to, std::span(keys).subspan(static_cast<size_t>(to)));
    store.commit(seq, std::span(tokens).subspan(static_cast<size_t>(to)));
    EXPECT_TRUE(holds(store, seq, keys)) << to;
    store.release(seq);
    store.check_invariants();
    EXPECT_EQ(store.host_tier()->free_blocks(), 8);
  }
  EXPECT_GT(store.offload_stats().blocks_to_pool, 0);
}

TEST(KvStoreOffload, TruncateThatNeedsAPoolBlockWhenNoneIsFreeChangesNothing) {
  KvStore store = store_with(5, 8, /*prefix_cache=*/false);
  const SeqId seq = committed(store, tokens_from(1, 20));  // 5 blocks: the pool is full
  store.offload_prefix(seq, 4);
  const SeqId other = committed(store, tokens_from(50, 16));  // takes the 4 freed blocks
  EXPECT_EQ(store.free_blocks(), 0);
  try {
    store.truncate(seq, 6);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_capacity);
  }
  store.check_invariants();
  EXPECT_EQ(store.length(seq), 20);
  EXPECT_EQ(store.host_blocks(seq), 4);
  store.truncate(seq, 8);  // on a block boundary: no pool block needed
  store.check_invariants();
  store.release(seq);
  store.release(other);
  store.check_invariants();
}

TEST(KvStoreOffload, ErrorsChangeNothing) {
  KvStore plain(config_with(8));
  const SeqId p = committed(plain, tokens_from(1, 8));
  EXPECT_THROW(plain.offload_prefix(p, 1), Error);  // no host tier

  KvStore store = store_with(8, 2);
  const SeqId seq = committed(store, tokens_from(1, 14));
  try {
    store.offload_prefix(seq, 4);  // 3 full blocks only
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
  try {
    store.offload_prefix(seq, 3);  // the host holds 2
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_capacity);
    EXPECT_NE(std::string(e.what()).find("host tier"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.host_blocks(seq), 0);
  store.check_invariants();

  // A layout that differs, or live sequences, refuse a tier.
  KvStore fresh(config_with(8));
  EXPECT_THROW(fresh.attach_host_tier(std::make_unique<HostKvTier>(HostTierLayout{2, 2, 3, 8}, 1 << 16)), Error);
  EXPECT_THROW(store.attach_host_tier(std::make_unique<HostKvTier>(HostTierLayout{2, 2, 3, kBlock}, 1 << 16)),
               Error);
}

// An offloaded block that was cached stays in the prefix cache as an evictable pool
// block: a new request with the same prefix reuses it, and the K/V there are intact.
TEST(KvStoreOffload, OffloadedCachedBlocksStayReusableInThePool) {
  KvStore store = store_with(8, 8);
  const auto tokens = tokens_from(30, 13);
  const SeqId seq = committed(store, tokens);
  store.offload_prefix(seq, 3);
  store.check_invariants();
  int32_t cached = 0;
  const SeqId again = store.add_sequence(tokens, &cached);
  EXPECT_EQ(cached, 12);
  EXPECT_EQ(store.host_blocks(again), 0);
  const auto keys = prefix_keys(tokens);
  EXPECT_TRUE(holds(store, again, std::vector<uint64_t>(keys.begin(), keys.begin() + 12)));
  store.check_invariants();
  store.release(again);
  store.release(seq);
  store.check_invariants();
  EXPECT_EQ(store.occupancy().host_free_blocks, 8);
  EXPECT_EQ(store.occupancy().host_total_blocks, 8);
}

// Random operations with the host tier in play: add (prefix-cache hits), reserve + write
// + commit a window (offloading first when the pool cannot serve it, as the KV-router
// does), rollback truncates (below the host boundary too), offload, release. After each
// one the invariants hold and every committed position, on the host or in the pool,
// reads back its K/V; at the end both tiers are empty.
TEST(KvStoreOffload, RandomOperationsKeepEveryPositionAndTheInvariants) {
  for (const uint64_t seed : {1u, 2u, 3u, 4u}) {
    for (const bool cache : {true, false}) {
      std::mt19937_64 rng(seed);
      auto below = [&](int32_t n) { return static_cast<int32_t>(rng() % static_cast<uint64_t>(n)); };
      KvStore store = store_with(12, 24, cache);
      std::map<SeqId, std::vector<int32_t>> model;  // committed tokens
      const std::vector<int32_t> stem = tokens_from(500, 40);
      int offloads = 0, host_rollbacks = 0, refusals = 0;
      for (int op = 0; op < 1500; ++op) {
        const int32_t kind = below(10);
        if (model.empty() || (kind == 0 && model.size() < 4)) {
          std::vector<int32_t> prompt(stem.begin(), stem.begin() + 1 + below(40));
          const SeqId seq = store.add_sequence(prompt);
          model[seq].assign(prompt.begin(), prompt.begin() + store.length(seq));
          continue;
        }
        auto it = model.begin();
        std::advance(it, below(static_cast<int32_t>(model.size())));
        const SeqId seq = it->first;
        std::vector<int32_t>& tokens = it->second;
        const auto length = static_cast<int32_t>(tokens.size());
        if (kind <= 5) {  // a window of up to 6 tokens, some of it accepted
          const int32_t n = 1 + below(6);
          try {
            make_pool_room(store, store.blocks_needed(seq, length + n));
            store.reserve(seq, length + n);
          } catch (const Error& e) {
            ASSERT_EQ(e.code(), ErrorCode::out_of_capacity) << e.what();
            ++refusals;
            continue;
          }
          std::vector<int32_t> window;
          for (int32_t i = 0; i < n; ++i) window.push_back(below(3));
          std::vector<int32_t> all = tokens;
          all.insert(all.end(), window.begin(), window.end());
          const auto keys = prefix_keys(all);
          write_positions(store, seq, length, std::span(keys).subspan(static_cast<size_t>(length)));
          const int32_t accepted = below(n + 1);
          store.commit(seq, std::span(window).first(static_cast<size_t>(accepted)));
          tokens.insert(tokens.end(), window.begin(), window.begin() + accepted);
          store.truncate(seq, store.length(seq));
        } else if (kind == 6) {  // rollback, below the host boundary too
          const int32_t to = below(length + 1);
          const bool below_host = to < store.host_blocks(seq) * kBlock;
          try {
            store.truncate(seq, to);
          } catch (const Error& e) {
            ASSERT_EQ(e.code(), ErrorCode::out_of_capacity) << e.what();
            ++refusals;
            continue;
          }
          host_rollbacks += below_host ? 1 : 0;
          tokens.resize(static_cast<size_t>(to));
        } else if (kind <= 8) {
          const int32_t n = std::min(store.offloadable_blocks(seq), store.host_tier()->free_blocks());
          if (n > 0) {
            store.offload_prefix(seq, 1 + below(n));
            ++offloads;
          }
        } else {
          store.release(seq);
          model.erase(it);
          store.check_invariants();
          continue;
        }
        store.check_invariants();
        ASSERT_TRUE(std::ranges::equal(store.tokens(seq), tokens));
        ASSERT_TRUE(holds(store, seq, prefix_keys(tokens))) << "seed " << seed << " op " << op;
      }
      EXPECT_GT(offloads, 20);
      EXPECT_GT(host_rollbacks, 5);
      for (const auto& entry : model) store.release(entry.first);
      store.check_invariants();
      EXPECT_EQ(store.free_blocks(), store.total_blocks());
      EXPECT_EQ(store.host_tier()->free_blocks(), store.host_tier()->total_blocks());
      ::testing::Test::RecordProperty("refusals", refusals);
    }
  }
}

// Layer-wise prefill's books (issue 16 item 5): book_host_prefix puts a new sequence's first
// blocks straight on the host tier, committed, with the chain hashes a commit would give;
// the pool holds the tail; errors change nothing.
TEST(KvStoreOffload, BookHostPrefixPutsTheFirstBlocksOnTheHostAndTheTailInThePool) {
  for (bool cache : {false, true}) {
    KvStore store = store_with(4, 8, cache);
    const auto prompt = tokens_from(50, 30);  // 7 full blocks and 2 tokens: 5 on the host
    const SeqId seq = store.add_sequence({});
    EXPECT_EQ(store.book_host_prefix(seq, std::span(prompt).first(20)),
              5 * HostKvTier::block_bytes({2, 2, 3, kBlock}));
    store.check_invariants();  // incl. the chain hashes, recomputed from the tokens
    EXPECT_EQ(store.length(seq), 20);
    EXPECT_EQ(store.host_blocks(seq), 5);
    EXPECT_EQ(store.host_tier()->free_blocks(), 3);
    EXPECT_EQ(store.offload_stats().blocks_to_host, 5);
    EXPECT_EQ(store.free_blocks(), 4);  // nothing from the pool
    // The prefill reserves the tail, writes every position, commits the tail.
    store.reserve(seq, 30);
    EXPECT_EQ(store.free_blocks(), 1);
    store.commit(seq, std::span(prompt).subspan(20));
    store.check_invariants();
    EXPECT_EQ(store.length(seq), 30);
    EXPECT_EQ(store.block_table(seq)[4], KvStore::kOnHost);
    EXPECT_NE(store.block_table(seq)[5], KvStore::kOnHost);
    // The pool's full block after the host prefix is cached under the prompt's chain: a
    // second sequence of the same prompt finds nothing (its first block is on the host).
    int32_t cached = -1;
    const SeqId again = store.add_sequence(prompt, &cached);
    EXPECT_EQ(cached, 0);
    store.release(again);
    store.release(seq);
    store.check_invariants();
    EXPECT_EQ(store.host_tier()->free_blocks(), 8);
    EXPECT_EQ(store.free_blocks(), 4);
  }
}

TEST(KvStoreOffload, BookHostPrefixErrorsChangeNothing) {
  KvStore store = store_with(4, 2);
  const auto prompt = tokens_from(1, 12);
  const SeqId seq = store.add_sequence({});
  const auto refused = [&](std::span<const int32_t> tokens, ErrorCode code) {
    try {
      store.book_host_prefix(seq, tokens);
      return false;
    } catch (const Error& e) {
      store.check_invariants();
      return e.code() == code && store.length(seq) == 0 && store.host_tier()->free_blocks() == 2;
    }
  };
  EXPECT_TRUE(refused(std::span(prompt).first(6), ErrorCode::invalid_argument));  // a partial block
  EXPECT_TRUE(refused(std::span(prompt).first(12), ErrorCode::out_of_capacity));  // 3 blocks, 2 free
  store.reserve(seq, 1);
  EXPECT_TRUE(refused(std::span(prompt).first(4), ErrorCode::invalid_argument));  // not empty any more
  KvStore plain(store.config());  // no host tier
  const SeqId p = plain.add_sequence({});
  EXPECT_THROW(plain.book_host_prefix(p, std::span(prompt).first(4)), Error);
  EXPECT_EQ(store.book_host_prefix(store.add_sequence({}), std::span(prompt).first(8)),
            2 * HostKvTier::block_bytes({2, 2, 3, kBlock}));
  store.check_invariants();
}

}  // namespace specpipe::offload_test
