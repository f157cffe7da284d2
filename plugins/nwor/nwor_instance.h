#pragma once
/// One NWOR instance: the round state machine of the `kv_write` slot behind the C hooks.
///
///   idle --begin--> staged --stage (per layer)--> staged --commit | abort--> idle
///
/// begin() validates the windows and fixes every token's row and slot; stage() copies a
/// layer's rows into the staging buffer; commit() writes each window's accepted prefix
/// of every layer to the pool with host->write_slots; abort() drops the round. Any
/// failure of stage() or commit() also drops the round, so the buffer is never left
/// busy by an error. Methods throw HookError; nwor_plugin.cpp turns it into a status.
#include <memory>
#include <string>

#include "nwor_config.h"
#include "nwor_metrics.h"
#include "staging_buffer.h"
#include "specpipe/plugin.h"

namespace nwor {

class NworInstance {
 public:
  /// host, model: borrowed until destruction (the ABI guarantees it). Allocates the
  /// staging buffer unless the config disables the plugin.
  NworInstance(const specpipe_host_api& host, const specpipe_model_desc& model, const NworConfig& config);

  /// SPECPIPE_OK (the round is staged) or SPECPIPE_DECLINED with `why` set; throws
  /// HookError(INVALID_ARGUMENT) for malformed windows (nothing changes then).
  specpipe_status begin(const specpipe_window* windows, int32_t count, std::string& why);
  void stage(const specpipe_layer_rows* rows, specpipe_stream stream);
  void commit(const specpipe_window_verdict* verdicts, int32_t count, specpipe_stream stream);
  void abort() noexcept;

  std::string metrics_json() const { return metrics_.to_json(config_.max_rows, config_.enabled); }

 private:
  /// The windows' structure (count, pointers, n, one window per sequence); their rows.
  int64_t check_windows(const specpipe_window* windows, int32_t count) const;
  /// Every slot >= 0 and given to one token only.
  void check_slots(const specpipe_window* windows, int32_t count) const;
  void check_layer_rows(const specpipe_layer_rows* rows) const;
  void check_tensor(const DLTensor* t, const char* name, int32_t layer) const;
  /// Runs `step` on the staged round; if it throws, drops the round, counts `reason`
  /// and lets the error go on (the host writes this round directly from then on).
  template <class Step>
  void drop_round_on_failure(Fallback reason, Step&& step);
  void drop_round(Fallback reason, const char* what) noexcept;
  void log(int32_t level, const std::string& message) const;

  const specpipe_host_api& host_;
  const specpipe_model_desc& model_;
  NworConfig config_;
  std::unique_ptr<StagingBuffer> buffer_;  ///< null when disabled
  bool round_staged_ = false;
  NworMetrics metrics_;
};

}  // namespace nwor
