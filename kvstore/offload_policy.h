#pragma once
/// Which blocks go to the host tier when the pool fills (kvstore/README.md, "Host
/// tier"). Called by the store's one owner (the KV-router, or a plain generator) right
/// before a reserve that the free pool blocks cannot serve.
#include <cstdint>

#include "kvstore/kv_store.h"

namespace specpipe {

/// offload.policy: `longest` moves the oldest full committed blocks of the sequence with
/// the most of them in the pool first (the longest context pays the streaming, short
/// ones stay whole in the pool), then the next longest, and so on.
enum class OffloadPolicy { longest };

/// Moves blocks to the host tier until `wanted` pool blocks are free (free +
/// evictable), or nothing more can move (no host tier, the host tier full, no full
/// committed block left in the pool): the reserve that follows then fails with its own
/// out_of_capacity error. Returns the bytes moved.
int64_t make_pool_room(KvStore& kv, int32_t wanted, OffloadPolicy policy = OffloadPolicy::longest);

/// kv.reserve(seq, new_length), with a host tier first making the pool room for it
/// (make_pool_room): the one reserve of every owner that may offload. Errors as reserve.
void reserve_offloading(KvStore& kv, SeqId seq, int32_t new_length);

}  // namespace specpipe
