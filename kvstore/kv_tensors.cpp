#include "kvstore/kv_tensors.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"

namespace specpipe {
namespace {

int32_t positive(int32_t value, const char* name) {
  if (value < 1)
    fail(ErrorCode::invalid_argument, "KV tensors: {} must be >= 1, got {}", name, value);
  return value;
}

/// A decode step reads each key's head_dim floats out of a slot of every kv head
/// (4 KiB for 8 heads of 128): on 4 KiB pages every key of a head is a page of its own,
/// and the CPU's attention spent more time on page walks than on the bytes. A pool of
/// 2 MiB or more is therefore rounded up to whole 2 MiB pages and offered to transparent
/// huge pages (core/huge_pages.h); a smaller one stays on ordinary pages. Zero-filled.
float* allocate_pool(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t rounded = bytes >= kHugePage ? (bytes + kHugePage - 1) / kHugePage * kHugePage : bytes;
  void* p = allocate_huge_page_backed(rounded);
  if (!p) fail(ErrorCode::out_of_capacity, "KV tensors: cannot allocate {} bytes", bytes);
  std::memset(p, 0, rounded);
  return static_cast<float*>(p);
}

}  // namespace

KvTensors::KvTensors(int32_t num_layers, int32_t num_blocks, int32_t block_size, int32_t kv_heads,
                     int32_t head_dim, bool allocate)
    : num_layers_(positive(num_layers, "num_layers")),
      num_blocks_(positive(num_blocks, "num_blocks")),
      block_size_(positive(block_size, "block_size")),
      slot_stride_(int64_t{positive(kv_heads, "kv_heads")} * positive(head_dim, "head_dim")) {
  // slots and slot_stride_ are products of two int32 values and fit in int64; only
  // their product (and the arena, 2 * num_layers of them) can overflow.
  const int64_t slots = int64_t{num_blocks} * block_size;
  if (slots > INT64_MAX / slot_stride_ / (2 * int64_t{num_layers}) / int64_t{sizeof(float)})
    fail(ErrorCode::invalid_argument, "KV tensors: {} slots of {} floats in {} layers overflow", slots,
         slot_stride_, num_layers);
  if (!allocate) return;
  layer_floats_ = static_cast<size_t>(slots * slot_stride_);
  data_ = {allocate_pool(2 * static_cast<size_t>(num_layers_) * layer_floats_ * sizeof(float)),
           [](float* p) { std::free(p); }};
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
  for (int32_t t = 0; t < 2 * num_layers_; ++t) {
    float* layer = layer_data(t);
    std::copy_n(layer + src * block_floats, block_floats, layer + dst * block_floats);
  }
}

size_t KvTensors::bytes() const { return 2 * static_cast<size_t>(num_layers_) * layer_floats_ * sizeof(float); }

}  // namespace specpipe
