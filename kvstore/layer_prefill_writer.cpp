#include "kvstore/layer_prefill_writer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace specpipe {

LayerPrefillWriter::LayerPrefillWriter(KvStore& store, SeqId seq, std::shared_ptr<CopyStream> copies)
    : store_(store), seq_(seq), copies_(std::move(copies)) {
  const std::span<const int32_t> host = store.host_block_table(seq);
  host_blocks_.assign(host.begin(), host.end());
  host_tokens_ = static_cast<int32_t>(host.size()) * store.config().block_size;
  if (!store.tensors().holds_pool())
    fail(ErrorCode::invalid_argument, "layer-wise prefill writer: the store keeps no host tensors");
  if (host_tokens_ > 0 && store.host_tier()->layout().dtype != DType::f32)
    fail(ErrorCode::invalid_argument, "layer-wise prefill writer: the CPU host tier must hold FP32 K/V");
  const auto floats = static_cast<size_t>(2 * int64_t{host_tokens_} * store.tensors().slot_stride());
  for (std::vector<float>& s : slots_) s.resize(floats);
}

LayerPrefillWriter::~LayerPrefillWriter() {
  try {
    copies_->synchronize();
  } catch (...) {  // finish() reports errors; here only the memory matters
  }
}

void LayerPrefillWriter::write_layer(int32_t layer, std::span<const WindowKvRows> windows) {
  if (windows.size() != 1 || windows[0].seq != seq_ || windows[0].start_pos != 0 || windows[0].on_device)
    fail(ErrorCode::invalid_argument, "layer-wise prefill writer: layer {} rows are not sequence {}'s prompt", layer,
         seq_);
  const WindowKvRows& w = windows[0];
  const int64_t stride = store_.tensors().slot_stride();
  const int32_t host_rows = std::min(host_tokens_, w.n);
  if (host_rows > 0) {
    // Layer l - 2's scatter has read this slot before the rows of layer l overwrite it.
    const int32_t slot = layer % 2;
    copies_->wait(copied_[slot]);
    float* k = slots_[slot].data();
    float* v = k + int64_t{host_tokens_} * stride;
    const size_t row_bytes = static_cast<size_t>(stride) * sizeof(float);
    for (int32_t i = 0; i < host_rows; ++i) {
      std::memcpy(k + i * stride, w.k + i * w.ld, row_bytes);
      std::memcpy(v + i * stride, w.v + i * w.ld, row_bytes);
    }
    // Host blocks are full: block j of the slot is B consecutive rows of host block j.
    HostKvTier& tier = *store_.host_tier();
    const int32_t B = store_.config().block_size;
    copied_[slot] = copies_->enqueue([this, &tier, layer, k, v, stride, B] {
      const size_t block_bytes = static_cast<size_t>(B * stride) * sizeof(float);
      for (size_t j = 0; j < host_blocks_.size(); ++j) {
        const int64_t at = int64_t{host_blocks_[j]} * B * stride;
        std::memcpy(tier.k(layer) + at, k + static_cast<int64_t>(j) * B * stride, block_bytes);
        std::memcpy(tier.v(layer) + at, v + static_cast<int64_t>(j) * B * stride, block_bytes);
      }
    });
  }
  if (w.n > host_rows)
    write_rows_to_pool(store_, layer, seq_, host_rows, w.n - host_rows, w.k + host_rows * w.ld,
                       w.v + host_rows * w.ld, w.ld);
}

void LayerPrefillWriter::finish() { copies_->synchronize(); }

}  // namespace specpipe
