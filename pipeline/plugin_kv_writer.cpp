#include "pipeline/plugin_kv_writer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace specpipe {
namespace {

DLTensor rows_tensor(const float* data, int64_t* shape, DLDevice device) {
  DLTensor t{};
  t.data = const_cast<float*>(data);
  t.device = device;
  t.ndim = 2;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  return t;
}

}  // namespace

PluginKvWriter::PluginKvWriter(KvStore& store, std::shared_ptr<PluginInstance> plugin)
    : store_(store), plugin_(std::move(plugin)), direct_(store) {}

void PluginKvWriter::begin_round(std::span<const WindowPlacement> windows) {
  ++stats_.rounds;
  round_.assign(windows.begin(), windows.end());
  mode_ = Mode::direct;
  if (plugin_->disabled()) return direct_.begin_round(windows);
  // Slots are per token and shared by every layer: computed once here.
  slots_.clear();
  std::vector<specpipe_window> descs;
  std::vector<size_t> offsets;
  for (const WindowPlacement& w : windows) {
    offsets.push_back(slots_.size());
    for (int32_t i = 0; i < w.n; ++i) slots_.push_back(store_.slot(w.seq, w.start + i));
  }
  for (size_t i = 0; i < windows.size(); ++i) descs.push_back({windows[i].seq, windows[i].n, slots_.data() + offsets[i]});
  const specpipe_status s = plugin_->call("begin", [&](char* err, size_t n) {
    return plugin_->table().kv_write->begin(plugin_->handle(), descs.data(), static_cast<int32_t>(descs.size()), err, n);
  });
  if (s == SPECPIPE_OK) {
    mode_ = Mode::staged;
    return;
  }
  if (s > 0) plugin_->count_fallback("declined");
  else plugin_->disable("begin_failed");
  direct_.begin_round(windows);
}

specpipe_status PluginKvWriter::stage(int32_t layer, std::span<const WindowKvRows> windows) {
  // The plugin takes one [rows, kv_dim] tensor for the round. The forward's window rows
  // are one dense block already; gather them only if they are not.
  const int64_t dim = store_.tensors().slot_stride();
  int64_t rows = 0;
  bool dense = true;
  for (size_t i = 0; i < windows.size(); ++i) {
    dense &= windows[i].ld == dim && (i == 0 || windows[i].k == windows[i - 1].k + windows[i - 1].n * dim) &&
             (i == 0 || windows[i].v == windows[i - 1].v + windows[i - 1].n * dim);
    rows += windows[i].n;
  }
  const float* k = windows.empty() ? nullptr : windows[0].k;
  const float* v = windows.empty() ? nullptr : windows[0].v;
  const bool on_device = !windows.empty() && windows[0].on_device;
  // A device model hands one dense block (its staging buffer); the host cannot gather.
  if (!dense && on_device)
    fail(ErrorCode::internal, "kv_write plugin: layer {} device rows are not one dense block", layer);
  if (!dense) {
    gather_k_.resize(static_cast<size_t>(rows * dim));
    gather_v_.resize(gather_k_.size());
    int64_t r = 0;
    for (const WindowKvRows& w : windows)
      for (int32_t i = 0; i < w.n; ++i, ++r) {
        std::memcpy(&gather_k_[static_cast<size_t>(r * dim)], w.k + i * w.ld, static_cast<size_t>(dim) * 4);
        std::memcpy(&gather_v_[static_cast<size_t>(r * dim)], w.v + i * w.ld, static_cast<size_t>(dim) * 4);
      }
    k = gather_k_.data();
    v = gather_v_.data();
  }
  int64_t shape[2] = {rows, dim};
  const DLDevice device = on_device ? plugin_->model().device : DLDevice{kDLCPU, 0};
  const DLTensor kt = rows_tensor(k, shape, device), vt = rows_tensor(v, shape, device);
  const specpipe_layer_rows desc{layer, &kt, &vt};
  return plugin_->call("stage", [&](char* err, size_t n) {
    return plugin_->table().kv_write->stage(plugin_->handle(), &desc, plugin_->stream(), err, n);
  });
}

void PluginKvWriter::write_layer(int32_t layer, std::span<const WindowKvRows> windows) {
  if (mode_ == Mode::staged) {
    // Null rows outside a staged round are a device pool's own writes (the direct path
    // counts them); in one they mean the forward did not keep them out of its pool.
    for (const WindowKvRows& w : windows)
      if (w.k == nullptr || w.v == nullptr)
        fail(ErrorCode::internal, "kv_write plugin: the staged round's rows of layer {} went into the device pool",
             layer);
    const specpipe_status s = stage(layer, windows);
    if (s == SPECPIPE_OK) return;
    // Layers before this one live only in the plugin's buffer: write the rest directly
    // and have the accepted rows recomputed after the verdict.
    if (s > 0) plugin_->count_fallback("stage_declined");
    else plugin_->disable("stage_failed");
    mode_ = Mode::broken;
    direct_.begin_round(round_);  // the rest of this round's rows are round rows, not prefill
  }
  // A broken round's device rows were kept out of the pool and cannot be written from
  // here; nothing needs them: the round's accepted tokens are recomputed.
  if (mode_ == Mode::broken && !windows.empty() && windows[0].on_device) return;
  direct_.write_layer(layer, windows);  // no round (prefill), direct, or broken
}

bool PluginKvWriter::commit_round(std::span<const WindowCommit> verdicts) {
  const Mode mode = mode_;
  mode_ = Mode::idle;
  const int64_t layers = store_.config().num_layers;
  if (mode == Mode::direct) return direct_.commit_round(verdicts);
  if (mode == Mode::broken) {
    direct_.abort_round();
    plugin_->call("abort", [&](char*, size_t) {
      plugin_->table().kv_write->abort(plugin_->handle());
      return SPECPIPE_OK;
    });
    ++stats_.redo_rounds;
    return false;
  }
  std::vector<specpipe_window_verdict> descs;
  int64_t staged = 0, accepted = 0;
  for (const WindowCommit& c : verdicts) {
    descs.push_back({c.seq, c.accepted});
    accepted += c.accepted;
  }
  for (const WindowPlacement& w : round_) staged += w.n;
  const int64_t written_before = plugin_->pool_rows_written();
  const specpipe_status s = plugin_->call("commit", [&](char* err, size_t n) {
    return plugin_->table().kv_write->commit(plugin_->handle(), descs.data(), static_cast<int32_t>(descs.size()),
                                            plugin_->stream(), err, n);
  });
  stats_.rows_written += plugin_->pool_rows_written() - written_before;
  if (s != SPECPIPE_OK) {
    plugin_->disable("commit_failed");
    ++stats_.redo_rounds;
    return false;
  }
  stats_.rows_not_written += (staged - accepted) * layers;
  return true;
}

void PluginKvWriter::abort_round() {
  direct_.abort_round();
  if (mode_ == Mode::staged || mode_ == Mode::broken)
    plugin_->call("abort", [&](char*, size_t) {
      plugin_->table().kv_write->abort(plugin_->handle());
      return SPECPIPE_OK;
    });
  mode_ = Mode::idle;
}

KvWriteStats PluginKvWriter::stats() const {
  // Rows written by the direct path (prefill, declined or broken rounds) count too.
  KvWriteStats s = stats_;
  const KvWriteStats d = direct_.stats();
  s.rows_written += d.rows_written;
  s.prefill_rows_written = d.prefill_rows_written;
  s.rows_wasted += d.rows_wasted;
  s.row_bytes = store_.tensors().slot_stride() * 2 * static_cast<int64_t>(sizeof(float));
  return s;
}

}  // namespace specpipe
