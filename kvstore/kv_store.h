#pragma once
/// The paged KV store: a pool of fixed-size blocks shared by all sequences, one block
/// table per sequence, slots shared by all layers, and a prefix cache over full
/// committed blocks. See kvstore/README.md for the contract.
///
/// Not thread-safe, by design: one owner (the KV-router actor) mutates it; others get
/// slots and views from that owner. Errors are specpipe::Error; every throwing call
/// leaves the store as it was.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvstore/block_pool.h"
#include "kvstore/host_tier.h"
#include "kvstore/kv_tensors.h"
#include "kvstore/prefix_cache.h"

namespace specpipe {

struct KvStoreConfig {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  bool prefix_cache = true;
  /// false: the store keeps only the books (block tables, slots, lengths) and the pool
  /// lives elsewhere (a device model's memory). With the prefix cache on, the owner of
  /// that pool then copies blocks for copy-on-write (KvStore's BlockCopier).
  bool host_tensors = true;
};

/// Copies pool block `src` to block `dst` (every layer, K and V) where the pool lives.
/// A store without host tensors calls it for copy-on-write of a shared block; it must
/// not fail, and the copy must land before the next forward reads or writes `dst` (a
/// device model queues it in front of its next forward: model/forward_model.h).
using BlockCopier = std::function<void(int32_t src, int32_t dst)>;

/// Moves one whole block (every layer, K and V) between the pool and the host tier where
/// the pool lives, for a store without host tensors: its device model queues the copies
/// on its copy stream. to_host must have read the pool block before the pool block is
/// written again, and to_pool must land before the next forward reads the pool block.
struct HostTierCopier {
  std::function<void(int32_t pool_block, int32_t host_block)> to_host;
  std::function<void(int32_t host_block, int32_t pool_block)> to_pool;
  /// One layer's K and V of a host block into that layer of a pool block (SpecPV view
  /// copies, KvStore::set_view_copies); lands before the next forward. May be empty:
  /// the store then refuses view copies (Error(unsupported)).
  std::function<void(int32_t layer, int32_t host_block, int32_t pool_block)> layer_to_pool = {};
  /// A store with host tensors whose to_host copies run later (the CPU's copy thread,
  /// kvstore/async_write_back.h) calls this before it writes a pool block or reads a
  /// host block itself (copy-on-write, a block back from the host, view copies): a
  /// queued copy may still read that pool block or write that host block. May be empty.
  std::function<void()> before_pool_write = {};
};

/// Traffic between the pool and the host tier (ARCHITECTURE.md section 10).
struct OffloadStats {
  int64_t blocks_to_host = 0;
  int64_t bytes_to_host = 0;
  int64_t blocks_to_pool = 0;  ///< brought back by a truncate below the host boundary
  int64_t bytes_to_pool = 0;
  int64_t view_layer_copies = 0;   ///< SpecPV view copies: one layer of one block each
  int64_t view_bytes_to_pool = 0;  ///< their K/V bytes (set_view_copies)
};

/// Sequence ids are handed out 0, 1, 2, ... and never reused.
using SeqId = int64_t;

/// How full a KV store is (for statistics and leak checks).
struct KvOccupancy {
  int32_t free_blocks = 0;  ///< free + evictable cached
  int32_t total_blocks = 0;
  size_t sequences = 0;
  int32_t host_free_blocks = 0;   ///< host tier (offload); 0 and 0 without one
  int32_t host_total_blocks = 0;
  bool operator==(const KvOccupancy&) const = default;
};

class KvStore {
 public:
  /// Every size in `config` must be >= 1; throws Error(invalid_argument) naming the field.
  /// A store without host tensors and with the prefix cache needs `copier` (else
  /// invalid_argument); a store with host tensors copies them itself and ignores it.
  explicit KvStore(const KvStoreConfig& config, BlockCopier copier = {});
  ~KvStore();
  KvStore(KvStore&&) noexcept;
  KvStore& operator=(KvStore&&) noexcept;
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  const KvStoreConfig& config() const { return config_; }

  /// Registers a new sequence for `prompt`. With the prefix cache on, reuses the longest
  /// chain of cached full blocks that leaves at least one prompt token uncomputed (the
  /// caller needs logits for the last one); the sequence then starts with those tokens
  /// committed. Returns the id; `*cached_tokens` receives the committed length.
  SeqId add_sequence(std::span<const int32_t> prompt, int32_t* cached_tokens = nullptr);

