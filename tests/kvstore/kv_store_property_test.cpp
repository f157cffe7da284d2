// Randomized property test: thousands of seeded random operations (add, reserve + write
// + commit, truncate, release) over several sequences, checked against a reference model
// that knows only what each sequence committed. Whatever the store shares, caches,
// copies or evicts, every committed position must read back the K/V written for it, and
// reference counts and free counts must match the block tables.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv_pattern.h"
#include "kvstore/kv_store.h"

namespace specpipe {
namespace {

using kv_test::next_key;
using kv_test::positions_hold;
using kv_test::prefix_keys;

struct PropertyCase {
  int32_t block_size;
  int32_t num_blocks;
  bool prefix_cache;
  uint64_t seed;
};

std::string case_name(const ::testing::TestParamInfo<PropertyCase>& info) {
  return fmt::format("B{}_N{}_{}", info.param.block_size, info.param.num_blocks,
                     info.param.prefix_cache ? "cache" : "nocache");
}

void PrintTo(const PropertyCase& c, std::ostream* out) {
  *out << fmt::format("{{block_size {}, num_blocks {}, prefix_cache {}, seed {}}}", c.block_size,
                      c.num_blocks, c.prefix_cache, c.seed);
}

/// What a sequence is, according to the caller alone.
struct ModelSequence {
  std::vector<int32_t> tokens;   // committed
  std::vector<uint64_t> keys;    // pattern key of each committed position
  std::vector<int32_t> pending;  // prompt tokens not computed yet
  int32_t reserved = 0;
};

/// Counts of the interesting paths taken, so the test can tell it exercised them.
struct Coverage {
  int cache_hits = 0, copies_on_write = 0, capacity_errors = 0, evictions = 0, rollbacks = 0;
};

class KvStoreProperty : public ::testing::TestWithParam<PropertyCase> {
 protected:
  static constexpr int kOperations = 5000;
  static constexpr size_t kMaxSequences = 6;

  KvStoreProperty() : store_(make_config(GetParam())), rng_(GetParam().seed) {
    const int32_t b = GetParam().block_size;
    for (int i = 0; i < 3; ++i) {  // shared prompt stems: the source of cache hits
      std::vector<int32_t> stem(static_cast<size_t>(4 * b + 4));
      for (int32_t& token : stem) token = 1000 + below(5000);
      stems_.push_back(stem);
    }
  }

  static KvStoreConfig make_config(const PropertyCase& c) {
    KvStoreConfig config;
    config.num_layers = 2;
    config.num_kv_heads = 2;
    config.head_dim = 2;
    config.block_size = c.block_size;
    config.num_blocks = c.num_blocks;
    config.prefix_cache = c.prefix_cache;
    return config;
  }

  int32_t below(int32_t n) { return static_cast<int32_t>(rng_() % static_cast<uint64_t>(n)); }
  SeqId any_sequence() {
    auto it = model_.begin();
    std::advance(it, below(static_cast<int32_t>(model_.size())));
    return it->first;
  }

  void add() {
    const int32_t b = GetParam().block_size;
    std::vector<int32_t> prompt = stems_[static_cast<size_t>(below(3))];
    prompt.resize(static_cast<size_t>(1 + below(4 * b + 4)));
    if (below(4) == 0)
      prompt[static_cast<size_t>(below(static_cast<int32_t>(prompt.size())))] = below(4);
    int32_t cached = -1;
    const SeqId seq = store_.add_sequence(prompt, &cached);
    ASSERT_GT(seq, last_id_);
    last_id_ = seq;
    ASSERT_EQ(cached % b, 0);
    ASSERT_LE(cached, (static_cast<int32_t>(prompt.size()) - 1) / b * b);
    if (!GetParam().prefix_cache) {
      ASSERT_EQ(cached, 0);
    }
    if (cached > 0) ++coverage_.cache_hits;

    ModelSequence& m = model_[seq];
    m.tokens.assign(prompt.begin(), prompt.begin() + cached);
    m.keys = prefix_keys(m.tokens);
    m.pending.assign(prompt.begin() + cached, prompt.end());
    m.reserved = cached;
    // Cached blocks must hold what this prefix computes, whoever computed it.
    ASSERT_TRUE(positions_hold(store_, seq, m.keys));
  }

