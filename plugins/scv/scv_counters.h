#pragma once
/// SCV's counters and their JSON form (describe_metrics; README.md, "Counters").
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace specpipe::scv {

/// Totals since create().
struct ScvCounters {
  explicit ScvCounters(int32_t max_gamma) : gamma_hist(static_cast<size_t>(max_gamma) + 1, 0) {}

  uint64_t rounds = 0;                  ///< plan calls with at least one sequence
  uint64_t sequence_rounds = 0;         ///< sequences planned, summed over rounds
  int32_t max_windows_per_pass = 0;     ///< the largest batch planned
  std::vector<uint64_t> gamma_hist;     ///< [max_gamma + 1]: sequences planned with gamma g
  uint64_t speculation_off = 0;         ///< sequence-rounds planned at gamma 0
  uint64_t probes = 0;                  ///< gamma-1 probes of sequences that were off
  uint64_t probes_skipped = 0;          ///< sequence-rounds a probe was due where no acceptance pays
  uint64_t probes_held = 0;             ///< sequence-rounds a probe was due but held back (probe backoff)
  uint64_t probes_lost = 0;             ///< probes that ended without the plan turning drafting on (from probe_backoff_batch)
  uint64_t drafting_rounds = 0;         ///< rounds with any gamma > 0, probes included
  uint64_t probe_rounds = 0;            ///< rounds with at least one probe
  uint64_t probe_only_rounds = 0;       ///< rounds that drafted only for probes (the plan had 0 for all)
  uint64_t measure_hold_rounds = 0;     ///< one-sequence rounds that kept an unmeasured gamma to measure it
  uint64_t unmeasured_rounds = 0;       ///< rounds planned with requested gammas (costs 0)
  uint64_t budget_exceeded_rounds = 0;  ///< rounds whose windows exceeded token_budget at gamma 0
  uint64_t outcomes_observed = 0;       ///< per-sequence outcomes given to observe()
  double predicted_speedup_sum = 0;     ///< sum over measured rounds of planned / plain tokens per ms
  uint64_t predicted_rounds = 0;

  /// Counts one round's final gammas (each within [0, max_gamma]).
  void record_round(std::span<const int32_t> gamma);
};

/// Values computed from the live state when the metrics are read.
struct LiveMetrics {
  int64_t speculation_off_sequences_now = 0;  ///< tracked sequences whose last plan was 0
  int64_t tracked_sequences = 0;
  double mean_acceptance_estimate = 0;
  double batch_acceptance_estimate = 0;
};

/// One JSON object with every counter (numbers written locale-independently).
std::string metrics_json(const ScvCounters& counters, const LiveMetrics& live);

}  // namespace specpipe::scv
