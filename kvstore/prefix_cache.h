#pragma once
/// Prefix cache: maps the chained xxHash of a full committed block's token ids
/// (hash = XXH3_64(parent_hash, ids)) to the block holding their K/V.
#include <cstdint>

namespace specpipe {

class PrefixCache { /* implemented in kvstore/prefix_cache.cpp */
};

}  // namespace specpipe
