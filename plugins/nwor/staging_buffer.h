#pragma once
/// The NWOR staging area (ARCHITECTURE.md section 5): every layer's K and V rows of one
/// verify round, kept off the pool until the verdict is known.
///
/// Layout, allocated once on the pool's device with host->alloc_device:
///   k, v   [num_layers, max_rows, kv_dim] float32, row-major
///   slots  [max_rows] int64 (host memory): ONE slot per staged token, shared by every
///          layer, because a pool slot names a token's row in all layers
///   token mask [max_rows]: the token has been staged by at least one layer
///   layer mask [num_layers]: the layer has been staged this round
/// A token's row index is fixed at begin() from its window's place in the round
/// (row = first_row(window) + position in the window); stage() copies to that index,
/// never "to the next free position", so the order of stage() calls cannot move a row.
#include <cstdint>
#include <vector>

#include "specpipe/plugin.h"

namespace nwor {

/// One window of the staged round.
struct StagedWindow {
  int64_t sequence;
  int32_t n;          ///< tokens (rows) in the window
  int64_t first_row;  ///< row index of its first token in every layer
};

/// Device memory from the host, returned to it on destruction.
class DeviceAllocation {
 public:
  DeviceAllocation(const specpipe_host_api& host, size_t bytes);  ///< throws HookError(CAPACITY)
  ~DeviceAllocation();
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  char* data() const { return data_; }

 private:
  const specpipe_host_api& host_;
  char* data_ = nullptr;
};

class StagingBuffer {
 public:
  /// Allocates k and v. Throws HookError: SPECPIPE_ERR_CAPACITY when the host cannot
  /// allocate or the size overflows.
  StagingBuffer(const specpipe_host_api& host, const specpipe_model_desc& model, int64_t max_rows);

  int64_t max_rows() const { return max_rows_; }
  int32_t num_layers() const { return num_layers_; }
  int64_t kv_dim() const { return kv_dim_; }

  /// Starts a round: records the windows (validated by the caller: n >= 1, total rows
  /// <= max_rows) and their slots, clears both masks.
  void load_round(const specpipe_window* windows, int32_t count);
  /// Forgets the round (masks cleared, no windows). The device memory stays.
  void clear();

  int64_t total_rows() const { return total_rows_; }
  const std::vector<StagedWindow>& windows() const { return windows_; }
  bool layer_staged(int32_t layer) const { return layer_mask_[static_cast<size_t>(layer)] != 0; }
  /// The first layer not staged this round, or num_layers() when all are.
  int32_t first_unstaged_layer() const;

  /// Copies rows [0, total_rows) of one layer (k_src, v_src: [total_rows, kv_dim]
  /// float32 on the pool's device) to that layer's rows with host->copy on `stream`,
  /// marks the layer and the tokens. Returns the host's status (non-OK: nothing marked).
  /// On success `newly_staged_tokens` is how many tokens no earlier layer had staged.
  specpipe_status stage_layer(int32_t layer, const void* k_src, const void* v_src, specpipe_stream stream,
                              int64_t& newly_staged_tokens);

  /// Views of rows [first_row, first_row + rows) of one layer, for host->write_slots.
  DLTensor k_rows(int32_t layer, int64_t first_row, int64_t rows, int64_t shape[2]) const;
  DLTensor v_rows(int32_t layer, int64_t first_row, int64_t rows, int64_t shape[2]) const;
  /// The slots of rows [first_row, ...): the same array for every layer.
  const int64_t* slots_from(int64_t first_row) const { return slots_.data() + first_row; }

 private:
  DLTensor view(char* base, int32_t layer, int64_t first_row, int64_t rows, int64_t shape[2]) const;
  size_t row_bytes() const { return static_cast<size_t>(kv_dim_) * sizeof(float); }
  size_t layer_bytes() const { return static_cast<size_t>(max_rows_) * row_bytes(); }

  const specpipe_host_api& host_;
  DLDevice device_;
  int32_t num_layers_;
  int64_t kv_dim_;
  int64_t max_rows_;
  DeviceAllocation k_;
  DeviceAllocation v_;
  std::vector<int64_t> slots_;
  std::vector<uint8_t> token_mask_;
  std::vector<uint8_t> layer_mask_;
  std::vector<StagedWindow> windows_;
  int64_t total_rows_ = 0;
};

}  // namespace nwor
