#include "kvstore/block_pool.h"

#include "core/error.h"

namespace specpipe {

BlockPool::BlockPool(int32_t num_blocks) {
  if (num_blocks < 1)
    fail(ErrorCode::invalid_argument, "KV block pool needs at least 1 block, got {}", num_blocks);
  ref_count_.assign(static_cast<size_t>(num_blocks), 0);
  hash_.assign(static_cast<size_t>(num_blocks), std::nullopt);
  lru_pos_.assign(static_cast<size_t>(num_blocks), lru_.end());
  // Reverse order so that a fresh pool hands out 0, 1, 2, ...: easier to read in logs.
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void BlockPool::check_block(int32_t block, const char* what) const {
  if (block < 0 || block >= num_blocks())
    fail(ErrorCode::invalid_argument, "{}: KV block {} is outside the pool [0, {})", what, block,
         num_blocks());
}

BlockPool::Allocation BlockPool::allocate() {
  Allocation result;
  if (!free_.empty()) {
    result.block = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    result.block = lru_.front();
    lru_.pop_front();
    lru_pos_[result.block] = lru_.end();
    result.evicted_hash = hash_[result.block];
    hash_[result.block].reset();
  } else {
    fail(ErrorCode::out_of_capacity, "out of KV blocks: all {} blocks are in use", num_blocks());
  }
  ref_count_[result.block] = 1;
  return result;
}

void BlockPool::acquire(int32_t block) {
  check_block(block, "acquire");
  if (ref_count_[block] == 0) {
    if (!hash_[block])
      fail(ErrorCode::invalid_argument, "acquire: KV block {} is free, not cached", block);
    lru_.erase(lru_pos_[block]);
    lru_pos_[block] = lru_.end();
  }
  ++ref_count_[block];
}

void BlockPool::release(int32_t block) {
  check_block(block, "release");
  if (ref_count_[block] == 0)
    fail(ErrorCode::invalid_argument, "release: KV block {} is not in use", block);
  if (--ref_count_[block] > 0) return;
  if (hash_[block]) {
    lru_pos_[block] = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::set_hash(int32_t block, uint64_t hash) {
  check_block(block, "set_hash");
  if (ref_count_[block] == 0)
    fail(ErrorCode::invalid_argument, "set_hash: KV block {} is not in use", block);
  if (hash_[block])
    fail(ErrorCode::invalid_argument, "set_hash: KV block {} is already cached as {:016x}", block,
         *hash_[block]);
  hash_[block] = hash;
}

std::optional<uint64_t> BlockPool::hash(int32_t block) const {
  check_block(block, "hash");
  return hash_[block];
}

int32_t BlockPool::ref_count(int32_t block) const {
  check_block(block, "ref_count");
  return ref_count_[block];
}

bool BlockPool::writable(int32_t block) const {
  check_block(block, "writable");
  return ref_count_[block] == 1 && !hash_[block];
}

}  // namespace specpipe
