#include <cstring>

#include "core/error.h"
#include "kvstore/kv_write_sink.h"

namespace specpipe {

void DirectKvWriter::write_layer(int32_t layer, std::span<const WindowKvRows> windows) {
  KvTensors& t = store_.tensors();
  const int64_t stride = t.slot_stride();
  const size_t row_bytes = static_cast<size_t>(stride) * sizeof(float);
  const int32_t block_size = store_.config().block_size;
  float* k = t.k(layer);
  float* v = t.v(layer);
  for (const WindowKvRows& w : windows) {
    // One table lookup per window, not per row and layer.
    const std::span<const int32_t> table = store_.block_table(w.seq);
    if (w.start_pos + w.n > store_.reserved(w.seq))
      fail(ErrorCode::internal, "kv write past the reserved positions of sequence {}", w.seq);
    for (int32_t i = 0; i < w.n; ++i) {
      const int32_t pos = w.start_pos + i;
      const int64_t slot = int64_t{table[static_cast<size_t>(pos / block_size)]} * block_size + pos % block_size;
      std::memcpy(k + slot * stride, w.k + i * w.ld, row_bytes);
      std::memcpy(v + slot * stride, w.v + i * w.ld, row_bytes);
    }
  }
}

}  // namespace specpipe
