#include "kvstore/kv_tensors.h"

#include <algorithm>

#include "core/error.h"

namespace specpipe {
namespace {

int32_t positive(int32_t value, const char* name) {
  if (value < 1)
    fail(ErrorCode::invalid_argument, "KV tensors: {} must be >= 1, got {}", name, value);
  return value;
}

}  // namespace

KvTensors::KvTensors(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t kv_heads,
                     int32_t head_dim, bool allocate)
    : num_blocks_(positive(num_blocks, "num_blocks")),
      block_size_(positive(block_size, "block_size")),
      slot_stride_(int64_t{positive(kv_heads, "kv_heads")} * positive(head_dim, "head_dim")) {
  positive(num_layers, "num_layers");
  // slots and slot_stride_ are products of two int32 values and fit in int64; only
  // their product can overflow.
  const int64_t slots = int64_t{num_blocks} * block_size;
  if (slots > INT64_MAX / slot_stride_)
    fail(ErrorCode::invalid_argument, "KV tensors: {} slots of {} floats overflow", slots,
         slot_stride_);
  const auto floats = allocate ? static_cast<size_t>(slots * slot_stride_) : 0;
  k_.assign(static_cast<size_t>(num_layers), std::vector<float>(floats, 0.0f));
  v_.assign(static_cast<size_t>(num_layers), std::vector<float>(floats, 0.0f));
}

void KvTensors::copy_block(int32_t src, int32_t dst) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_)
    fail(ErrorCode::invalid_argument, "copy_block {} -> {}: blocks must be in [0, {})", src, dst,
         num_blocks_);
  if (src == dst) return;
  if (!holds_pool())
    fail(ErrorCode::internal, "copy_block {} -> {}: this store keeps no host tensors (its pool is on a device)", src,
         dst);
  const int64_t block_floats = int64_t{block_size_} * slot_stride_;
  for (auto* layers : {&k_, &v_}) {
    for (std::vector<float>& layer : *layers) {
      std::copy_n(layer.data() + src * block_floats, block_floats,
                  layer.data() + dst * block_floats);
    }
  }
}

size_t KvTensors::bytes() const {
  const size_t per_layer = k_.empty() ? 0 : k_.front().size() * sizeof(float);
  return 2 * k_.size() * per_layer;
}

}  // namespace specpipe
