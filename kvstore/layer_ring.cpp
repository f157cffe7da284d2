#include "kvstore/layer_ring.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace specpipe {

LayerRing::LayerRing(int32_t slots, std::unique_ptr<CopyStream> stream) : stream_(std::move(stream)) {
  if (slots < 2)
    fail(ErrorCode::invalid_argument,
         "layer ring: ring_slots must be >= 2, got {} (one slot computes while the next loads)", slots);
  if (!stream_) stream_ = std::make_unique<ThreadCopyStream>();
  slots_.resize(static_cast<size_t>(slots));
}

LayerRing::~LayerRing() { abandon(); }

void LayerRing::begin(const HostKvTier& tier, std::span<const std::span<const int32_t>> host_tables,
                      int32_t num_layers, WriteBack write_back, bool fence_writes) {
  if (active_) fail(ErrorCode::invalid_argument, "layer ring: begin while a forward is still open");
  if (num_layers < 1 || num_layers > tier.layout().num_layers)
    fail(ErrorCode::invalid_argument, "layer ring: {} layers, the host tier holds {}", num_layers,
         tier.layout().num_layers);
  tables_.clear();
  offsets_.clear();
  int64_t tokens = 0;
  for (const std::span<const int32_t> table : host_tables) {
    for (const int32_t block : table)
      if (block < 0 || block >= tier.total_blocks() || !tier.in_use(block))
        fail(ErrorCode::invalid_argument, "layer ring: host block {} is not held in the host tier", block);
    offsets_.push_back(static_cast<int32_t>(tokens));
    tables_.emplace_back(table.begin(), table.end());
    tokens += static_cast<int64_t>(table.size()) * tier.layout().block_size;
  }
  if (tokens > INT32_MAX) fail(ErrorCode::invalid_argument, "layer ring: {} host tokens in one forward", tokens);
  tokens_ = static_cast<int32_t>(tokens);
  const auto floats = static_cast<size_t>(tokens * tier.slot_stride());
  for (Slot& s : slots_) {
    // Grown, never shrunk; the copy side is idle here (the last forward finished).
    if (s.k.size() < floats) {
      s.k.resize(floats);
      s.v.resize(floats);
    }
    s.layer = -1;
  }
  tier_ = &tier;
  write_back_ = std::move(write_back);
  fence_writes_ = fence_writes && write_back_;
  num_layers_ = num_layers;
  active_ = true;
  forwards_.fetch_add(1, std::memory_order_relaxed);
  for (int32_t layer = 0; layer < std::min(slots(), num_layers); ++layer) queue_load(layer);
}

void LayerRing::queue_load(int32_t layer) {
  Slot& slot = slots_[static_cast<size_t>(layer % slots())];
  slot.layer = layer;
  // The job keeps its own copy of the write-back (finish clears the ring's).
  slot.loaded = stream_->enqueue([this, layer, &slot, write_back = write_back_] {
    // Blocks that left the pool first: the load below may read them.
    if (write_back) write_back(layer);
    // The gather: each sequence's host blocks of this layer, in position order, into
    // its dense run of the slot.
    const HostKvTier& tier = *tier_;
    const int64_t block_floats = tier.block_floats();
    const size_t bytes = static_cast<size_t>(block_floats) * sizeof(float);
    const float* k = tier.k(layer);
    const float* v = tier.v(layer);
    int64_t copied = 0;
    for (size_t i = 0; i < tables_.size(); ++i) {
      float* dst_k = slot.k.data() + int64_t{offsets_[i]} * tier.slot_stride();
      float* dst_v = slot.v.data() + int64_t{offsets_[i]} * tier.slot_stride();
      for (const int32_t block : tables_[i]) {
        std::memcpy(dst_k, k + block * block_floats, bytes);
        std::memcpy(dst_v, v + block * block_floats, bytes);
        dst_k += block_floats;
        dst_v += block_floats;
        copied += 2 * static_cast<int64_t>(bytes);
      }
    }
    loads_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(copied, std::memory_order_relaxed);
  });
}

RingSlot LayerRing::acquire(int32_t layer) {
  if (!active_ || layer < 0 || layer >= num_layers_)
    fail(ErrorCode::invalid_argument, "layer ring: acquire of layer {} outside an open forward of {} layers", layer,
         num_layers_);
  Slot& slot = slots_[static_cast<size_t>(layer % slots())];
  if (slot.layer != layer)
    fail(ErrorCode::internal, "layer ring: slot {} holds layer {}, not {} (acquire out of order?)", layer % slots(),
         slot.layer, layer);
  const auto start = std::chrono::steady_clock::now();
  if (stream_->wait(slot.loaded)) {
    stalls_.fetch_add(1, std::memory_order_relaxed);
    const auto waited = std::chrono::steady_clock::now() - start;
    stall_us_.fetch_add(std::chrono::duration_cast<std::chrono::microseconds>(waited).count(),
                        std::memory_order_relaxed);
  }
  return {slot.k.data(), slot.v.data()};
}

bool LayerRing::before_write(int32_t layer) {
  if (!active_ || !fence_writes_) return false;
  const Slot& slot = slots_[static_cast<size_t>(layer % slots())];
  if (slot.layer != layer)
    fail(ErrorCode::internal, "layer ring: before_write of layer {}, slot {} holds layer {}", layer, layer % slots(),
         slot.layer);
  // Layer l's job (its write-back, then its load) was queued at begin or at release(l - N).
  return stream_->wait(slot.loaded);
}

void LayerRing::release(int32_t layer) {
  if (!active_) fail(ErrorCode::invalid_argument, "layer ring: release of layer {} outside a forward", layer);
  // The slot is free now (the compute side has finished reading it), and only now may
  // the next layer's copy into it start: in that order.
  if (layer + slots() < num_layers_) queue_load(layer + slots());
}

void LayerRing::finish() {
  active_ = false;
  write_back_ = {};  // every job holds its own copy
  stream_->synchronize();
}

void LayerRing::abandon() noexcept {
  active_ = false;
  write_back_ = {};
  try {
    stream_->synchronize();
  } catch (...) {
  }
}

RingStats LayerRing::stats() const {
  RingStats s;
  s.forwards = forwards_.load(std::memory_order_relaxed);
  s.loads = loads_.load(std::memory_order_relaxed);
  s.bytes_loaded = bytes_.load(std::memory_order_relaxed);
  s.stalls = stalls_.load(std::memory_order_relaxed);
  s.stall_ms = static_cast<double>(stall_us_.load(std::memory_order_relaxed)) / 1000.0;
  return s;
}

}  // namespace specpipe
