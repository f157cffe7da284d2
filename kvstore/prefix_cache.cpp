#include "kvstore/prefix_cache.h"

#include <xxhash.h>

#include "core/error.h"

namespace specpipe {

uint64_t PrefixCache::chain_hash(uint64_t parent, std::span<const int32_t> ids) {
  return XXH3_64bits_withSeed(ids.data(), ids.size_bytes(), parent);
}

std::optional<int32_t> PrefixCache::find(uint64_t hash) const {
  const auto it = blocks_.find(hash);
  if (it == blocks_.end()) return std::nullopt;
  return it->second;
}

bool PrefixCache::insert(uint64_t hash, int32_t block) {
  return blocks_.try_emplace(hash, block).second;
}

void PrefixCache::erase(uint64_t hash) {
  if (blocks_.erase(hash) == 0)
    fail(ErrorCode::invalid_argument, "prefix cache: no block is cached under hash {:016x}", hash);
}

}  // namespace specpipe
