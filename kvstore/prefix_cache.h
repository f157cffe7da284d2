#pragma once
/// Prefix cache: maps the chained xxHash of a full committed block's token ids
/// (hash = XXH3_64(parent_hash, ids)) to the block holding their K/V.
///
/// A block's hash covers its own ids and, through the parent hash, every token before
/// it, so equal hashes mean equal prefixes (up to 64-bit collisions, about 2^-64 per
/// pair of distinct chains; the cache lives in one process and is never persisted).
/// The map only says where a prefix lives; reference counts and eviction are
/// BlockPool's, and KvStore keeps the two consistent: the cache maps h -> b exactly
/// when pool.hash(b) == h. Not thread-safe: one owner (see kvstore/README.md).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>

namespace specpipe {

class PrefixCache {
 public:
  /// Parent hash of the first block of every sequence.
  static constexpr uint64_t kRootHash = 0;

  /// XXH3_64bits_withSeed over the ids' bytes (host order) with `parent` as the seed.
  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> ids);

  /// The block cached under `hash`, if any.
  std::optional<int32_t> find(uint64_t hash) const;
  bool contains(uint64_t hash) const { return blocks_.contains(hash); }

  /// Maps `hash` to `block` unless the hash is already mapped; then the existing mapping
  /// stays (its block may already be shared) and false is returned.
  bool insert(uint64_t hash, int32_t block);

  /// Forgets `hash` (its block was evicted). Throws Error(invalid_argument) if absent.
  void erase(uint64_t hash);

  size_t size() const { return blocks_.size(); }

 private:
  std::unordered_map<uint64_t, int32_t> blocks_;
};

}  // namespace specpipe
