#include "kvstore/prefix_cache.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <vector>

#include "core/error.h"

namespace specpipe {
namespace {

TEST(PrefixCache, ChainHashIsXxh3SeededWithTheParent) {
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  EXPECT_EQ(PrefixCache::chain_hash(42, ids),
            XXH3_64bits_withSeed(ids.data(), ids.size() * sizeof(int32_t), 42));
}

TEST(PrefixCache, ChainHashDependsOnParentIdsAndOrder) {
  const std::vector<int32_t> a = {1, 2, 3, 4};
  const std::vector<int32_t> b = {1, 2, 3, 5};
  const std::vector<int32_t> swapped = {2, 1, 3, 4};
  const uint64_t root = PrefixCache::kRootHash;
  EXPECT_EQ(PrefixCache::chain_hash(root, a), PrefixCache::chain_hash(root, a));
  EXPECT_NE(PrefixCache::chain_hash(root, a), PrefixCache::chain_hash(root, b));
  EXPECT_NE(PrefixCache::chain_hash(root, a), PrefixCache::chain_hash(root, swapped));
  // Same block, different history: a different key.
  EXPECT_NE(PrefixCache::chain_hash(PrefixCache::chain_hash(root, a), b),
            PrefixCache::chain_hash(PrefixCache::chain_hash(root, swapped), b));
}

TEST(PrefixCache, InsertKeepsTheExistingMapping) {
  PrefixCache cache;
  EXPECT_FALSE(cache.find(9));
  EXPECT_TRUE(cache.insert(9, 3));
  EXPECT_FALSE(cache.insert(9, 5));
  EXPECT_EQ(cache.find(9), 3);
  EXPECT_TRUE(cache.contains(9));
  EXPECT_EQ(cache.size(), 1u);
  cache.erase(9);
  EXPECT_FALSE(cache.contains(9));
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_THROW(cache.erase(9), Error);
}

}  // namespace
}  // namespace specpipe