  /// Makes positions [0, new_length) writable: allocates blocks (and copies a shared
  /// tail block before it may be written). All or nothing: on failure throws
  /// Error(out_of_capacity) with "out of KV blocks: ..." and changes nothing.
  /// A new_length <= reserved(seq) changes nothing.
  void reserve(SeqId seq, int32_t new_length);

  /// Records `tokens` as verified at positions [length, length + n): their K/V must
  /// already be in the pool. Blocks that become full are entered in the prefix cache.
  /// length + n must be <= reserved(seq).
  void commit(SeqId seq, std::span<const int32_t> tokens);

  /// Shrinks the sequence to `new_length` committed tokens (<= length) and releases
  /// every block beyond what [0, max(new_length, 1)) needs, including reserved blocks
  /// that were never committed. Never zeroes memory. reserved(seq) becomes new_length.
  /// Below the host boundary (rollback into offloaded blocks) the host blocks past
  /// new_length go back to the host tier, and a host block new_length ends inside comes
  /// back to a pool block (it becomes writable again): that one allocation may throw
  /// Error(out_of_capacity), changing nothing.
  void truncate(SeqId seq, int32_t new_length);

  /// Releases every block of the sequence; the id becomes invalid.
  void release(SeqId seq);

  bool contains(SeqId seq) const;   ///< live (added, not released)
  int32_t length(SeqId seq) const;  ///< committed tokens
  /// Positions [0, reserved) have slots; those in [length, reserved) are writable.
  int32_t reserved(SeqId seq) const;
  /// The blocks the sequence holds, in position order. May hold one block more than
  /// reserved(seq) needs: truncate keeps the first block of a sequence.
  std::span<const int32_t> block_table(SeqId seq) const;
  std::span<const int32_t> tokens(SeqId seq) const;  ///< committed token ids
  /// slot(pos) = table[pos / B] * B + pos % B; pos must be < reserved(seq) and in the
  /// pool (not below the host boundary).
  int64_t slot(SeqId seq, int32_t pos) const;

  /// Blocks a reserve(seq, new_length) would take from the pool.
  int32_t blocks_needed(SeqId seq, int32_t new_length) const;
  int32_t free_blocks() const;  ///< free + evictable cached blocks
  int32_t total_blocks() const { return config_.num_blocks; }
  int64_t capacity_tokens() const { return int64_t{config_.num_blocks} * config_.block_size; }
  size_t num_sequences() const;
  std::vector<SeqId> sequence_ids() const;  ///< the live sequences, ascending
  KvOccupancy occupancy() const;

  // ---- host tier (offload): kvstore/README.md, "Host tier" ----------------------

  /// Block-table entry of a block whose K/V live on the host tier.
  static constexpr int32_t kOnHost = -1;
  /// Gives the store a host tier of the same layout (num_layers, kv_heads, head_dim,
  /// block_size; else Error(invalid_argument)). A store without host tensors needs a
  /// copier with both directions; one with host tensors copies itself where the copier
  /// leaves a direction empty (the CPU's asynchronous write-back gives to_host and
  /// before_pool_write only). Only while no sequence is live.
  void attach_host_tier(std::unique_ptr<HostKvTier> tier, HostTierCopier copier = {});
  const HostKvTier* host_tier() const { return host_.get(); }
  /// The tier's memory for a writer that fills booked blocks (LayerPrefillWriter).
  HostKvTier* host_tier() { return host_.get(); }
  /// h: the sequence's positions [0, h * B) live on the host tier (block_table entries
  /// [0, h) are kOnHost), the rest in the pool.
  int32_t host_blocks(SeqId seq) const;
  /// The host tier blocks of positions [0, host_blocks * B), in position order.
  std::span<const int32_t> host_block_table(SeqId seq) const;
  /// Full committed blocks still in the pool: what offload_prefix may move.
  int32_t offloadable_blocks(SeqId seq) const;
  /// Pool blocks that moving `blocks` of the sequence's offloadable blocks would free
  /// (a block another sequence shares stays in the pool).
  int32_t blocks_freed_by_offload(SeqId seq, int32_t blocks) const;
  /// Moves the sequence's oldest `blocks` full committed pool blocks (the first ones
  /// after those already on the host) to the host tier: K/V copied, the pool block
  /// released (a cached block stays in the prefix cache as an evictable pool block; its
  /// K/V are intact there). Those positions are committed and read-only, so nothing
  /// writes them again. All or nothing: Error(invalid_argument) without a host tier or
  /// for more blocks than offloadable_blocks, Error(out_of_capacity) when the host tier
  /// has fewer free blocks. Returns the bytes moved.
  int64_t offload_prefix(SeqId seq, int32_t blocks);
  /// Layer-wise prefill (issue 16 item 5): books the first `tokens` of an empty sequence
  /// (no committed token, no block) as committed blocks on the host tier, tokens.size() a
  /// whole number of blocks. Their K/V are NOT written: the caller's prefill writes them
  /// (CudaTransformer::prefill_layerwise copies each layer there as it goes) before
  /// anything reads the sequence. Counted in offload_stats as moved to the host; chain
  /// hashes kept (prefix cache on), nothing enters the cache (no pool block holds them).
  /// All or nothing: Error(invalid_argument) without a host tier, for a sequence that is
  /// not empty or a partial block, Error(out_of_capacity) when the tier has fewer free
  /// blocks. Returns the bytes booked.
  int64_t book_host_prefix(SeqId seq, std::span<const int32_t> tokens);
  OffloadStats offload_stats() const { return offload_stats_; }

