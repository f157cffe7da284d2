#pragma once
/// Internal to kvstore/: the definition of KvStore::Sequence, shared by kv_store.cpp and
/// kv_store_invariants.cpp. Nothing outside this folder includes it.
#include <cstdint>
#include <vector>

#include "kvstore/kv_store.h"

namespace specpipe {

/// One sequence's view of the pool. Invariants (checked by check_invariants):
/// tokens.size() <= reserved <= table.size() * B; table.size() is what
/// [0, max(reserved, 1)) needs, or what [0, reserved) needs (the two differ only at
/// reserved == 0, where a sequence keeps the first block it had); chain[i] is the chain
/// hash of full committed block i (prefix cache on only). With a host tier, table[i] is
/// kOnHost for i < host.size() and host[i] holds block i's K/V there (full, committed:
/// host.size() * B <= tokens.size()).
struct KvStore::Sequence {
  std::vector<int32_t> tokens;  // committed ids
  std::vector<int32_t> table;   // block of positions [i * B, (i + 1) * B), or kOnHost
  std::vector<int32_t> host;    // host tier block of positions [i * B, (i + 1) * B)
  std::vector<uint64_t> chain;  // chain hash of each full committed block
  int32_t reserved = 0;
  // SpecPV view copies: pool blocks held outside the table; layer l of view_blocks[j]
  // holds layer l of host block index view_indices[l][j] (ascending, < host.size()).
  std::vector<int32_t> view_blocks;
  std::vector<std::vector<int32_t>> view_indices;
  bool view_refused = false;  // the last set_view_copies ran out of pool blocks
};

}  // namespace specpipe
