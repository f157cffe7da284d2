// KvStore without the prefix cache in play: configuration, slots, reserve / commit /
// truncate / release accounting, capacity errors, block size 1.
#include "kvstore/kv_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv_pattern.h"

namespace specpipe {
namespace {

using kv_test::positions_hold;
using kv_test::prefix_keys;
using kv_test::table_of;
using kv_test::tokens_from;
using kv_test::write_positions;

KvStoreConfig config_with(int32_t num_blocks, int32_t block_size = 16, bool prefix_cache = true) {
  KvStoreConfig config;
  config.num_layers = 2;
  config.num_kv_heads = 2;
  config.head_dim = 3;
  config.block_size = block_size;
  config.num_blocks = num_blocks;
  config.prefix_cache = prefix_cache;
  return config;
}

Error error_of(auto&& call) {
  try {
    call();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "no specpipe::Error thrown";
  return Error(ErrorCode::internal, "none");
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(KvStore, ConfigIsValidated) {
  for (auto field :
       {&KvStoreConfig::num_layers, &KvStoreConfig::num_kv_heads, &KvStoreConfig::head_dim,
        &KvStoreConfig::block_size, &KvStoreConfig::num_blocks}) {
    KvStoreConfig config = config_with(4);
    config.*field = 0;
    const Error error = error_of([&] { KvStore store(config); });
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_TRUE(contains(error.what(), "must be >= 1")) << error.what();
  }
  KvStore store(config_with(4));
  EXPECT_EQ(store.total_blocks(), 4);
  EXPECT_EQ(store.free_blocks(), 4);
  EXPECT_EQ(store.capacity_tokens(), 64);
  EXPECT_EQ(store.tensors().slot_stride(), 6);
}

TEST(KvStore, SlotMapsPositionsThroughTheBlockTable) {
  KvStore store(config_with(8));
  const SeqId a = store.add_sequence(tokens_from(0, 4));
  const SeqId b = store.add_sequence(tokens_from(100, 4));
  store.reserve(a, 16);  // block 0
  store.reserve(b, 48);  // blocks 1, 2, 3
  store.release(a);      // block 0 goes back to the free list
  const SeqId c = store.add_sequence(tokens_from(200, 4));
  store.reserve(c, 40);
  ASSERT_EQ(table_of(store, c), (std::vector<int32_t>{0, 4, 5}));
  EXPECT_EQ(store.slot(c, 0), 0);
  EXPECT_EQ(store.slot(c, 15), 15);
  EXPECT_EQ(store.slot(c, 16), 4 * 16);
  EXPECT_EQ(store.slot(c, 39), 5 * 16 + 7);
  std::set<int64_t> slots;
  for (SeqId seq : {b, c}) {
    const std::vector<int32_t> table = table_of(store, seq);
    for (int32_t pos = 0; pos < store.reserved(seq); ++pos) {
      const int64_t slot = store.slot(seq, pos);
      EXPECT_EQ(slot, int64_t{table[pos / 16]} * 16 + pos % 16);
      EXPECT_TRUE(slots.insert(slot).second) << "slot " << slot << " handed out twice";
    }
  }
  EXPECT_EQ(error_of([&] { store.slot(c, 40); }).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of([&] { store.slot(c, -1); }).code(), ErrorCode::invalid_argument);
}

TEST(KvStore, ReserveCommitTruncateCountBlocksExactly) {
  KvStore store(config_with(8));
  const SeqId seq = store.add_sequence(tokens_from(0, 30));
  EXPECT_EQ(store.length(seq), 0);
  EXPECT_EQ(store.reserved(seq), 0);
  EXPECT_EQ(store.free_blocks(), 8);  // add_sequence reserves nothing

  EXPECT_EQ(store.blocks_needed(seq, 17), 2);
  store.reserve(seq, 17);
  EXPECT_EQ(store.free_blocks(), 6);
  EXPECT_EQ(store.reserved(seq), 17);
  EXPECT_EQ(store.length(seq), 0);
  store.reserve(seq, 10);  // never shrinks
  store.reserve(seq, 32);  // inside the blocks already held
  EXPECT_EQ(store.reserved(seq), 32);
  EXPECT_EQ(store.free_blocks(), 6);
  EXPECT_EQ(store.blocks_needed(seq, 32), 0);
  EXPECT_EQ(store.blocks_needed(seq, 33), 1);

  store.commit(seq, tokens_from(0, 5));
  EXPECT_EQ(store.length(seq), 5);
  EXPECT_EQ(store.free_blocks(), 6);  // commit allocates nothing
  store.truncate(seq, 5);             // drop the reserved tail
  EXPECT_EQ(store.reserved(seq), 5);
  EXPECT_EQ(store.block_table(seq).size(), 1u);
  EXPECT_EQ(store.free_blocks(), 7);
  EXPECT_EQ(store.blocks_needed(seq, 16), 0);
  EXPECT_EQ(store.blocks_needed(seq, 17), 1);
  EXPECT_EQ(store.blocks_needed(seq, 5 + 16 * 3), 3);
}

TEST(KvStore, PlainDecodingTakesOneBlockPerBlockSizeTokens) {
  KvStore store(config_with(8));
  const SeqId seq = store.add_sequence(tokens_from(0, 1));
  for (int32_t step = 0; step < 100; ++step) {
    const int32_t length = store.length(seq);
    store.reserve(seq, length + 1);
    store.commit(seq, std::vector<int32_t>{step});
    const int32_t blocks = (store.length(seq) + 15) / 16;
    ASSERT_EQ(store.free_blocks(), 8 - blocks) << "after " << store.length(seq) << " tokens";
  }
  EXPECT_TRUE(std::ranges::equal(store.tokens(seq), tokens_from(0, 100)));
}

TEST(KvStore, SpeculativeRoundsAndChunkedPrefillReleaseWhatIsNotCommitted) {
  KvStore store(config_with(16));
  const std::vector<int32_t> prompt = tokens_from(0, 50);
  const SeqId seq = store.add_sequence(prompt);
  // Chunked prefill, 20 tokens at a time.
  for (int32_t done = 0; done < 50; done += 20) {
    const int32_t chunk = std::min(20, 50 - done);
    store.reserve(seq, done + chunk);
    store.commit(seq, std::span<const int32_t>(prompt).subspan(done, chunk));
    store.truncate(seq, store.length(seq));
    EXPECT_EQ(store.free_blocks(), 16 - (done + chunk + 15) / 16);
  }
  // Window [pending, d1..d5] at positions 50..55: 4 blocks held; one draft accepted.
  store.reserve(seq, 56);
  EXPECT_EQ(store.free_blocks(), 12);
  store.commit(seq, std::vector<int32_t>{7, 8});
  store.truncate(seq, store.length(seq));
  EXPECT_EQ(store.length(seq), 52);
  EXPECT_EQ(store.free_blocks(), 12);
  // A window that crosses into a fifth block, nothing accepted but the pending token.
  store.reserve(seq, 52 + 14);
  EXPECT_EQ(store.free_blocks(), 11);
  store.commit(seq, std::vector<int32_t>{9});
  store.truncate(seq, store.length(seq));
  EXPECT_EQ(store.free_blocks(), 12);
  EXPECT_EQ(store.reserved(seq), 53);
}

TEST(KvStore, TruncateToZeroKeepsTheFirstBlock) {
  KvStore store(config_with(8));
  const SeqId seq = store.add_sequence(tokens_from(0, 41));
  store.reserve(seq, 40);
  store.commit(seq, tokens_from(0, 40));
  const int32_t first_block = store.block_table(seq)[0];
  store.truncate(seq, 0);
  EXPECT_EQ(store.length(seq), 0);
  EXPECT_EQ(store.reserved(seq), 0);
  EXPECT_TRUE(store.tokens(seq).empty());
  EXPECT_EQ(table_of(store, seq), (std::vector<int32_t>{first_block}));
  EXPECT_EQ(store.free_blocks(), 7);
  EXPECT_EQ(error_of([&] { store.slot(seq, 0); }).code(), ErrorCode::invalid_argument);
  // The kept block was full and committed, so it is cached: writing it again needs a copy.
  EXPECT_EQ(store.blocks_needed(seq, 16), 1);
  store.reserve(seq, 16);
  EXPECT_NE(store.block_table(seq)[0], first_block);
  EXPECT_EQ(store.free_blocks(), 7);  // the cached original is evictable, so still free

  // A sequence that never held a block keeps none.
  const SeqId empty = store.add_sequence(tokens_from(500, 3));
  store.truncate(empty, 0);
  EXPECT_TRUE(store.block_table(empty).empty());
}

TEST(KvStore, TruncateToZeroReusesAPrivateFirstBlock) {
  KvStore store(config_with(8, 16, /*prefix_cache=*/false));
  const SeqId seq = store.add_sequence(tokens_from(0, 41));
  store.reserve(seq, 40);
  store.commit(seq, tokens_from(0, 40));
  const int32_t first_block = store.block_table(seq)[0];
  store.truncate(seq, 0);
  EXPECT_EQ(store.free_blocks(), 7);
  EXPECT_EQ(store.blocks_needed(seq, 16), 0);
  store.reserve(seq, 16);
  EXPECT_EQ(table_of(store, seq), (std::vector<int32_t>{first_block}));
  EXPECT_EQ(store.free_blocks(), 7);
  EXPECT_EQ(store.blocks_needed(seq, 17), 1);
}

TEST(KvStore, TruncateMidBlockKeepsThePrefixAndItsData) {
  KvStore store(config_with(8));
  const std::vector<int32_t> tokens = tokens_from(0, 40);
  const std::vector<uint64_t> keys = prefix_keys(tokens);
  const SeqId seq = store.add_sequence(tokens);
  store.reserve(seq, 40);
  write_positions(store, seq, 0, keys);
  store.commit(seq, tokens);
  const std::vector<int32_t> table = table_of(store, seq);
  ASSERT_EQ(table.size(), 3u);

  store.truncate(seq, 20);
  EXPECT_EQ(store.length(seq), 20);
  EXPECT_EQ(store.reserved(seq), 20);
  EXPECT_TRUE(std::ranges::equal(store.tokens(seq), std::span<const int32_t>(tokens).first(20)));
  EXPECT_EQ(table_of(store, seq), (std::vector<int32_t>{table[0], table[1]}));
  EXPECT_EQ(store.free_blocks(), 6);
  EXPECT_TRUE(positions_hold(store, seq, std::span<const uint64_t>(keys).first(20)));

  store.truncate(seq, 16);  // exactly at a block boundary
  EXPECT_EQ(table_of(store, seq), (std::vector<int32_t>{table[0]}));
  EXPECT_EQ(store.free_blocks(), 7);
  EXPECT_TRUE(positions_hold(store, seq, std::span<const uint64_t>(keys).first(16)));
}

TEST(KvStore, LengthsOutsideTheContractAreRejectedWithoutChange) {
  KvStore store(config_with(8));
  const SeqId seq = store.add_sequence(tokens_from(0, 10));
  store.reserve(seq, 10);
  store.commit(seq, tokens_from(0, 6));

  Error error = error_of([&] { store.commit(seq, tokens_from(0, 5)); });
  EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(contains(error.what(), "sequence " + std::to_string(seq))) << error.what();
  EXPECT_EQ(error_of([&] { store.truncate(seq, 7); }).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of([&] { store.truncate(seq, -1); }).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of([&] { store.reserve(seq, -1); }).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(store.length(seq), 6);
  EXPECT_EQ(store.reserved(seq), 10);
  EXPECT_EQ(store.free_blocks(), 7);
  store.check_invariants();
}

TEST(KvStore, IdsAreNeverReusedAndUnknownIdsAreNamed) {
  KvStore store(config_with(4));
  const SeqId a = store.add_sequence(tokens_from(0, 3));
  const SeqId b = store.add_sequence(tokens_from(0, 3));
  EXPECT_EQ(b, a + 1);
  store.release(a);
  const SeqId c = store.add_sequence(tokens_from(0, 3));
  EXPECT_EQ(c, b + 1);
  EXPECT_FALSE(store.contains(a));
  EXPECT_TRUE(store.contains(b));
  EXPECT_EQ(store.num_sequences(), 2u);

  for (SeqId bad : {a, SeqId{999}, SeqId{-1}}) {
    const Error error = error_of([&] { store.length(bad); });
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_TRUE(contains(error.what(), "sequence " + std::to_string(bad))) << error.what();
  }
  EXPECT_EQ(error_of([&] { store.release(a); }).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of([&] { store.reserve(a, 1); }).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of([&] { store.commit(a, {}); }).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of([&] { store.truncate(a, 0); }).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(error_of([&] { store.block_table(a); }).code(), ErrorCode::invalid_argument);
}

TEST(KvStore, ReleaseReturnsEveryBlockCachedOnesCountingAsFree) {
  KvStore store(config_with(16));
  std::vector<SeqId> seqs;
  for (int32_t i = 0; i < 4; ++i) {
    const std::vector<int32_t> prompt = tokens_from(i < 2 ? 0 : 1000 * i, 37);
    const SeqId seq = store.add_sequence(prompt);
    store.reserve(seq, 37);
    const int32_t cached = store.length(seq);
    store.commit(seq, std::span<const int32_t>(prompt).subspan(cached, 30 - cached));
    seqs.push_back(seq);
  }
  store.reserve(seqs[3], 60);  // reserved, never committed
  EXPECT_LT(store.free_blocks(), 16);
  for (SeqId seq : seqs) store.release(seq);
  EXPECT_EQ(store.num_sequences(), 0u);
  EXPECT_EQ(store.free_blocks(), store.total_blocks());
  EXPECT_EQ(store.pool().num_used(), 0);
  EXPECT_GT(store.pool().num_evictable(), 0);  // the full committed blocks stay cached
  store.check_invariants();
}

TEST(KvStore, OutOfCapacityNamesTheNumbersAndChangesNothing) {
  KvStore store(config_with(64));
  const SeqId big = store.add_sequence(tokens_from(0, 2));
  const SeqId small = store.add_sequence(tokens_from(0, 2));
  const SeqId idle = store.add_sequence(tokens_from(0, 2));
  store.reserve(big, 60 * 16);
  store.reserve(small, 1);
  const SeqId seq = store.add_sequence(tokens_from(7, 20));
  ASSERT_EQ(seq, 3);
  store.reserve(seq, 10);
  store.commit(seq, tokens_from(7, 10));
  ASSERT_EQ(store.free_blocks(), 2);
  ASSERT_EQ(store.block_table(idle).size(), 0u);

  const std::vector<int32_t> table_before = table_of(store, seq);
  const Error error = error_of([&] { store.reserve(seq, 10 + 80); });
  EXPECT_EQ(error.code(), ErrorCode::out_of_capacity);
  const std::string message = error.what();
  EXPECT_TRUE(contains(message, "out of KV blocks")) << message;
  EXPECT_TRUE(contains(message, "sequence 3 needs 5 more blocks")) << message;
  EXPECT_TRUE(contains(message, "80 tokens at block size 16")) << message;
  EXPECT_TRUE(contains(message, "2 of 64 are free")) << message;

  EXPECT_EQ(store.free_blocks(), 2);
  EXPECT_EQ(table_of(store, seq), table_before);
  EXPECT_EQ(store.reserved(seq), 10);
  EXPECT_EQ(store.length(seq), 10);
  store.check_invariants();
  // What fits still works.
  store.reserve(seq, 48);
  EXPECT_EQ(store.free_blocks(), 0);
  EXPECT_EQ(error_of([&] { store.reserve(seq, 49); }).code(), ErrorCode::out_of_capacity);
}

TEST(KvStore, BlockSizeOne) {
  KvStore store(config_with(8, /*block_size=*/1));
  const std::vector<int32_t> prompt = {5, 6, 7};
  const std::vector<uint64_t> keys = prefix_keys(prompt);
  const SeqId a = store.add_sequence(prompt);
  store.reserve(a, 3);
  EXPECT_EQ(store.free_blocks(), 5);
  for (int32_t pos = 0; pos < 3; ++pos) EXPECT_EQ(store.slot(a, pos), store.block_table(a)[pos]);
  write_positions(store, a, 0, keys);
  store.commit(a, prompt);
  EXPECT_EQ(store.prefix_cache().size(), 3u);  // every committed token fills a block

  const SeqId b = store.add_sequence(prompt, nullptr);
  EXPECT_EQ(store.length(b), 2);  // the last prompt token is always recomputed
  EXPECT_EQ(store.pool().ref_count(store.block_table(a)[1]), 2);
  EXPECT_TRUE(positions_hold(store, b, std::span<const uint64_t>(keys).first(2)));

  store.truncate(b, 0);  // keeps block 0 (shared)
  EXPECT_EQ(store.block_table(b).size(), 1u);
  EXPECT_EQ(store.blocks_needed(b, 1), 1);  // copy-on-write of the shared block
  store.reserve(b, 1);
  EXPECT_NE(store.block_table(b)[0], store.block_table(a)[0]);
  EXPECT_TRUE(positions_hold(store, b, std::span<const uint64_t>(keys).first(1)));
  store.check_invariants();

  store.release(a);
  store.release(b);
  EXPECT_EQ(store.free_blocks(), 8);
  store.check_invariants();
}

}  // namespace
}  // namespace specpipe