  /// One forward + verification: reserve a window, write its K/V, commit a prefix of it,
  /// usually truncate back to the committed length.
  void step(SeqId seq) {
    ModelSequence& m = model_[seq];
    const int32_t b = GetParam().block_size;
    const auto length = static_cast<int32_t>(m.tokens.size());
    const int32_t n = 1 + below(2 * b + 2);
    const std::vector<int32_t> table_before(store_.block_table(seq).begin(),
                                            store_.block_table(seq).end());
    const int32_t free_before = store_.free_blocks();
    const size_t cached_before = store_.prefix_cache().size();
    const int32_t needed = store_.blocks_needed(seq, length + n);
    try {
      store_.reserve(seq, length + n);
    } catch (const Error& error) {
      ASSERT_EQ(error.code(), ErrorCode::out_of_capacity) << error.what();
      ASSERT_GT(needed, free_before);
      ++coverage_.capacity_errors;
      ASSERT_EQ(store_.free_blocks(), free_before);
      ASSERT_TRUE(std::ranges::equal(store_.block_table(seq), table_before));
      ASSERT_EQ(store_.reserved(seq), m.reserved);
      return;
    }
    ASSERT_LE(needed, free_before);
    ASSERT_GE(store_.free_blocks(), free_before - needed);
    ASSERT_LE(store_.free_blocks(), free_before);
    m.reserved = std::max(m.reserved, length + n);
    for (size_t i = 0; i < table_before.size() && i < store_.block_table(seq).size(); ++i) {
      if (store_.block_table(seq)[i] != table_before[i]) ++coverage_.copies_on_write;
    }
    if (store_.prefix_cache().size() < cached_before) ++coverage_.evictions;

    // The window: the rest of the prompt first, then "drafts" from a small alphabet.
    const auto from_prompt = std::min<int32_t>(n, static_cast<int32_t>(m.pending.size()));
    std::vector<int32_t> window(m.pending.begin(), m.pending.begin() + from_prompt);
    while (static_cast<int32_t>(window.size()) < n) window.push_back(below(4));
    std::vector<uint64_t> window_keys;
    uint64_t key = m.keys.empty() ? 0 : m.keys.back();
    for (int32_t token : window) window_keys.push_back(key = next_key(key, token));
    kv_test::write_positions(store_, seq, length, window_keys);

    const int32_t accepted = from_prompt == n && below(4) != 0 ? n : below(n + 1);
    store_.commit(seq, std::span<const int32_t>(window).first(static_cast<size_t>(accepted)));
    m.tokens.insert(m.tokens.end(), window.begin(), window.begin() + accepted);
    m.keys.insert(m.keys.end(), window_keys.begin(), window_keys.begin() + accepted);
    m.pending.erase(m.pending.begin(), m.pending.begin() + std::min(accepted, from_prompt));
    if (below(10) < 7) {
      store_.truncate(seq, static_cast<int32_t>(m.tokens.size()));
      m.reserved = static_cast<int32_t>(m.tokens.size());
    }
    ASSERT_TRUE(positions_hold(store_, seq, m.keys));
  }

  void rollback(SeqId seq) {
    ModelSequence& m = model_[seq];
    const int32_t to = below(static_cast<int32_t>(m.tokens.size()) + 1);
    store_.truncate(seq, to);
    m.tokens.resize(static_cast<size_t>(to));
    m.keys.resize(static_cast<size_t>(to));
    m.pending.clear();
    m.reserved = to;
    ++coverage_.rollbacks;
  }

  void release(SeqId seq) {
    store_.release(seq);
    model_.erase(seq);
    ASSERT_FALSE(store_.contains(seq));
  }

