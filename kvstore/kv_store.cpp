#include "kvstore/kv_store.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "kvstore/kv_sequence.h"

namespace specpipe {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

const KvStoreConfig& validated(const KvStoreConfig& config, bool has_copier) {
  const std::pair<const char*, int32_t> sizes[] = {{"num_layers", config.num_layers},
                                                   {"num_kv_heads", config.num_kv_heads},
                                                   {"head_dim", config.head_dim},
                                                   {"block_size", config.block_size},
                                                   {"num_blocks", config.num_blocks}};
  for (const auto& [name, value] : sizes) {
    if (value < 1)
      fail(ErrorCode::invalid_argument, "KV store config: {} must be >= 1, got {}", name, value);
  }
  if (!config.host_tensors && config.prefix_cache && !has_copier)
    fail(ErrorCode::invalid_argument,
         "KV store config: a store without host tensors needs a block copier for the prefix cache (copy-on-write of "
         "a shared block happens where the pool lives)");
  return config;
}

}  // namespace

KvStore::KvStore(const KvStoreConfig& config, BlockCopier copier)
    : config_(validated(config, static_cast<bool>(copier))),
      pool_(config.num_blocks),
      tensors_(config.num_layers, config.num_blocks, config.block_size, config.num_kv_heads,
               config.head_dim, config.host_tensors),
      copier_(config.host_tensors ? BlockCopier{} : std::move(copier)) {}

KvStore::~KvStore() = default;
KvStore::KvStore(KvStore&&) noexcept = default;
KvStore& KvStore::operator=(KvStore&&) noexcept = default;

KvStore::Sequence& KvStore::at(SeqId seq) {
  return const_cast<Sequence&>(std::as_const(*this).at(seq));
}

const KvStore::Sequence& KvStore::at(SeqId seq) const {
  const auto it = sequences_.find(seq);
  if (it == sequences_.end())
    fail(ErrorCode::invalid_argument, "KV sequence {} is unknown or already released", seq);
  return *it->second;
}

int32_t KvStore::take_block() {
  const BlockPool::Allocation allocation = pool_.allocate();
  if (allocation.evicted_hash) prefix_cache_.erase(*allocation.evicted_hash);
  return allocation.block;
}

void KvStore::release_blocks_from(Sequence& seq, size_t first_index) {
  // Deepest block first: it lands at the old end of the LRU list and is evicted before
  // its parents, whose loss would make it unreachable anyway.
  while (seq.table.size() > first_index) {
    if (seq.table.back() != kOnHost) pool_.release(seq.table.back());
    seq.table.pop_back();
  }
  // Host blocks past the table (truncate releases those itself first; release here).
  while (seq.host.size() > seq.table.size()) {
    host_->release(seq.host.back());
    seq.host.pop_back();
  }
}

SeqId KvStore::add_sequence(std::span<const int32_t> prompt, int32_t* cached_tokens) {
  if (prompt.size() > static_cast<size_t>(INT32_MAX))
    fail(ErrorCode::invalid_argument, "prompt of {} tokens is longer than a KV sequence can be",
         prompt.size());
  auto seq = std::make_unique<Sequence>();
  const size_t block_size = static_cast<size_t>(config_.block_size);
  if (config_.prefix_cache && !prompt.empty()) {
    // The last prompt token is never taken from the cache: its logits are needed.
    const size_t max_blocks = (prompt.size() - 1) / block_size;
    uint64_t parent = PrefixCache::kRootHash;
    for (size_t i = 0; i < max_blocks; ++i) {
      const uint64_t hash =
          PrefixCache::chain_hash(parent, prompt.subspan(i * block_size, block_size));
      const std::optional<int32_t> block = prefix_cache_.find(hash);
      if (!block) break;
      pool_.acquire(*block);
      seq->table.push_back(*block);
      seq->chain.push_back(hash);
      parent = hash;
    }
  }
  const size_t matched = seq->table.size() * block_size;
  seq->tokens.assign(prompt.begin(), prompt.begin() + static_cast<ptrdiff_t>(matched));
  seq->reserved = static_cast<int32_t>(matched);
  if (cached_tokens) *cached_tokens = seq->reserved;
  const SeqId id = next_id_++;
  sequences_.emplace(id, std::move(seq));
  return id;
}

