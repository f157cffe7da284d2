#pragma once
/// The CPU engine's write-back beside the compute (issue 16 items 3 and 6): a store with
/// host tensors hands each block that leaves the pool for the host tier to a copy thread
/// (the CPU's stand-in for a device copy stream) instead of copying it inside
/// KvStore::offload_prefix. The pool block is released at once, so two orders keep the
/// K/V exact (the seed's "async offload causes memory reuse bugs"):
///   - nothing writes a pool block before its queued copy has read it, and nothing reads
///     a host block before its queued copy has written it: the forward that follows a
///     move waits on the move's CopyFence (handed to it as data, in its work message),
///     and the store waits itself before it writes a pool block on the host
///     (copy-on-write, a block back from the host, SpecPV view copies:
///     HostTierCopier::before_pool_write);
///   - the copies run in the order queued, so a host block freed and handed out again
///     is written by its older copy first.
/// On a device the model's copier orders the same moves with events inside its forward
/// (kvstore/write_back.h); this file is the CPU's.
#include <atomic>
#include <cstdint>
#include <memory>

#include "kvstore/copy_stream.h"
#include "kvstore/host_tier.h"
#include "kvstore/kv_store.h"
#include "kvstore/kv_tensors.h"

namespace specpipe {

/// A copy event passed between actors as data: complete once `stream` has run every job
/// up to `ticket`. Holding one keeps the stream object alive, never the memory its jobs
/// copy (the store's copier drains the stream before the store goes, see
/// async_host_copier), so a fence may outlive the store: waiting on it then returns.
struct CopyFence {
  std::shared_ptr<CopyStream> stream;
  CopyStream::Ticket ticket = 0;
  bool empty() const { return !stream || ticket == 0; }
  /// Orders the caller after the copies (CPU: blocks). Returns whether it had to wait
  /// (a stall); rethrows a copy's error.
  bool wait() const { return empty() ? false : stream->wait(ticket); }
};

/// The queued moves of one store: the copy stream, the event after the latest move and
/// counters (read from any thread).
class WriteBackQueue {
 public:
  /// `stream`: where the copies run (ThreadCopyStream: beside the compute;
  /// InlineCopyStream: in line, `offload.overlap: false`).
  explicit WriteBackQueue(std::shared_ptr<CopyStream> stream);

  /// Queues the copy of pool block `pool_block` (every layer, K and V) into host block
  /// `host_block`. The caller keeps `pool` and `tier` alive until drain().
  void to_host(const KvTensors& pool, HostKvTier& tier, int32_t pool_block, int32_t host_block);
  /// The event after the latest queued copy (empty before the first).
  CopyFence fence() const { return {stream_, last_.load()}; }
  /// Blocks until every queued copy ran; counts a stall when one had not.
  void drain();

  int64_t blocks_queued() const { return blocks_.load(); }
  int64_t stalls() const { return stalls_.load(); }  ///< drains (store writes) that waited
  void count_stall() { stalls_.fetch_add(1); }

 private:
  std::shared_ptr<CopyStream> stream_;
  std::atomic<CopyStream::Ticket> last_{0};
  std::atomic<int64_t> blocks_{0}, stalls_{0};
};

/// The HostTierCopier of a store with host tensors whose moves to the host run on
/// `queue`: to_host queues the copy, before_pool_write drains the queue. Dropping the
/// copier (the store's end) drains it too, so no copy outlives the store's memory.
/// `pool` is the store's tensors, `tier` the tier it is about to attach.
HostTierCopier async_host_copier(std::shared_ptr<WriteBackQueue> queue, const KvTensors& pool, HostKvTier& tier);

}  // namespace specpipe
