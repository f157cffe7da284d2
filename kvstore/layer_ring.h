#pragma once
/// The layer-wise ring buffer (ARCHITECTURE.md section 5, "Host tier"): N layer slots
/// through which a forward reads the host-resident K/V of its sequences. While the
/// forward computes layer l from slot l mod N, the copy stream fills the other slots
/// with the next layers; once the forward releases slot l mod N, the load of layer
/// l + N into it is queued behind that release (an event, never a global barrier).
///
///   begin(tier, sequences, L)   queue the loads of layers [0, min(N, L))
///   for l in [0, L):
///     acquire(l)                wait for layer l's load (a stall if it is not done)
///     ... attention reads the slot: sequence i's host tokens at offset(i) ...
///     release(l)                slot free: queue the load of layer l + N
///   finish()                    every load done; a load's error is rethrown
///
/// A slot holds one layer's K and V of every sequence of the batch, each sequence's
/// host blocks gathered in position order into one dense run of rows
/// [tokens, kv_heads, head_dim] (float32): the dense segment cpu::PagedPrefix reads.
/// The ring works against CopyStream only; on the CPU backend the copies run on a copy
/// thread (ThreadCopyStream), a CUDA backend gives its copy stream and device slots.
/// One forward at a time; the host tier must not change between begin and finish.
///
/// Write-back (kvstore/write_back.h): begin may also take the blocks that left the pool
/// since the last forward; layer l's copy of them to the host tier runs in the copy job
/// of layer l, ahead of its load. A forward that writes into one of those pool blocks
/// calls before_write(l) before writing layer l's K/V.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvstore/copy_stream.h"
#include "kvstore/host_tier.h"

namespace specpipe {

/// A loaded slot: K and V rows [tokens, kv_heads, head_dim] of one layer.
struct RingSlot {
  const float* k;
  const float* v;
};

/// What the ring did, for statistics (ARCHITECTURE.md section 10).
struct RingStats {
  int64_t forwards = 0;      ///< forwards that streamed host K/V
  int64_t loads = 0;         ///< layer loads
  int64_t bytes_loaded = 0;  ///< host tier bytes copied into slots
  int64_t stalls = 0;        ///< acquires that had to wait for their load
  double stall_ms = 0;       ///< time the compute side waited in those
};

class LayerRing {
 public:
  /// `slots` >= 2 (one computes while the next loads): else Error(invalid_argument)
  /// "layer ring: ring_slots must be >= 2, got 1". `stream`: where the copies run
  /// (default: a ThreadCopyStream of its own).
  explicit LayerRing(int32_t slots, std::unique_ptr<CopyStream> stream = nullptr);
  ~LayerRing();  ///< waits for queued copies
  LayerRing(const LayerRing&) = delete;
  LayerRing& operator=(const LayerRing&) = delete;

  int32_t slots() const { return static_cast<int32_t>(slots_.size()); }

  /// Starts a forward over layers [0, num_layers): sequence i's host tier blocks are
  /// host_tables[i] (position order; may be empty). Sizes the slots and queues the
  /// first loads. Throws Error(invalid_argument) while a forward is open, for a layer
  /// count outside the tier's or a block the tier does not hold.
  /// `write_back` (may be empty): run on the copy side in layer l's job before its load,
  /// for l in [0, num_layers): copies layer l of the blocks leaving the pool to the tier.
  /// fence_writes: the forward writes into some of those pool blocks (before_write waits).
  using WriteBack = std::function<void(int32_t layer)>;
  void begin(const HostKvTier& tier, std::span<const std::span<const int32_t>> host_tables, int32_t num_layers,
             WriteBack write_back = {}, bool fence_writes = false);
  bool active() const { return active_; }
  /// First row of sequence i in a slot, and the rows of all sequences.
  int32_t offset(size_t i) const { return offsets_[i]; }
  int32_t tokens() const { return tokens_; }

  /// Waits until layer `layer` is loaded (layers in ascending order); returns its slot.
  RingSlot acquire(int32_t layer);
  /// Before the forward writes layer `layer`'s K/V rows: with fence_writes, waits until
  /// that layer's write-back has read the pool blocks (layers in ascending order, each
  /// before its acquire). Returns whether it had to wait.
  bool before_write(int32_t layer);
  /// The compute side is done with layer `layer`'s slot: queues layer + N into it.
  void release(int32_t layer);
  /// Ends the forward: waits for every queued load, rethrows a load's error.
  void finish();
  /// Ends a forward that failed half way: waits for the copies, drops their errors.
  void abandon() noexcept;

  RingStats stats() const;  ///< may be called from any thread

 private:
  struct Slot {
    std::vector<float> k, v;
    int32_t layer = -1;  // the layer loaded or loading into it
    CopyStream::Ticket loaded = 0;
  };
  void queue_load(int32_t layer);

  std::unique_ptr<CopyStream> stream_;
  std::vector<Slot> slots_;
  const HostKvTier* tier_ = nullptr;
  WriteBack write_back_;
  bool fence_writes_ = false;
  std::vector<std::vector<int32_t>> tables_;  // copies: the loads read them on the copy side
  std::vector<int32_t> offsets_;
  int32_t tokens_ = 0;
  int32_t num_layers_ = 0;
  bool active_ = false;
  std::atomic<int64_t> forwards_{0}, loads_{0}, bytes_{0}, stalls_{0}, stall_us_{0};
};

}  // namespace specpipe