int32_t KvStore::blocks_needed(SeqId seq, int32_t new_length) const {
  const Sequence& s = at(seq);
  if (new_length <= s.reserved) return 0;
  const int64_t first = s.reserved / config_.block_size;  // first block gaining positions
  const int64_t end = ceil_div(new_length, config_.block_size);
  const int64_t held = static_cast<int64_t>(s.table.size());
  int64_t needed = std::max<int64_t>(0, end - std::max(first, held));
  // Held blocks that gain writable positions: at most the one holding position
  // `reserved`; it needs a private copy if it is shared or cached.
  for (int64_t i = first; i < std::min(end, held); ++i) {
    if (!pool_.writable(s.table[static_cast<size_t>(i)])) ++needed;
  }
  return static_cast<int32_t>(needed);
}

void KvStore::reserve(SeqId seq, int32_t new_length) {
  Sequence& s = at(seq);
  if (new_length < 0)
    fail(ErrorCode::invalid_argument, "reserve: KV sequence {} cannot have length {}", seq,
         new_length);
  if (new_length <= s.reserved) return;
  const int32_t needed = blocks_needed(seq, new_length);
  if (needed > pool_.available())
    fail(ErrorCode::out_of_capacity,
         "out of KV blocks: sequence {} needs {} more blocks ({} tokens at block size {}) to "
         "reach length {} but {} of {} are free",
         seq, needed, int64_t{needed} * config_.block_size, config_.block_size, new_length,
         pool_.available(), pool_.num_blocks());

  // From here on nothing can fail: the pool has `needed` blocks to give.
  const size_t first = static_cast<size_t>(s.reserved / config_.block_size);
  const auto end = static_cast<size_t>(ceil_div(new_length, config_.block_size));
  for (size_t i = first; i < end; ++i) {
    if (i >= s.table.size()) {
      s.table.push_back(take_block());
    } else if (!pool_.writable(s.table[i])) {
      // Copy-on-write: the block is shared or cached, and a position in it is about to
      // become writable (the sequence was truncated into it).
      const int32_t old_block = s.table[i];
      const int32_t new_block = take_block();
      if (copier_) {
        copier_(old_block, new_block);  // the pool is on a device
      } else {
        if (host_copier_.before_pool_write) host_copier_.before_pool_write();  // new_block may be read by a move
        tensors_.copy_block(old_block, new_block);
      }
      s.table[i] = new_block;
      pool_.release(old_block);
    }
  }
  s.reserved = new_length;
}

void KvStore::commit(SeqId seq, std::span<const int32_t> tokens) {
  Sequence& s = at(seq);
  const int64_t new_length =
      static_cast<int64_t>(s.tokens.size()) + static_cast<int64_t>(tokens.size());
  if (new_length > s.reserved)
    fail(ErrorCode::invalid_argument,
         "commit: KV sequence {} has {} committed tokens; {} more exceed its {} reserved positions",
         seq, s.tokens.size(), tokens.size(), s.reserved);
  const size_t full_before = s.tokens.size() / static_cast<size_t>(config_.block_size);
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  hash_full_blocks(s, full_before, /*cache=*/true);
}

void KvStore::hash_full_blocks(Sequence& s, size_t first, bool cache) {
  if (!config_.prefix_cache) return;
  const size_t block_size = static_cast<size_t>(config_.block_size);
  const std::span<const int32_t> ids(s.tokens);
  for (size_t i = first; i < s.tokens.size() / block_size; ++i) {
    const uint64_t parent = i == 0 ? PrefixCache::kRootHash : s.chain[i - 1];
    const uint64_t hash = PrefixCache::chain_hash(parent, ids.subspan(i * block_size, block_size));
    s.chain.push_back(hash);
    // The block was writable until now (private, not cached). If another block already
    // holds this prefix, that mapping stays: it may be shared, ours is not.
    if (cache && prefix_cache_.insert(hash, s.table[i])) pool_.set_hash(s.table[i], hash);
  }
}

