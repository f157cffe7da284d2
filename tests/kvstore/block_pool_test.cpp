#include "kvstore/block_pool.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace specpipe {
namespace {

ErrorCode code_of(auto&& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.code();
  }
  ADD_FAILURE() << "no specpipe::Error thrown";
  return ErrorCode::internal;
}

TEST(BlockPool, FreshPoolHandsOutBlocksInOrder) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_blocks(), 4);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.available(), 4);
  EXPECT_EQ(pool.num_used(), 0);
  for (int32_t expected = 0; expected < 4; ++expected) {
    const BlockPool::Allocation allocation = pool.allocate();
    EXPECT_EQ(allocation.block, expected);
    EXPECT_FALSE(allocation.evicted_hash);
    EXPECT_EQ(pool.ref_count(expected), 1);
    EXPECT_TRUE(pool.writable(expected));
  }
  EXPECT_EQ(pool.available(), 0);
  EXPECT_EQ(pool.num_used(), 4);
  EXPECT_EQ(code_of([&] { pool.allocate(); }), ErrorCode::out_of_capacity);
}

TEST(BlockPool, ReferenceCountsDecideWhenABlockIsFree) {
  BlockPool pool(2);
  const int32_t block = pool.allocate().block;
  pool.acquire(block);
  EXPECT_EQ(pool.ref_count(block), 2);
  EXPECT_FALSE(pool.writable(block));  // shared
  pool.release(block);
  EXPECT_EQ(pool.ref_count(block), 1);
  EXPECT_EQ(pool.num_free(), 1);
  pool.release(block);
  EXPECT_EQ(pool.ref_count(block), 0);
  EXPECT_EQ(pool.num_free(), 2);
  // The most recently freed block is handed out first.
  EXPECT_EQ(pool.allocate().block, block);
}

TEST(BlockPool, HashedBlocksBecomeEvictableNotFree) {
  BlockPool pool(3);
  const int32_t block = pool.allocate().block;
  pool.set_hash(block, 0xabc);
  EXPECT_FALSE(pool.writable(block));  // cached blocks are immutable
  pool.release(block);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_evictable(), 1);
  EXPECT_EQ(pool.available(), 3);
  EXPECT_EQ(pool.hash(block), 0xabcu);
  // A cache hit revives it with its hash intact.
  pool.acquire(block);
  EXPECT_EQ(pool.ref_count(block), 1);
  EXPECT_EQ(pool.num_evictable(), 0);
  EXPECT_EQ(pool.available(), 2);
  EXPECT_EQ(pool.hash(block), 0xabcu);
}

TEST(BlockPool, EvictsLeastRecentlyReleasedOnlyWhenFreeListIsEmpty) {
  BlockPool pool(4);
  for (int32_t b = 0; b < 4; ++b) {
    ASSERT_EQ(pool.allocate().block, b);
    pool.set_hash(b, 100 + b);
  }
  pool.release(2);
  pool.release(0);
  pool.release(3);
  EXPECT_EQ(pool.evictable_blocks(), (std::vector<int32_t>{2, 0, 3}));
  pool.acquire(0);  // revived: leaves the LRU list
  pool.release(0);  // released again: now the youngest
  EXPECT_EQ(pool.evictable_blocks(), (std::vector<int32_t>{2, 3, 0}));

  BlockPool::Allocation first = pool.allocate();
  EXPECT_EQ(first.block, 2);
  EXPECT_EQ(first.evicted_hash, 102u);
  EXPECT_FALSE(pool.hash(2));
  EXPECT_TRUE(pool.writable(2));
  // A freed block is preferred to any evictable one.
  pool.release(2);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.allocate().block, 2);
  EXPECT_EQ(pool.allocate().block, 3);
  EXPECT_EQ(pool.allocate().evicted_hash, 100u);
  EXPECT_EQ(pool.available(), 0);
}

TEST(BlockPool, MisuseIsRejected) {
  BlockPool pool(2);
  EXPECT_EQ(code_of([] { BlockPool bad(0); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { pool.release(0); }), ErrorCode::invalid_argument);  // free
  EXPECT_EQ(code_of([&] { pool.acquire(0); }), ErrorCode::invalid_argument);  // free, uncached
  EXPECT_EQ(code_of([&] { pool.set_hash(0, 1); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { pool.ref_count(2); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { pool.release(-1); }), ErrorCode::invalid_argument);
  const int32_t block = pool.allocate().block;
  pool.set_hash(block, 7);
  EXPECT_EQ(code_of([&] { pool.set_hash(block, 8); }), ErrorCode::invalid_argument);
  EXPECT_EQ(pool.hash(block), 7u);
}

}  // namespace
}  // namespace specpipe
