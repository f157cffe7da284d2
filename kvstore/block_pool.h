#pragma once
/// Reference-counted allocator of KV blocks [0, num_blocks). Counts only: it never
/// touches KV memory. A block whose count drops to zero returns to the free list, unless
/// the prefix cache still maps a hash to it: then it is "evictable" and is handed out
/// again (after the cache forgets it) only when the free list is empty, oldest first.
#include <cstdint>
#include <optional>
#include <vector>

namespace specpipe {

class BlockPool { /* implemented in kvstore/block_pool.cpp */
 public:
  explicit BlockPool(int32_t num_blocks);
  // Interface completed by the kvstore implementation.
};

}  // namespace specpipe