void KvStore::truncate(SeqId seq, int32_t new_length) {
  Sequence& s = at(seq);
  if (new_length < 0 || static_cast<size_t>(new_length) > s.tokens.size())
    fail(ErrorCode::invalid_argument,
         "truncate: KV sequence {} has {} committed tokens, cannot truncate to {}", seq,
         s.tokens.size(), new_length);
  const size_t block_size = static_cast<size_t>(config_.block_size);
  const size_t keep_host = static_cast<size_t>(new_length) / block_size;  // host blocks still full
  if (keep_host < s.host.size()) {
    // View copies name host blocks by index: some of them go now, so all of them do
    // (the next SpecPV refresh makes new ones).
    release_view_copies(s);
    // Rollback below the host boundary. A host block that new_length ends inside is
    // written again from new_length on: it comes back to a private pool block.
    const bool partial = static_cast<size_t>(new_length) % block_size != 0;
    if (partial && pool_.available() < 1)
      fail(ErrorCode::out_of_capacity,
           "out of KV blocks: truncating sequence {} to {} brings host block {} back to the pool, but 0 of {} "
           "pool blocks are free",
           seq, new_length, keep_host, pool_.num_blocks());
    if (partial) {
      const int32_t block = take_block();
      copy_to_pool(s.host[keep_host], block);
      s.table[keep_host] = block;
    }
    while (s.host.size() > keep_host) {
      host_->release(s.host.back());
      s.host.pop_back();
    }
    // The table's host entries past new_length are dropped below.
  }
  s.tokens.resize(static_cast<size_t>(new_length));
  s.chain.resize(std::min(s.chain.size(), s.tokens.size() / block_size));
  s.reserved = new_length;
  // The first block stays even at length 0: a rolled-back sequence about to recompute
  // its start needs no allocation for it (unless it must copy a shared block).
  release_blocks_from(s,
                      static_cast<size_t>(ceil_div(std::max(new_length, 1), config_.block_size)));
  // A first block that was on the host has no pool block to keep.
  if (s.table.size() == 1 && s.table.front() == kOnHost && s.host.empty()) s.table.clear();
}

void KvStore::release(SeqId seq) {
  Sequence& s = at(seq);
  release_view_copies(s);
  release_blocks_from(s, 0);
  sequences_.erase(seq);
}

bool KvStore::contains(SeqId seq) const { return sequences_.contains(seq); }
int32_t KvStore::length(SeqId seq) const { return static_cast<int32_t>(at(seq).tokens.size()); }
int32_t KvStore::reserved(SeqId seq) const { return at(seq).reserved; }
std::span<const int32_t> KvStore::block_table(SeqId seq) const { return at(seq).table; }
std::span<const int32_t> KvStore::tokens(SeqId seq) const { return at(seq).tokens; }
int32_t KvStore::free_blocks() const { return pool_.available(); }
size_t KvStore::num_sequences() const { return sequences_.size(); }

std::vector<SeqId> KvStore::sequence_ids() const {
  std::vector<SeqId> ids;
  ids.reserve(sequences_.size());
  for (const auto& entry : sequences_) ids.push_back(entry.first);
  std::sort(ids.begin(), ids.end());
  return ids;
}

KvOccupancy KvStore::occupancy() const {
  KvOccupancy o{free_blocks(), total_blocks(), num_sequences()};
  if (host_) {
    o.host_free_blocks = host_->free_blocks();
    o.host_total_blocks = host_->total_blocks();
  }
  return o;
}

int64_t KvStore::slot(SeqId seq, int32_t pos) const {
  const Sequence& s = at(seq);
  const int32_t block_size = config_.block_size;
  const auto host_end = static_cast<int32_t>(s.host.size()) * block_size;
  if (pos < host_end || pos >= s.reserved)
    fail(ErrorCode::invalid_argument, "slot: position {} of KV sequence {} is outside its pool positions [{}, {})",
         pos, seq, host_end, s.reserved);
  return int64_t{s.table[static_cast<size_t>(pos / block_size)]} * block_size + pos % block_size;
}

}  // namespace specpipe

// ---- host tier -------------------------------------------------------------------