  /// Everything the model can say about the store.
  void check_all() {
    const int32_t b = GetParam().block_size;
    ASSERT_EQ(store_.num_sequences(), model_.size());
    std::map<int32_t, int32_t> holders;
    for (const auto& [seq, m] : model_) {
      ASSERT_TRUE(std::ranges::equal(store_.tokens(seq), m.tokens)) << "sequence " << seq;
      ASSERT_EQ(store_.reserved(seq), m.reserved);
      ASSERT_TRUE(positions_hold(store_, seq, m.keys));
      const std::span<const int32_t> table = store_.block_table(seq);
      // Exactly the blocks [0, reserved) needs; truncate keeps a first block at 0.
      const size_t needed = static_cast<size_t>((m.reserved + b - 1) / b);
      ASSERT_TRUE(table.size() == needed || (m.reserved == 0 && table.size() <= 1))
          << "sequence " << seq << " holds " << table.size() << " blocks for " << m.reserved;
      for (int32_t block : table) ++holders[block];
      // Positions the caller may still write lie in blocks nobody else can see.
      for (int32_t pos = static_cast<int32_t>(m.tokens.size()); pos < m.reserved; ++pos) {
        ASSERT_TRUE(store_.pool().writable(table[static_cast<size_t>(pos / b)]))
            << "sequence " << seq << " position " << pos;
      }
    }
    for (int32_t block = 0; block < store_.total_blocks(); ++block) {
      const auto it = holders.find(block);
      ASSERT_EQ(store_.pool().ref_count(block), it == holders.end() ? 0 : it->second)
          << "block " << block;
    }
    const auto used = static_cast<int32_t>(holders.size());
    ASSERT_EQ(store_.free_blocks() + used, store_.total_blocks());
    ASSERT_EQ(store_.pool().num_used(), used);
    store_.check_invariants();
  }

  KvStore store_;
  std::mt19937_64 rng_;
  std::vector<std::vector<int32_t>> stems_;
  std::map<SeqId, ModelSequence> model_;
  SeqId last_id_ = -1;
  Coverage coverage_;
};

TEST_P(KvStoreProperty, RandomOperationsNeverCorruptKvOrCounts) {
  for (int op = 0; op < kOperations; ++op) {
    SCOPED_TRACE(::testing::Message() << "operation " << op);
    const int32_t dice = below(100);
    if (model_.empty() || (dice < 12 && model_.size() < kMaxSequences)) {
      ASSERT_NO_FATAL_FAILURE(add());
    } else if (dice < 70) {
      ASSERT_NO_FATAL_FAILURE(step(any_sequence()));
    } else if (dice < 82) {
      rollback(any_sequence());
    } else if (dice < 90) {
      ASSERT_NO_FATAL_FAILURE(release(any_sequence()));
    }
    if (op % 20 == 0 || dice >= 90) {
      ASSERT_NO_FATAL_FAILURE(check_all());
    }
  }
  ASSERT_NO_FATAL_FAILURE(check_all());
  while (!model_.empty()) release(model_.begin()->first);
  EXPECT_EQ(store_.free_blocks(), store_.total_blocks());
  EXPECT_EQ(store_.pool().num_used(), 0);
  store_.check_invariants();

  RecordProperty("cache_hits", coverage_.cache_hits);
  RecordProperty("copies_on_write", coverage_.copies_on_write);
  RecordProperty("capacity_errors", coverage_.capacity_errors);
  RecordProperty("evictions", coverage_.evictions);
  // The run must have gone down the paths it is meant to test.
  EXPECT_GT(coverage_.capacity_errors, 0);
  EXPECT_GT(coverage_.rollbacks, 0);
  if (GetParam().prefix_cache) {
    EXPECT_GT(coverage_.cache_hits, 0);
    EXPECT_GT(coverage_.copies_on_write, 0);
    EXPECT_GT(coverage_.evictions, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Seeded, KvStoreProperty,
    ::testing::Values(PropertyCase{16, 24, true, 1}, PropertyCase{16, 24, false, 2},
                      PropertyCase{4, 40, true, 3}, PropertyCase{3, 30, true, 4},
                      PropertyCase{1, 64, true, 5}, PropertyCase{1, 64, false, 6}),
    case_name);

}  // namespace
}  // namespace specpipe
