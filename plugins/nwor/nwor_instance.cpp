#include "nwor_instance.h"

#include <algorithm>
#include <exception>
#include <unordered_map>
#include <vector>

#include "nwor_error.h"

namespace nwor {
namespace {

std::string window_name(int32_t index, int64_t sequence) {
  return "window " + std::to_string(index) + " (sequence " + std::to_string(sequence) + ")";
}

}  // namespace

NworInstance::NworInstance(const specpipe_host_api& host, const specpipe_model_desc& model, const NworConfig& config)
    : host_(host), model_(model), config_(config) {
  if (config_.enabled) buffer_ = std::make_unique<StagingBuffer>(host_, model_, config_.max_rows);
}

void NworInstance::log(int32_t level, const std::string& message) const {
  if (host_.log) host_.log(host_.host, level, ("nwor: " + message).c_str());
}

template <class Step>
void NworInstance::drop_round_on_failure(Fallback reason, Step&& step) {
  try {
    step();
  } catch (const std::exception& e) {
    drop_round(reason, e.what());
    throw;
  } catch (...) {
    drop_round(reason, "unknown exception");
    throw;
  }
}

void NworInstance::drop_round(Fallback reason, const char* what) noexcept {
  buffer_->clear();
  round_staged_ = false;
  metrics_.count(reason);
  try {
    log(2, std::string(fallback_name(reason)) + ", round dropped: " + what);
  } catch (...) {  // logging is best effort; the round is already dropped
  }
}

// ---- begin ----------------------------------------------------------------------

int64_t NworInstance::check_windows(const specpipe_window* windows, int32_t count) const {
  if (count < 0) fail_invalid("begin: window count " + std::to_string(count) + " is negative");
  if (count == 0) fail_invalid("begin: a round needs at least one window");
  if (!windows) fail_invalid("begin: windows is NULL but count is " + std::to_string(count));
  std::vector<int64_t> sequences;
  int64_t rows = 0;
  for (int32_t i = 0; i < count; ++i) {
    const specpipe_window& w = windows[i];
    if (w.n < 1) fail_invalid("begin: " + window_name(i, w.sequence) + " has n = " + std::to_string(w.n) + " (must be >= 1)");
    if (!w.slots) fail_invalid("begin: " + window_name(i, w.sequence) + " has NULL slots");
    sequences.push_back(w.sequence);
    rows += w.n;
  }
  // Two windows of one sequence would get two verdicts for one id: refuse, not pick one.
  std::sort(sequences.begin(), sequences.end());
  if (const auto dup = std::adjacent_find(sequences.begin(), sequences.end()); dup != sequences.end())
    fail_invalid("begin: sequence " + std::to_string(*dup) + " has more than one window");
  return rows;
}

void NworInstance::check_slots(const specpipe_window* windows, int32_t count) const {
  std::vector<int64_t> slots;
  for (int32_t i = 0; i < count; ++i) {
    const specpipe_window& w = windows[i];
    for (int32_t t = 0; t < w.n; ++t) {
      if (w.slots[t] < 0)
        fail_invalid("begin: " + window_name(i, w.sequence) + " token " + std::to_string(t) + " has slot " +
                     std::to_string(w.slots[t]));
      slots.push_back(w.slots[t]);
    }
  }
  // Two tokens sharing a slot would make the pool's content depend on write order.
  std::sort(slots.begin(), slots.end());
  if (const auto dup = std::adjacent_find(slots.begin(), slots.end()); dup != slots.end())
    fail_invalid("begin: slot " + std::to_string(*dup) + " is given to more than one token");
}

specpipe_status NworInstance::begin(const specpipe_window* windows, int32_t count, std::string& why) {
  const int64_t rows = check_windows(windows, count);
  Fallback reason = Fallback::count_;
  if (!config_.enabled) {
    reason = Fallback::disabled;
    why = "disabled by config";
  } else if (round_staged_) {
    reason = Fallback::buffer_busy;
    why = "buffer_busy: the previous round was neither committed nor aborted";
  } else if (rows > buffer_->max_rows()) {
    reason = Fallback::window_too_large;
    why = "window_too_large: " + std::to_string(rows) + " rows, the buffer holds " + std::to_string(buffer_->max_rows());
  }
  if (reason != Fallback::count_) {
    metrics_.count(reason);
    ++metrics_.rounds_declined;
    log(0, "declined a round: " + why);
    return SPECPIPE_DECLINED;
  }
  // Read the slots only once the rows are known to fit: a window claiming more tokens
  // than the buffer holds is declined before its slot array is touched.
  check_slots(windows, count);
  buffer_->load_round(windows, count);
  round_staged_ = true;
  ++metrics_.rounds_staged;
  return SPECPIPE_OK;
}

// ---- stage ----------------------------------------------------------------------

void NworInstance::check_tensor(const DLTensor* t, const char* name, int32_t layer) const {
  const std::string where = "stage: layer " + std::to_string(layer) + " " + name;
  if (!t) fail_invalid(where + " is NULL");
  if (t->ndim != 2 || !t->shape) fail_invalid(where + " must be 2-D, has ndim " + std::to_string(t->ndim));
  const int64_t rows = buffer_->total_rows();
  if (t->shape[0] != rows || t->shape[1] != buffer_->kv_dim())
    fail_invalid(where + " has shape [" + std::to_string(t->shape[0]) + ", " + std::to_string(t->shape[1]) +
                 "], the round needs [" + std::to_string(rows) + ", " + std::to_string(buffer_->kv_dim()) + "]");
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1)
    fail_invalid(where + " must be float32");
  if (t->strides && (t->strides[0] != buffer_->kv_dim() || t->strides[1] != 1))
    fail_invalid(where + " must be dense row-major");
  if (!t->data) fail_invalid(where + " has no data");
  if (t->device.device_type != model_.device.device_type || t->device.device_id != model_.device.device_id)
    fail_invalid(where + " is not on the pool's device");
}

