#include <cstring>

#include "core/error.h"
#include "kvstore/kv_write_sink.h"

namespace specpipe {

void write_rows_to_pool(KvStore& store, int32_t layer, SeqId seq, int32_t start, int32_t n, const float* k,
                        const float* v, int64_t ld) {
  KvTensors& t = store.tensors();
  if (!t.holds_pool())
    fail(ErrorCode::internal, "kv write of sequence {}: the store keeps no host tensors (its pool is on a device)", seq);
  const int64_t stride = t.slot_stride();
  const size_t row_bytes = static_cast<size_t>(stride) * sizeof(float);
  const int32_t block_size = store.config().block_size;
  // One table lookup per window, not per row and layer.
  const std::span<const int32_t> table = store.block_table(seq);
  if (start + n > store.reserved(seq))
    fail(ErrorCode::internal, "kv write past the reserved positions of sequence {}", seq);
  float* kp = t.k(layer);
  float* vp = t.v(layer);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = start + i;
    const int64_t slot = int64_t{table[static_cast<size_t>(pos / block_size)]} * block_size + pos % block_size;
    std::memcpy(kp + slot * stride, k + i * ld, row_bytes);
    std::memcpy(vp + slot * stride, v + i * ld, row_bytes);
  }
}

void DirectKvWriter::begin_round(std::span<const WindowPlacement> windows) {
  round_.assign(windows.begin(), windows.end());
  in_round_ = true;
  ++stats_.rounds;
}

void DirectKvWriter::write_layer(int32_t layer, std::span<const WindowKvRows> windows) {
  for (const WindowKvRows& w : windows) {
    // Rows a device forward kept out of its pool for a staging sink cannot be written from
    // here (that sink drops them instead: pipeline/plugin_kv_writer.cpp).
    if (w.on_device)
      fail(ErrorCode::internal, "direct kv_write: layer {} rows of sequence {} are device rows kept out of the pool",
           layer, w.seq);
    // Null rows: a device forward already wrote them into its own pool; only count them.
    if (w.k != nullptr || w.v != nullptr) write_rows_to_pool(store_, layer, w.seq, w.start_pos, w.n, w.k, w.v, w.ld);
    stats_.rows_written += w.n;
    if (!in_round_) stats_.prefill_rows_written += w.n;
  }
}

bool DirectKvWriter::commit_round(std::span<const WindowCommit> verdicts) {
  // Every row was written during the forward; the rejected ones were wasted writes.
  const int64_t layers = store_.config().num_layers;
  for (const WindowCommit& c : verdicts)
    for (const WindowPlacement& w : round_)
      if (w.seq == c.seq) stats_.rows_wasted += (w.n - c.accepted) * layers;
  round_.clear();
  in_round_ = false;
  return true;
}

void DirectKvWriter::abort_round() {
  round_.clear();
  in_round_ = false;
}

KvWriteStats DirectKvWriter::stats() const {
  KvWriteStats s = stats_;
  s.row_bytes = store_.tensors().slot_stride() * 2 * static_cast<int64_t>(sizeof(float));
  return s;
}

}  // namespace specpipe
