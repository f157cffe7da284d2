#include "model/cuda/device_ring.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace specpipe::cuda {

namespace {

int32_t checked_slots(int32_t slots) {
  if (slots < 2)
    fail(ErrorCode::invalid_argument,
         "layer ring: ring_slots must be >= 2, got {} (one slot computes while the next loads)", slots);
  return slots;
}

}  // namespace

DeviceLayerRing::DeviceLayerRing(int32_t slots, cudaStream_t compute, bool overlap)
    : slots_(checked_slots(slots)),
      compute_(compute),
      copies_(compute, overlap),
      loaded_(static_cast<size_t>(slots_), 0),
      slot_layer_(static_cast<size_t>(slots_), -1) {}

DeviceLayerRing::~DeviceLayerRing() { abandon(); }

void DeviceLayerRing::begin(const HostKvTier& tier, std::span<const int32_t> host_blocks, int32_t num_layers,
                            WriteBack write_back, bool fence_writes) {
  if (active_) fail(ErrorCode::invalid_argument, "layer ring: begin while a forward is still open");
  if (num_layers < 1 || num_layers > tier.layout().num_layers)
    fail(ErrorCode::invalid_argument, "layer ring: {} layers, the host tier holds {}", num_layers,
         tier.layout().num_layers);
  runs_.clear();
  for (size_t i = 0; i < host_blocks.size(); ++i) {
    const int32_t block = host_blocks[i];
    if (block < 0 || block >= tier.total_blocks() || !tier.in_use(block))
      fail(ErrorCode::invalid_argument, "layer ring: host block {} is not held in the host tier", block);
    // Host blocks are handed out in order from a fresh tier: runs are long, copies few.
    if (!runs_.empty() && runs_.back().host_first + runs_.back().blocks == block) ++runs_.back().blocks;
    else runs_.push_back({static_cast<int32_t>(i), block, 1});
  }
  const int64_t need = static_cast<int64_t>(host_blocks.size()) * tier.block_tensor_bytes();
  if (need > slot_bytes_) {
    // Grown by half again, so a sequence growing into the host tier a block at a time
    // does not reallocate each forward; the old slots may still be read: wait first.
    const int64_t bytes = std::max(need, slot_bytes_ + slot_bytes_ / 2);
    cuda_try(cudaStreamSynchronize(compute_), "layer ring: wait before growing");
    copies_.synchronize();
    memory_.reset();
    slot_bytes_ = 0;
    memory_.allocate(static_cast<size_t>(2 * int64_t{slots_} * bytes));
    slot_bytes_ = bytes;
  }
  std::fill(slot_layer_.begin(), slot_layer_.end(), -1);
  tier_ = &tier;
  write_back_ = std::move(write_back);
  fence_writes_ = fence_writes && write_back_;
  num_layers_ = num_layers;
  bytes_per_layer_ = 2 * need;
  active_ = true;
  ++stats_.forwards;
  for (int32_t layer = 0; layer < std::min(slots_, num_layers); ++layer) queue_load(layer);
}

void DeviceLayerRing::queue_load(int32_t layer) {
  const int32_t slot = layer % slots_;
  slot_layer_[static_cast<size_t>(slot)] = layer;
  loaded_[static_cast<size_t>(slot)] = copies_.enqueue([this, layer, slot] {
    const int64_t block_bytes = tier_->block_tensor_bytes();
    const cudaStream_t stream = copies_.stream();
    // Blocks that left the pool first (their load below may read them).
    if (write_back_) write_back_(layer, stream);
    const auto* k = static_cast<const unsigned char*>(tier_->k_data(layer));
    const auto* v = static_cast<const unsigned char*>(tier_->v_data(layer));
    for (const Run& r : runs_) {
      const auto bytes = static_cast<size_t>(r.blocks * block_bytes);
      cuda_try(cudaMemcpyAsync(slot_k(slot) + r.ring_first * block_bytes, k + r.host_first * block_bytes, bytes,
                               cudaMemcpyHostToDevice, stream),
               "layer ring: K load");
      cuda_try(cudaMemcpyAsync(slot_v(slot) + r.ring_first * block_bytes, v + r.host_first * block_bytes, bytes,
                               cudaMemcpyHostToDevice, stream),
               "layer ring: V load");
    }
  });
  ++stats_.loads;
  stats_.bytes_loaded += bytes_per_layer_;
}

DeviceRingSlot DeviceLayerRing::acquire(int32_t layer) {
  if (!active_ || layer < 0 || layer >= num_layers_)
    fail(ErrorCode::invalid_argument, "layer ring: acquire of layer {} outside an open forward of {} layers", layer,
         num_layers_);
  const int32_t slot = layer % slots_;
  if (slot_layer_[static_cast<size_t>(slot)] != layer)
    fail(ErrorCode::internal, "layer ring: slot {} holds layer {}, not {} (acquire out of order?)", slot,
         slot_layer_[static_cast<size_t>(slot)], layer);
  if (copies_.wait(loaded_[static_cast<size_t>(slot)])) ++stats_.stalls;
  return {slot_k(slot), slot_v(slot)};
}

void DeviceLayerRing::before_write(int32_t layer) {
  if (!active_ || !fence_writes_) return;
  const int32_t slot = layer % slots_;
  if (slot_layer_[static_cast<size_t>(slot)] != layer)
    fail(ErrorCode::internal, "layer ring: before_write of layer {}, slot {} holds layer {}", layer, slot,
         slot_layer_[static_cast<size_t>(slot)]);
  // Layer l's job (write-back, then load) was enqueued at begin or at release(l - N).
  copies_.wait(loaded_[static_cast<size_t>(slot)]);
}

void DeviceLayerRing::release(int32_t layer) {
  if (!active_) fail(ErrorCode::invalid_argument, "layer ring: release of layer {} outside a forward", layer);
  if (layer + slots_ < num_layers_) queue_load(layer + slots_);
}

void DeviceLayerRing::finish() {
  active_ = false;
  write_back_ = {};  // its copies are enqueued: the jobs ran on this thread
  // The compute stream waited for every load it read; a load's error (an enqueue that
  // failed) surfaces here.
  copies_.wait(0);
}

void DeviceLayerRing::abandon() noexcept {
  active_ = false;
  write_back_ = {};
  try {
    copies_.synchronize();
  } catch (...) {
  }
}

}  // namespace specpipe::cuda