void NworInstance::check_layer_rows(const specpipe_layer_rows* rows) const {
  if (!rows) fail_invalid("stage: rows is NULL");
  if (rows->layer < 0 || rows->layer >= model_.num_layers)
    fail_invalid("stage: layer " + std::to_string(rows->layer) + " outside [0, " + std::to_string(model_.num_layers) + ")");
  if (buffer_->layer_staged(rows->layer))
    fail_invalid("stage: layer " + std::to_string(rows->layer) + " was already staged this round");
  check_tensor(rows->k, "k", rows->layer);
  check_tensor(rows->v, "v", rows->layer);
}

void NworInstance::stage(const specpipe_layer_rows* rows, specpipe_stream stream) {
  if (!round_staged_) fail_invalid("stage: no round was begun (or it was declined, committed or aborted)");
  drop_round_on_failure(Fallback::stage_failed, [&] {
    check_layer_rows(rows);
    const auto source = [](const DLTensor* t) { return static_cast<const char*>(t->data) + t->byte_offset; };
    int64_t newly_staged = 0;
    const specpipe_status status =
        buffer_->stage_layer(rows->layer, source(rows->k), source(rows->v), stream, newly_staged);
    if (status != SPECPIPE_OK)
      throw HookError(status < 0 ? status : SPECPIPE_ERR_INTERNAL,
                      "stage: the host's copy failed with status " + std::to_string(status) + " for layer " +
                          std::to_string(rows->layer));
    metrics_.stage_operations += buffer_->total_rows();
    metrics_.unique_staged_tokens += newly_staged;
  });
}

// ---- commit ---------------------------------------------------------------------

