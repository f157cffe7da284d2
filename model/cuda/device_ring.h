#pragma once
/// The layer ring on a CUDA device (issue 16 item 4; kvstore/layer_ring.h is the CPU
/// twin): N layer slots in device memory through which a forward's attention reads the
/// host-tier K/V of its sequences. Each slot is laid out like the pool
/// ([ring blocks, block_size, kv_heads, head_dim] of the tier's dtype, K and V: FP32 or
/// BF16, copied as bytes), ring block i
/// holding host tier block host_blocks[i] (forward_plan.h's ring_host_blocks), so the
/// attention kernels read it through the block table (ring_table_entry) with the same
/// arithmetic as pool blocks: the same bits as with everything on the GPU.
///
///   begin(tier, host_blocks, L)  queue the loads of layers [0, min(N, L))
///   per layer l:
///     acquire(l)   the compute stream waits for layer l's load (an event; no host wait)
///     ... enqueue the attention reading slot l mod N ...
///     release(l)   queue the load of layer l + N into that slot, behind an event
///                  recorded on the compute stream after the attention
///   finish()
///
/// The copies run on the copy stream (cuda_copy_stream.h), one cudaMemcpyAsync per run
/// of consecutive host blocks; with overlap off on the compute stream itself, in line
/// (the seed's synchronous way). The host tier must be pinned for the copies to be
/// asynchronous, and must not change between begin and the forward's end. One forward at
/// a time, on the compute stream given.
///
/// Write-back (kvstore/write_back.h, the CPU ring's twin): begin may take a function
/// that enqueues layer l's copies of the blocks that left the pool to the host tier; it
/// runs in layer l's job on the copy stream, ahead of that layer's load (so the load may
/// read them), ordered after the compute work issued before the job (the forward that
/// wrote them). A forward writing into one of those pool blocks calls before_write(l)
/// before its K/V scatter of layer l: the compute stream waits for that job (an event).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvstore/host_tier.h"
#include "kvstore/layer_ring.h"
#include "model/cuda/cuda_copy_stream.h"
#include "model/cuda/device_memory.h"

namespace specpipe::cuda {

/// A slot's K and V on the device, elements of the host tier's dtype.
struct DeviceRingSlot {
  const void* k;
  const void* v;
};

class DeviceLayerRing {
 public:
  /// `slots` >= 2, else Error(invalid_argument) (as LayerRing's). Memory comes at begin().
  DeviceLayerRing(int32_t slots, cudaStream_t compute, bool overlap);
  ~DeviceLayerRing();
  DeviceLayerRing(const DeviceLayerRing&) = delete;
  DeviceLayerRing& operator=(const DeviceLayerRing&) = delete;

  int32_t slots() const { return slots_; }
  bool overlap() const { return copies_.overlap(); }
  /// Device bytes of the slots (grown, never shrunk).
  size_t device_bytes() const { return memory_.bytes(); }

  /// Starts a forward of `num_layers` layers whose ring blocks hold `host_blocks` of
  /// `tier`. Grows the slots when they are short (after waiting for the device: the old
  /// ones may still be read).
  /// Throws Error(invalid_argument) while a forward is open or for a block the tier does
  /// not hold, Error(internal) for a CUDA failure (nothing queued then).
  /// write_back (may be empty): enqueues layer l's write-back copies on the stream it is
  /// given; fence_writes: the forward writes into some of the blocks written back.
  using WriteBack = std::function<void(int32_t layer, cudaStream_t stream)>;
  void begin(const HostKvTier& tier, std::span<const int32_t> host_blocks, int32_t num_layers,
             WriteBack write_back = {}, bool fence_writes = false);
  bool active() const { return active_; }
  /// The compute stream waits for layer `layer`'s load (layers in ascending order); its
  /// slot's K and V.
  DeviceRingSlot acquire(int32_t layer);
  /// Before the K/V scatter of layer `layer` (ascending, before its acquire): with
  /// fence_writes the compute stream waits for that layer's write-back (no host wait).
  void before_write(int32_t layer);
  /// Every reader of layer `layer`'s slot is enqueued: its next load may follow them.
  void release(int32_t layer);
  /// Ends the forward (the compute stream has waited for every load it read).
  void finish();
  /// Ends a forward that failed half way: waits for the copies, drops their errors.
  void abandon() noexcept;

  /// loads / bytes_loaded / forwards as the CPU ring's; stalls: acquires whose load was
  /// not done when the host enqueued the wait (the host runs ahead of the device, so
  /// this counts loads the host got ahead of, not device time). stall_ms: 0 (a device
  /// wait is not seen by the host; the bench times it).
  RingStats stats() const { return stats_; }

 private:
  struct Run {  // consecutive host blocks into consecutive ring blocks
    int32_t ring_first, host_first, blocks;
  };
  void queue_load(int32_t layer);
  unsigned char* slot_k(int32_t slot) const { return memory_.as<unsigned char>() + 2 * int64_t{slot} * slot_bytes_; }
  unsigned char* slot_v(int32_t slot) const { return slot_k(slot) + slot_bytes_; }

  int32_t slots_;
  cudaStream_t compute_;
  CudaCopyStream copies_;
  DeviceBuffer memory_;       // [slots][K, V][capacity blocks, block_size, kv_heads, head_dim]
  int64_t slot_bytes_ = 0;    // one slot's K (or V)
  std::vector<CopyStream::Ticket> loaded_;  // per slot: its load's ticket
  std::vector<int32_t> slot_layer_;         // per slot: the layer loaded or loading
  const HostKvTier* tier_ = nullptr;
  WriteBack write_back_;
  bool fence_writes_ = false;
  std::vector<Run> runs_;
  int32_t num_layers_ = 0;
  int64_t bytes_per_layer_ = 0;
  bool active_ = false;
  RingStats stats_;
};

}  // namespace specpipe::cuda