namespace specpipe {

void KvStore::attach_host_tier(std::unique_ptr<HostKvTier> tier, HostTierCopier copier) {
  if (!tier) fail(ErrorCode::invalid_argument, "attach_host_tier: no tier");
  const HostTierLayout& l = tier->layout();
  if (l.num_layers != config_.num_layers || l.num_kv_heads != config_.num_kv_heads ||
      l.head_dim != config_.head_dim || l.block_size != config_.block_size)
    fail(ErrorCode::invalid_argument,
         "attach_host_tier: the host tier's layout (layers {}, kv_heads {}, head_dim {}, block_size {}) differs "
         "from the pool's ({}, {}, {}, {})",
         l.num_layers, l.num_kv_heads, l.head_dim, l.block_size, config_.num_layers, config_.num_kv_heads,
         config_.head_dim, config_.block_size);
  if (!sequences_.empty())
    fail(ErrorCode::invalid_argument, "attach_host_tier: {} sequences are live", sequences_.size());
  if (!config_.host_tensors && (!copier.to_host || !copier.to_pool))
    fail(ErrorCode::invalid_argument,
         "attach_host_tier: a store without host tensors needs a copier both ways (its pool is on a device)");
  host_ = std::move(tier);
  host_copier_ = std::move(copier);
}

int32_t KvStore::host_blocks(SeqId seq) const { return static_cast<int32_t>(at(seq).host.size()); }

std::span<const int32_t> KvStore::host_block_table(SeqId seq) const { return at(seq).host; }

int32_t KvStore::offloadable_blocks(SeqId seq) const {
  const Sequence& s = at(seq);
  return static_cast<int32_t>(s.tokens.size() / static_cast<size_t>(config_.block_size) - s.host.size());
}

int32_t KvStore::blocks_freed_by_offload(SeqId seq, int32_t blocks) const {
  const Sequence& s = at(seq);
  const int32_t n = std::clamp(blocks, 0, offloadable_blocks(seq));
  int32_t freed = 0;
  for (size_t i = s.host.size(); i < s.host.size() + static_cast<size_t>(n); ++i)
    freed += pool_.ref_count(s.table[i]) == 1 ? 1 : 0;
  return freed;
}

void KvStore::copy_to_host(int32_t pool_block, int32_t host_block) {
  if (host_copier_.to_host) return host_copier_.to_host(pool_block, host_block);
  copy_block_to_host(tensors_, *host_, pool_block, host_block);
}

void KvStore::copy_to_pool(int32_t host_block, int32_t pool_block) {
  if (host_copier_.to_pool) host_copier_.to_pool(host_block, pool_block);
  else {
    if (host_copier_.before_pool_write) host_copier_.before_pool_write();
    copy_block_to_pool(*host_, tensors_, host_block, pool_block);
  }
  ++offload_stats_.blocks_to_pool;
  offload_stats_.bytes_to_pool += host_->block_bytes();
}

int64_t KvStore::offload_prefix(SeqId seq, int32_t blocks) {
  Sequence& s = at(seq);
  if (!host_) fail(ErrorCode::invalid_argument, "offload: KV sequence {}: the store has no host tier", seq);
  const int32_t offloadable = offloadable_blocks(seq);
  if (blocks < 0 || blocks > offloadable)
    fail(ErrorCode::invalid_argument, "offload: KV sequence {} has {} full committed blocks in the pool, not {}", seq,
         offloadable, blocks);
  if (blocks > host_->free_blocks())
    fail(ErrorCode::out_of_capacity, "out of KV host tier blocks: sequence {} offloads {} blocks but {} of {} are free",
         seq, blocks, host_->free_blocks(), host_->total_blocks());
  // From here on nothing can fail: the host tier has the blocks.
  const size_t first = s.host.size();
  for (size_t i = first; i < first + static_cast<size_t>(blocks); ++i) {
    const int32_t host_block = host_->allocate();
    copy_to_host(s.table[i], host_block);
    s.host.push_back(host_block);
  }
  // Released deepest first (the LRU order release_blocks_from keeps).
  for (size_t i = first + static_cast<size_t>(blocks); i-- > first;) {
    pool_.release(s.table[i]);
    s.table[i] = kOnHost;
  }
  const int64_t bytes = int64_t{blocks} * host_->block_bytes();
  offload_stats_.blocks_to_host += blocks;
  offload_stats_.bytes_to_host += bytes;
  return bytes;
}

int64_t KvStore::book_host_prefix(SeqId seq, std::span<const int32_t> tokens) {
  Sequence& s = at(seq);
  if (!host_) fail(ErrorCode::invalid_argument, "host prefix: KV sequence {}: the store has no host tier", seq);
  if (!s.tokens.empty() || !s.table.empty() || s.reserved != 0)
    fail(ErrorCode::invalid_argument,
         "host prefix: KV sequence {} is not empty ({} committed tokens, {} blocks); book it right after add_sequence",
         seq, s.tokens.size(), s.table.size());
  const size_t block_size = static_cast<size_t>(config_.block_size);
  if (tokens.size() % block_size != 0)
    fail(ErrorCode::invalid_argument, "host prefix: KV sequence {}: {} tokens are not whole blocks of {}", seq,
         tokens.size(), block_size);
  const auto blocks = static_cast<int64_t>(tokens.size() / block_size);
  if (blocks > host_->free_blocks())
    fail(ErrorCode::out_of_capacity, "out of KV host tier blocks: sequence {} books {} blocks but {} of {} are free",
         seq, blocks, host_->free_blocks(), host_->total_blocks());
  // From here on nothing can fail: the host tier has the blocks.
  for (int64_t i = 0; i < blocks; ++i) {
    s.host.push_back(host_->allocate());
    s.table.push_back(kOnHost);
  }
  s.tokens.assign(tokens.begin(), tokens.end());
  s.reserved = static_cast<int32_t>(tokens.size());
  hash_full_blocks(s, 0, /*cache=*/false);
  const int64_t bytes = blocks * host_->block_bytes();
  offload_stats_.blocks_to_host += blocks;
  offload_stats_.bytes_to_host += bytes;
  return bytes;
}

// ---- SpecPV view copies ----------------------------------------------------------

void KvStore::release_view_copies(Sequence& s) {
  for (size_t j = s.view_blocks.size(); j-- > 0;) pool_.release(s.view_blocks[j]);
  s.view_blocks.clear();
  s.view_indices.clear();
}

int64_t KvStore::set_view_copies(SeqId seq, std::span<const std::vector<int32_t>> host_indices) {
  Sequence& s = at(seq);
  if (!host_) fail(ErrorCode::invalid_argument, "view copies: KV sequence {}: the store has no host tier", seq);
  if (host_indices.size() != static_cast<size_t>(config_.num_layers))
    fail(ErrorCode::invalid_argument, "view copies: KV sequence {}: {} layers of indices, the store has {}", seq,
         host_indices.size(), config_.num_layers);
  size_t blocks = 0;
  for (size_t l = 0; l < host_indices.size(); ++l) {
    const std::vector<int32_t>& idx = host_indices[l];
    for (size_t j = 0; j < idx.size(); ++j)
      if (idx[j] < 0 || static_cast<size_t>(idx[j]) >= s.host.size() || (j > 0 && idx[j] <= idx[j - 1]))
        fail(ErrorCode::invalid_argument,
             "view copies: KV sequence {} layer {}: index {} is not an ascending host block index below {}", seq, l,
             idx[j], s.host.size());
    blocks = std::max(blocks, idx.size());
  }
  // The old copies go first (their blocks count as free for the new ones); until the
  // new ones are made the sequence is marked refused.
  release_view_copies(s);
  s.view_refused = true;
  if (!config_.host_tensors && !host_copier_.layer_to_pool)
    fail(ErrorCode::unsupported, "view copies: the device's host tier copier cannot copy single layers");
  if (blocks > static_cast<size_t>(pool_.available())) {
    fail(ErrorCode::out_of_capacity,
         "out of KV blocks: the partial view of sequence {} needs {} pool blocks for copies of host-tier blocks but "
         "{} of {} are free",
         seq, blocks, pool_.available(), pool_.num_blocks());
  }
  // From here on nothing can fail: the pool has the blocks.
  s.view_refused = false;
  for (size_t j = 0; j < blocks; ++j) s.view_blocks.push_back(take_block());
  s.view_indices.assign(host_indices.begin(), host_indices.end());
  if (!host_copier_.layer_to_pool && host_copier_.before_pool_write) host_copier_.before_pool_write();
  const int64_t floats = host_->block_floats();
  int64_t copies = 0;
  for (int32_t layer = 0; layer < config_.num_layers; ++layer) {
    const std::vector<int32_t>& idx = s.view_indices[static_cast<size_t>(layer)];
    for (size_t j = 0; j < idx.size(); ++j) {
      const int32_t host_block = s.host[static_cast<size_t>(idx[j])], pool_block = s.view_blocks[j];
      if (host_copier_.layer_to_pool) {
        host_copier_.layer_to_pool(layer, host_block, pool_block);
      } else {
        std::copy_n(host_->k(layer) + host_block * floats, floats, tensors_.k(layer) + pool_block * floats);
        std::copy_n(host_->v(layer) + host_block * floats, floats, tensors_.v(layer) + pool_block * floats);
      }
      ++copies;
    }
  }
  const int64_t bytes = copies * 2 * host_->block_tensor_bytes();
  offload_stats_.view_layer_copies += copies;
  offload_stats_.view_bytes_to_pool += bytes;
  return bytes;
}

int32_t KvStore::view_copy(SeqId seq, int32_t layer, int32_t index) const {
  const Sequence& s = at(seq);
  if (layer < 0 || static_cast<size_t>(layer) >= s.view_indices.size()) return -1;
  const std::vector<int32_t>& idx = s.view_indices[static_cast<size_t>(layer)];
  const auto it = std::lower_bound(idx.begin(), idx.end(), index);
  if (it == idx.end() || *it != index) return -1;
  return s.view_blocks[static_cast<size_t>(it - idx.begin())];
}

int32_t KvStore::view_copy_blocks(SeqId seq) const { return static_cast<int32_t>(at(seq).view_blocks.size()); }
bool KvStore::view_copies_refused(SeqId seq) const { return at(seq).view_refused; }
void KvStore::drop_view_copies(SeqId seq) {
  Sequence& s = at(seq);
  release_view_copies(s);
  s.view_refused = false;
}

}  // namespace specpipe