void NworInstance::commit(const specpipe_window_verdict* verdicts, int32_t count, specpipe_stream stream) {
  if (!round_staged_) fail_invalid("commit: no round was begun (or it was declined, committed or aborted)");
  drop_round_on_failure(Fallback::commit_failed, [&] {
    const std::vector<StagedWindow>& windows = buffer_->windows();
    if (count < 0) fail_invalid("commit: verdict count " + std::to_string(count) + " is negative");
    if (!verdicts && count > 0) fail_invalid("commit: verdicts is NULL but count is " + std::to_string(count));
    if (static_cast<size_t>(count) != windows.size())
      fail_invalid("commit: " + std::to_string(count) + " verdicts for a round of " + std::to_string(windows.size()) +
                   " windows (one per window)");
    // Everything is checked before the first write: a malformed verdict writes nothing.
    std::unordered_map<int64_t, size_t> window_of;
    for (size_t w = 0; w < windows.size(); ++w) window_of.emplace(windows[w].sequence, w);
    std::vector<int32_t> accepted(windows.size(), 0);
    for (int32_t i = 0; i < count; ++i) {
      const auto it = window_of.find(verdicts[i].sequence);
      if (it == window_of.end())
        fail_invalid("commit: sequence " + std::to_string(verdicts[i].sequence) + " has no window in this round");
      const StagedWindow& w = windows[it->second];
      if (accepted[it->second] != 0)
        fail_invalid("commit: sequence " + std::to_string(w.sequence) + " has more than one verdict");
      if (verdicts[i].accepted < 1 || verdicts[i].accepted > w.n)
        fail_invalid("commit: sequence " + std::to_string(w.sequence) + " accepted " +
                     std::to_string(verdicts[i].accepted) + " of a window of " + std::to_string(w.n) +
                     " (must be 1.." + std::to_string(w.n) + ")");
      accepted[it->second] = verdicts[i].accepted;
    }
    const int32_t layers = buffer_->num_layers();
    if (const int32_t missing = buffer_->first_unstaged_layer(); missing < layers)
      fail_invalid("commit: layer " + std::to_string(missing) + " was never staged this round");

    // Window by window, every layer of a window before the next window: if the host
    // fails, at most one window (the failing one) is partly written, and only into
    // slots the host has not committed yet. Each (window, layer) is one write_slots
    // call on a view of the staging buffer, so nothing is gathered or copied first.
    const int64_t row_bytes_kv = buffer_->kv_dim() * static_cast<int64_t>(sizeof(float)) * 2;
    for (size_t w = 0; w < windows.size(); ++w) {
      const StagedWindow& window = windows[w];
      for (int32_t layer = 0; layer < layers; ++layer) {
        int64_t k_shape[2];
        int64_t v_shape[2];
        const DLTensor k = buffer_->k_rows(layer, window.first_row, accepted[w], k_shape);
        const DLTensor v = buffer_->v_rows(layer, window.first_row, accepted[w], v_shape);
        const specpipe_status status = host_.write_slots(host_.host, layer, &k, &v, buffer_->slots_from(window.first_row),
                                                         accepted[w], stream);
        if (status != SPECPIPE_OK)
          throw HookError(status < 0 ? status : SPECPIPE_ERR_INTERNAL,
                          "commit: write_slots failed with status " + std::to_string(status) + " for " +
                              window_name(static_cast<int32_t>(w), window.sequence) + ", layer " +
                              std::to_string(layer) + "; windows before it hold all layers, this one layers [0, " +
                              std::to_string(layer) + "), later ones nothing; no token of the round is committed");
        ++metrics_.write_slots_calls;
        metrics_.pool_bytes_written += accepted[w] * row_bytes_kv;
      }
    }
    for (size_t w = 0; w < windows.size(); ++w) {
      const int64_t rejected = windows[w].n - accepted[w];
      metrics_.committed_tokens += accepted[w];
      metrics_.rejected_tokens += rejected;
      metrics_.pool_bytes_not_written += rejected * layers * row_bytes_kv;
    }
  });
  buffer_->clear();
  round_staged_ = false;
  ++metrics_.rounds_committed;
}

void NworInstance::abort() noexcept {
  if (!round_staged_) return;
  buffer_->clear();
  round_staged_ = false;
  ++metrics_.rounds_aborted;
}

}  // namespace nwor
