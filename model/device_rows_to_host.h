#pragma once
// A device model's rows read back as one host vector per row: the host's way to judge
// sampled q rows the draft model left on the device (SampledVerdictRequest::q_device).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/forward_model.h"

namespace specpipe {

/// `count` rows of `cols` floats at `rows` (row i at rows.data + i * rows.stride), one
/// read (one sync) through `model`'s read_device_rows, split into `out` (resized to count).
inline void device_rows_to_host(const ForwardModel& model, const DeviceRows& rows, size_t count, int32_t cols,
                                std::vector<std::vector<float>>& out) {
  const auto n = static_cast<size_t>(cols);
  std::vector<float> all(count * n);
  if (count > 0) model.read_device_rows(rows, static_cast<int32_t>(count), cols, all.data());
  out.resize(count);
  for (size_t i = 0; i < count; ++i) out[i].assign(all.begin() + static_cast<std::ptrdiff_t>(i * n),
                                                   all.begin() + static_cast<std::ptrdiff_t>((i + 1) * n));
}

}  // namespace specpipe
