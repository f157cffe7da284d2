#include "kvstore/offload_policy.h"

#include <algorithm>

namespace specpipe {

int64_t make_pool_room(KvStore& kv, int32_t wanted, OffloadPolicy /*policy: longest is the only one*/) {
  int64_t moved = 0;
  if (!kv.host_tier()) return 0;
  while (kv.free_blocks() < wanted && kv.host_tier()->free_blocks() > 0) {
    SeqId longest = -1;
    int32_t most = 0;
    for (const SeqId seq : kv.sequence_ids()) {
      const int32_t n = kv.offloadable_blocks(seq);
      if (n > most) {  // the first of equals: the oldest sequence
        most = n;
        longest = seq;
      }
    }
    if (longest < 0) break;
    // A block another sequence shares frees nothing; moving it still lets the next
    // one go, and every pass moves at least one block, so this ends.
    const int32_t n = std::min({most, wanted - kv.free_blocks(), kv.host_tier()->free_blocks()});
    moved += kv.offload_prefix(longest, std::max(n, 1));
  }
  return moved;
}

void reserve_offloading(KvStore& kv, SeqId seq, int32_t new_length) {
  if (kv.host_tier()) make_pool_room(kv, kv.blocks_needed(seq, new_length));
  kv.reserve(seq, new_length);
}

}  // namespace specpipe