  // ---- SpecPV view copies (kvstore/README.md, "Partial views of host-tier sequences") --

  /// Gives `seq` pool copies of host-tier blocks for its partial views, so a partial
  /// round reads them from the pool and moves no K/V over PCIe: for every layer l the
  /// j-th entry of host_indices[l] (block-table indices < host_blocks(seq), ascending,
  /// unique) is copied - that layer's K and V only - into layer l of the j-th copy
  /// block. Takes max_l |host_indices[l]| pool blocks, held apart from the block table
  /// until the next set_view_copies, a truncate below the host boundary or release.
  /// Replaces the previous copies. Error(invalid_argument) for a bad index (nothing
  /// changes); Error(out_of_capacity) when the pool has fewer free blocks and
  /// Error(unsupported) for a device copier without layer_to_pool: the previous copies
  /// are dropped all the same and view_copies_refused(seq) says so until the next call.
  /// Returns the bytes copied.
  int64_t set_view_copies(SeqId seq, std::span<const std::vector<int32_t>> host_indices);
  /// The pool block holding layer `layer` of host block index `index` of `seq`, or -1.
  int32_t view_copy(SeqId seq, int32_t layer, int32_t index) const;
  int32_t view_copy_blocks(SeqId seq) const;     ///< pool blocks the copies hold
  bool view_copies_refused(SeqId seq) const;     ///< the last set_view_copies ran out of pool
  void drop_view_copies(SeqId seq);

  KvTensors& tensors() { return tensors_; }
  const KvTensors& tensors() const { return tensors_; }
  const PrefixCache& prefix_cache() const { return prefix_cache_; }
  const BlockPool& pool() const { return pool_; }

  /// Verifies the invariants of kvstore/README.md (reference counts equal table
  /// holdings, cache and pool agree, writable positions lie in writable blocks, ...);
  /// throws Error(internal) naming the first one broken. O(blocks + committed tokens):
  /// meant for tests and debug checks, not the hot path.
  void check_invariants() const;

 private:
  struct Sequence;
  Sequence& at(SeqId seq);
  const Sequence& at(SeqId seq) const;
  int32_t take_block();  // allocate(), dropping an evicted block's hash from the cache
  void release_blocks_from(Sequence& seq, size_t first_index);
  void copy_to_host(int32_t pool_block, int32_t host_block);
  void copy_to_pool(int32_t host_block, int32_t pool_block);
  void release_view_copies(Sequence& seq);
  /// Chain hashes of the sequence's full committed blocks from block `first` on; with
  /// `cache`, each enters the prefix cache (its pool block hashed) unless mapped already.
  void hash_full_blocks(Sequence& seq, size_t first, bool cache);

  KvStoreConfig config_;
  BlockPool pool_;
  PrefixCache prefix_cache_;
  KvTensors tensors_;
  BlockCopier copier_;  // host_tensors off: copy-on-write goes through it
  std::unique_ptr<HostKvTier> host_;  // the host tier, if offload is on
  HostTierCopier host_copier_;        // host_tensors off: pool <-> host copies go through it
  OffloadStats offload_stats_;
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> sequences_;  // live ones only
  SeqId next_id_ = 0;
};

}  // namespace specpipe
