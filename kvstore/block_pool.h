#pragma once
/// Reference-counted allocator of KV blocks [0, num_blocks). Counts only: it never
/// touches KV memory. A block whose count drops to zero returns to the free list, unless
/// the prefix cache still maps a hash to it: then it is "evictable" and is handed out
/// again (after the cache forgets it) only when the free list is empty, oldest first.
///
/// Every block is in exactly one of three states:
///   free       ref_count 0, no hash    on the free list
///   evictable  ref_count 0, hash       on the LRU list, in release order
///   used       ref_count > 0           held by that many block tables
/// The pool records a block's hash only so that it knows which released blocks are
/// evictable and can report the hash it drops on eviction; the hash -> block map itself
/// is PrefixCache's. Not thread-safe: one owner (see kvstore/README.md).
#include <cstdint>
#include <list>
#include <optional>
#include <vector>

namespace specpipe {

class BlockPool {
 public:
  /// A pool of `num_blocks` (>= 1) free blocks. Throws Error(invalid_argument) otherwise.
  explicit BlockPool(int32_t num_blocks);

  /// Result of allocate(): the block, now used with ref_count 1, and the hash it was
  /// cached under when it had to be evicted (the caller removes it from the cache).
  struct Allocation {
    int32_t block = -1;
    std::optional<uint64_t> evicted_hash;
  };

  /// Takes a block: from the free list first (most recently freed first, its memory is
  /// the likeliest to be warm), else evicts the least recently released evictable block.
  /// Throws Error(out_of_capacity) when neither exists; callers that must be all or
  /// nothing check available() before the first allocate().
  Allocation allocate();

  /// Adds a holder to a used block, or revives an evictable one (a prefix-cache hit).
  /// A free block cannot be acquired: its contents are not defined.
  void acquire(int32_t block);

  /// Drops a holder of a used block. At zero it becomes evictable if it has a hash
  /// (it goes to the young end of the LRU list), free otherwise.
  void release(int32_t block);

  /// Records that the prefix cache now maps `hash` to this used, not yet hashed block.
  /// The hash stays until the block is evicted.
  void set_hash(int32_t block, uint64_t hash);

  /// The hash the prefix cache maps to this block, if any.
  std::optional<uint64_t> hash(int32_t block) const;
  int32_t ref_count(int32_t block) const;
  /// True when a table may write into the block: it has exactly one holder and is not in
  /// the prefix cache (hashed blocks are immutable, others may match them later).
  bool writable(int32_t block) const;

  int32_t num_blocks() const { return static_cast<int32_t>(ref_count_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }  ///< free list only
  int32_t num_evictable() const { return static_cast<int32_t>(lru_.size()); }
  int32_t available() const { return num_free() + num_evictable(); }  ///< what allocate can give
  int32_t num_used() const { return num_blocks() - available(); }

  /// Evictable blocks from the oldest release (evicted first) to the newest.
  std::vector<int32_t> evictable_blocks() const { return {lru_.begin(), lru_.end()}; }

 private:
  void check_block(int32_t block, const char* what) const;

  std::vector<int32_t> ref_count_;
  std::vector<std::optional<uint64_t>> hash_;
  std::vector<int32_t> free_;  // a stack: back() is handed out next
  std::list<int32_t> lru_;     // evictable blocks, front = released longest ago
  std::vector<std::list<int32_t>::iterator> lru_pos_;  // valid while the block is evictable
};

}  // namespace specpipe
