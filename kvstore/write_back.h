#pragma once
/// Blocks leaving the pool for the host tier, copied beside the compute (issue 16 item 1;
/// kvstore/README.md, "Host tier"). KvStore::offload_prefix releases a pool block as soon
/// as its move to the host is queued; the copy itself runs later, on the layer ring's
/// copy stream, inside the next forward that streams host K/V: layer l's write-back is
/// part of the ring's job for layer l, ahead of that layer's load (which may read the
/// very blocks written back). Two orders keep it exact (the seed's "async offload causes
/// memory reuse bugs"):
///   - the copy reads the pool block after the forward that wrote it: the copy stream
///     starts a job only after the compute work issued before it (CopyStream::enqueue);
///   - the pool block is written again only after its copy: a forward that writes into
///     a block of the batch (the pool handed it out again) waits, per layer, for that
///     layer's job (LayerRing / DeviceLayerRing::before_write) before its K/V scatter.
/// A forward that streams no host K/V copies a pending batch in line, in front of itself.
///
/// This class only keeps the books of one batch (which pool blocks go to which host
/// blocks, as runs of consecutive blocks) and answers the conflict questions; the rings
/// run the copies. Not thread-safe (the model owning it serialises its forwards).
#include <cstdint>
#include <span>
#include <vector>

namespace specpipe {

class WriteBackBatch {
 public:
  /// Consecutive pool blocks into consecutive host blocks: one copy per layer and K/V.
  struct Run {
    int32_t pool_first = 0;
    int32_t host_first = 0;
    int32_t blocks = 0;
  };

  /// Queues the move of `pool_block` to `host_block` (extends the last run when both follow it).
  void add(int32_t pool_block, int32_t host_block);
  bool empty() const { return runs_.empty(); }
  void clear() { runs_.clear(); }
  std::span<const Run> runs() const { return runs_; }
  int64_t blocks() const;

  /// Whether the batch still has to read `pool_block`: nothing may write it before.
  bool reads_pool(int32_t pool_block) const;
  /// Whether the batch still has to write `host_block`: nothing may read it before.
  bool writes_host(int32_t host_block) const;
  /// Whether a forward writing K/V rows to `slots` (pool slots, block = slot / block_size)
  /// writes a block of the batch: it must then wait, layer by layer, for the write-back.
  bool writes_any(std::span<const int64_t> slots, int32_t block_size) const;

 private:
  std::vector<Run> runs_;
};

}  // namespace specpipe
