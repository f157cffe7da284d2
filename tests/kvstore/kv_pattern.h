#pragma once
// Test helper: fills and checks K/V slots the way a forward pass would. The values of a
// position depend only on a key that hashes the token prefix ending there, so equal
// prefixes hold equal data whichever sequence computed them, and any slot overwritten by
// another sequence (or by a stale window) reads back wrong.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "kvstore/kv_store.h"

namespace specpipe::kv_test {

/// The tokens first, first + 1, ..., first + count - 1.
inline std::vector<int32_t> tokens_from(int32_t first, int32_t count) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

/// A copy of the block table of `seq`.
inline std::vector<int32_t> table_of(const KvStore& store, SeqId seq) {
  const std::span<const int32_t> table = store.block_table(seq);
  return {table.begin(), table.end()};
}

inline uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Key of position p from the key of p - 1 (or 0 at p = 0) and the token at p.
inline uint64_t next_key(uint64_t previous, int32_t token) {
  return mix(previous ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) << 1));
}

/// Keys of every position of `tokens`.
inline std::vector<uint64_t> prefix_keys(std::span<const int32_t> tokens) {
  std::vector<uint64_t> keys;
  uint64_t key = 0;
  for (int32_t token : tokens) keys.push_back(key = next_key(key, token));
  return keys;
}

/// An integer below 2^24, so exact in float: comparisons are bitwise.
inline float pattern_value(uint64_t key, int32_t layer, int32_t kv, int64_t element) {
  const uint64_t x =
      mix(key ^ mix((static_cast<uint64_t>(layer) << 33) ^ (static_cast<uint64_t>(kv) << 32) ^
                    static_cast<uint64_t>(element)));
  return static_cast<float>(x & 0xffffff);
}

inline void write_slot(KvTensors& tensors, int64_t slot, uint64_t key) {
  const int64_t stride = tensors.slot_stride();
  for (int32_t layer = 0; layer < tensors.num_layers(); ++layer) {
    for (int64_t e = 0; e < stride; ++e) {
      tensors.k(layer)[slot * stride + e] = pattern_value(key, layer, 0, e);
      tensors.v(layer)[slot * stride + e] = pattern_value(key, layer, 1, e);
    }
  }
}

inline ::testing::AssertionResult slot_has(const KvTensors& tensors, int64_t slot, uint64_t key) {
  const int64_t stride = tensors.slot_stride();
  for (int32_t layer = 0; layer < tensors.num_layers(); ++layer) {
    for (int64_t e = 0; e < stride; ++e) {
      if (tensors.k(layer)[slot * stride + e] != pattern_value(key, layer, 0, e) ||
          tensors.v(layer)[slot * stride + e] != pattern_value(key, layer, 1, e)) {
        return ::testing::AssertionFailure() << "slot " << slot << " layer " << layer << " element "
                                             << e << " does not hold the pattern of key " << key;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

/// What a forward pass does for the window [from, from + keys.size()) of `seq`.
inline void write_positions(KvStore& store, SeqId seq, int32_t from,
                            std::span<const uint64_t> keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    write_slot(store.tensors(), store.slot(seq, from + static_cast<int32_t>(i)), keys[i]);
  }
}

/// True when positions [0, keys.size()) of `seq` hold the patterns of `keys`.
inline ::testing::AssertionResult positions_hold(const KvStore& store, SeqId seq,
                                                 std::span<const uint64_t> keys) {
  for (size_t pos = 0; pos < keys.size(); ++pos) {
    ::testing::AssertionResult result =
        slot_has(store.tensors(), store.slot(seq, static_cast<int32_t>(pos)), keys[pos]);
    if (!result) return result << " (sequence " << seq << ", position " << pos << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace specpipe::kv_test
