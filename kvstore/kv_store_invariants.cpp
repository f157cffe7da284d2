// KvStore::check_invariants: the invariants of kvstore/README.md, recomputed from the
// block tables alone and compared with what the pool and the cache believe.
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "kvstore/kv_sequence.h"
#include "kvstore/kv_store.h"

namespace specpipe {
namespace {

template <typename... Args>
[[noreturn]] void broken(fmt::format_string<Args...> format, Args&&... args) {
  fail(ErrorCode::internal, "KV store invariant broken: {}",
       fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace

void KvStore::check_invariants() const {
  const int32_t block_size = config_.block_size;
  const int32_t num_blocks = pool_.num_blocks();
  std::vector<int32_t> holders(static_cast<size_t>(num_blocks), 0);
  std::unordered_map<int32_t, int32_t> host_holders;

  for (const auto& [id, seq_ptr] : sequences_) {
    const Sequence& seq = *seq_ptr;
    if (id >= next_id_) broken("sequence {} is not below the next id {}", id, next_id_);
    const auto length = static_cast<int64_t>(seq.tokens.size());
    const auto held = static_cast<int64_t>(seq.table.size());
    if (length > seq.reserved)
      broken("sequence {} has {} committed tokens but {} reserved", id, length, seq.reserved);
    const int64_t need = (int64_t{seq.reserved} + block_size - 1) / block_size;
    if (held != need && !(seq.reserved == 0 && held == 1))
      broken("sequence {} holds {} blocks for {} reserved positions", id, held, seq.reserved);

    // Host tier: the first host.size() entries are kOnHost, their K/V full committed
    // blocks on the host; every later entry is a pool block.
    const auto on_host = static_cast<int64_t>(seq.host.size());
    if (on_host > 0 && !host_) broken("sequence {} has {} host blocks but the store has no host tier", id, on_host);
    if (on_host * block_size > length)
      broken("sequence {} has {} host blocks but only {} committed tokens", id, on_host, length);
    if (on_host > held)
      broken("sequence {} has {} host blocks and a table of {}", id, on_host, held);
    for (int64_t i = 0; i < held; ++i) {
      const int32_t block = seq.table[static_cast<size_t>(i)];
      if ((i < on_host) != (block == kOnHost))
        broken("sequence {} block {} is {} but the host boundary is block {}", id, i,
               block == kOnHost ? "on the host" : "in the pool", on_host);
      if (block == kOnHost) continue;
      if (block < 0 || block >= num_blocks) broken("sequence {} holds block {}", id, block);
      ++holders[static_cast<size_t>(block)];
    }
    // SpecPV view copies: pool blocks held outside the table, indices of host blocks.
    for (int32_t block : seq.view_blocks) {
      if (block < 0 || block >= num_blocks) broken("sequence {} holds view copy block {}", id, block);
      ++holders[static_cast<size_t>(block)];
    }
    if (!seq.view_blocks.empty() && seq.view_indices.size() != static_cast<size_t>(config_.num_layers))
      broken("sequence {} has view copies for {} layers", id, seq.view_indices.size());
    for (const std::vector<int32_t>& idx : seq.view_indices)
      for (size_t j = 0; j < idx.size(); ++j)
        if (j >= seq.view_blocks.size() || idx[j] < 0 || idx[j] >= on_host || (j > 0 && idx[j] <= idx[j - 1]))
          broken("sequence {} has a view copy of host block index {} (copy {} of {}, {} host blocks)", id, idx[j], j,
                 seq.view_blocks.size(), on_host);
    for (int32_t block : seq.host) {
      if (block < 0 || block >= host_->total_blocks() || !host_->in_use(block))
        broken("sequence {} holds host block {}, which is not in use", id, block);
      if (++host_holders[block] > 1) broken("host block {} is held twice", block);
    }
    // Positions that may still be written must be in blocks nobody else can see.
    for (int64_t i = length / block_size; length < seq.reserved && i * block_size < seq.reserved;
         ++i) {
      if (!pool_.writable(seq.table[static_cast<size_t>(i)]))
        broken("sequence {} may write into block {} (refs {}, cached {})", id, seq.table[i],
               pool_.ref_count(seq.table[i]), pool_.hash(seq.table[i]).has_value());
    }

    const int64_t full = length / block_size;
    if (static_cast<int64_t>(seq.chain.size()) != (config_.prefix_cache ? full : 0))
      broken("sequence {} has {} chain hashes for {} full blocks", id, seq.chain.size(), full);
    uint64_t parent = PrefixCache::kRootHash;
    for (size_t i = 0; i < seq.chain.size(); ++i) {
      const uint64_t hash = PrefixCache::chain_hash(
          parent, std::span<const int32_t>(seq.tokens).subspan(i * block_size, block_size));
      if (hash != seq.chain[i]) broken("sequence {} block {} has a stale chain hash", id, i);
      parent = hash;
      if (seq.table[i] == kOnHost) continue;
      const std::optional<uint64_t> cached = pool_.hash(seq.table[i]);
      if (cached && *cached != hash)
        broken("sequence {} block {} is cached under another prefix", id, i);
    }
  }

  int32_t free = 0, evictable = 0;
  size_t hashed = 0;
  for (int32_t block = 0; block < num_blocks; ++block) {
    const int32_t refs = pool_.ref_count(block);
    if (refs != holders[static_cast<size_t>(block)])
      broken("block {} has {} references but {} tables hold it", block, refs,
             holders[static_cast<size_t>(block)]);
    const std::optional<uint64_t> hash = pool_.hash(block);
    if (refs == 0) ++(hash ? evictable : free);
    if (!hash) continue;
    ++hashed;
    if (prefix_cache_.find(*hash) != block)
      broken("block {} believes it is cached as {:016x}, the cache disagrees", block, *hash);
  }
  if (free != pool_.num_free() || evictable != pool_.num_evictable())
    broken("pool counts {} free and {} evictable blocks, the tables say {} and {}",
           pool_.num_free(), pool_.num_evictable(), free, evictable);
  if (host_ && static_cast<int32_t>(host_holders.size()) != host_->used_blocks())
    broken("the host tier has {} blocks in use but the sequences hold {}", host_->used_blocks(),
           host_holders.size());
  if (hashed != prefix_cache_.size())
    broken("the prefix cache has {} entries but {} blocks are hashed", prefix_cache_.size(),
           hashed);
}

}  // namespace specpipe
