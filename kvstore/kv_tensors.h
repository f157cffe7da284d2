#pragma once
/// Storage of the pool's K and V, CPU backend: per layer, K and V float32 tensors of
/// shape [num_blocks, block_size, kv_heads, head_dim] (token-major inside a block, so a
/// slot's heads are contiguous). Slot s of layer l starts at
/// k(l) + s * kv_heads * head_dim.
///
/// Zero-initialised at construction and never cleared afterwards: a slot holds whatever
/// was last written to it, so only positions a block table maps below a sequence's
/// length are meaningful. Not thread-safe: one owner (see kvstore/README.md).
#include <cstddef>
#include <cstdint>
#include <memory>

namespace specpipe {

class KvTensors {
 public:
  /// Every argument must be >= 1; throws Error(invalid_argument) naming the first that
  /// is not. allocate = false: the layout only, no storage (the pool lives on a device;
  /// k() and v() are then null).
  KvTensors(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t kv_heads,
            int32_t head_dim, bool allocate = true);

  float* k(int32_t layer) { return layer_data(layer); }
  float* v(int32_t layer) { return layer_data(num_layers_ + layer); }
  const float* k(int32_t layer) const { return layer_data(layer); }
  const float* v(int32_t layer) const { return layer_data(num_layers_ + layer); }
  int64_t slot_stride() const { return slot_stride_; }  ///< floats per slot = kv_heads * head_dim
  int32_t num_layers() const { return num_layers_; }
  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  bool holds_pool() const { return data_ != nullptr; }

  /// Copies block `src` to block `dst` in every layer (copy-on-write of shared blocks).
  void copy_block(int32_t src, int32_t dst);
  size_t bytes() const;  ///< K and V of every layer

 private:
  /// Tensor t of the arena: K of layer t for t < num_layers, else V of layer t - num_layers.
  float* layer_data(int32_t t) const { return data_ ? data_.get() + static_cast<size_t>(t) * layer_floats_ : nullptr; }

  int32_t num_layers_;
  int32_t num_blocks_;
  int32_t block_size_;
  int64_t slot_stride_;
  size_t layer_floats_ = 0;  ///< floats of one layer's K (or V)
  /// Every layer's K, then every layer's V, in one allocation on transparent huge pages
  /// where the kernel allows them (see kv_tensors.cpp); null without storage.
  std::unique_ptr<float[], void (*)(float*)> data_{nullptr, [](float*) {}};
};

}  // namespace specpipe
