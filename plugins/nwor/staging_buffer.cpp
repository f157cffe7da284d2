#include "staging_buffer.h"

#include <algorithm>
#include <limits>
#include <string>

#include "nwor_error.h"

namespace nwor {
namespace {

/// bytes for [layers, rows, kv_dim] float32, or throws when it does not fit a size_t.
size_t buffer_bytes(int32_t layers, int64_t rows, int64_t kv_dim) {
  size_t bytes = sizeof(float);
  for (const int64_t factor : {static_cast<int64_t>(layers), rows, kv_dim})
    if (factor <= 0 || __builtin_mul_overflow(bytes, static_cast<size_t>(factor), &bytes))
      throw HookError(SPECPIPE_ERR_CAPACITY, "staging buffer of " + std::to_string(layers) + " x " +
                                                 std::to_string(rows) + " x " + std::to_string(kv_dim) +
                                                 " floats does not fit in memory");
  return bytes;
}

}  // namespace

DeviceAllocation::DeviceAllocation(const specpipe_host_api& host, size_t bytes) : host_(host) {
  data_ = static_cast<char*>(host_.alloc_device(host_.host, bytes));
  if (!data_)
    throw HookError(SPECPIPE_ERR_CAPACITY,
                    "the host could not allocate " + std::to_string(bytes) + " bytes for the staging buffer");
}

DeviceAllocation::~DeviceAllocation() {
  if (data_) host_.free_device(host_.host, data_);
}

StagingBuffer::StagingBuffer(const specpipe_host_api& host, const specpipe_model_desc& model, int64_t max_rows)
    : host_(host),
      device_(model.device),
      num_layers_(model.num_layers),
      kv_dim_(model.kv_dim),
      max_rows_(max_rows),
      k_(host, buffer_bytes(model.num_layers, max_rows, model.kv_dim)),
      v_(host, buffer_bytes(model.num_layers, max_rows, model.kv_dim)),
      slots_(static_cast<size_t>(max_rows), -1),
      token_mask_(static_cast<size_t>(max_rows), 0),
      layer_mask_(static_cast<size_t>(model.num_layers), 0) {}

void StagingBuffer::load_round(const specpipe_window* windows, int32_t count) {
  clear();
  windows_.reserve(static_cast<size_t>(count));
  int64_t row = 0;
  for (int32_t i = 0; i < count; ++i) {
    const specpipe_window& w = windows[i];
    windows_.push_back({w.sequence, w.n, row});
    std::copy(w.slots, w.slots + w.n, slots_.begin() + row);
    row += w.n;
  }
  total_rows_ = row;
}

void StagingBuffer::clear() {
  std::fill(token_mask_.begin(), token_mask_.begin() + total_rows_, 0);
  std::fill(slots_.begin(), slots_.begin() + total_rows_, -1);
  std::fill(layer_mask_.begin(), layer_mask_.end(), 0);
  windows_.clear();
  total_rows_ = 0;
}

int32_t StagingBuffer::first_unstaged_layer() const {
  const auto it = std::find(layer_mask_.begin(), layer_mask_.end(), 0);
  return static_cast<int32_t>(it - layer_mask_.begin());
}

specpipe_status StagingBuffer::stage_layer(int32_t layer, const void* k_src, const void* v_src,
                                           specpipe_stream stream, int64_t& newly_staged_tokens) {
  newly_staged_tokens = 0;
  // The round's rows are contiguous in window order both in the host's tensor and here
  // (row indices were fixed at load_round), so one copy per tensor moves a whole layer.
  const size_t bytes = static_cast<size_t>(total_rows_) * row_bytes();
  const size_t offset = static_cast<size_t>(layer) * layer_bytes();
  if (bytes > 0) {
    specpipe_status status = host_.copy(host_.host, k_.data() + offset, k_src, bytes, stream);
    if (status == SPECPIPE_OK) status = host_.copy(host_.host, v_.data() + offset, v_src, bytes, stream);
    if (status != SPECPIPE_OK) return status;
  }
  layer_mask_[static_cast<size_t>(layer)] = 1;
  for (int64_t row = 0; row < total_rows_; ++row) {
    uint8_t& staged = token_mask_[static_cast<size_t>(row)];
    if (!staged) ++newly_staged_tokens;
    staged = 1;
  }
  return SPECPIPE_OK;
}

DLTensor StagingBuffer::view(char* base, int32_t layer, int64_t first_row, int64_t rows, int64_t shape[2]) const {
  shape[0] = rows;
  shape[1] = kv_dim_;
  DLTensor t{};
  // The offset goes into the data pointer, byte_offset stays 0: a host that ignores
  // byte_offset (common in practice) still reads the right rows.
  t.data = base + static_cast<size_t>(layer) * layer_bytes() + static_cast<size_t>(first_row) * row_bytes();
  t.device = device_;
  t.ndim = 2;
  t.dtype = DLDataType{static_cast<uint8_t>(kDLFloat), 32, 1};
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  return t;
}

DLTensor StagingBuffer::k_rows(int32_t layer, int64_t first_row, int64_t rows, int64_t shape[2]) const {
  return view(k_.data(), layer, first_row, rows, shape);
}

DLTensor StagingBuffer::v_rows(int32_t layer, int64_t first_row, int64_t rows, int64_t shape[2]) const {
  return view(v_.data(), layer, first_row, rows, shape);
}

}  // namespace nwor
