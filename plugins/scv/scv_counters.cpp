#include "scv_counters.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace specpipe::scv {

void ScvCounters::record_round(std::span<const int32_t> gamma) {
  ++rounds;
  sequence_rounds += gamma.size();
  max_windows_per_pass = std::max(max_windows_per_pass, static_cast<int32_t>(gamma.size()));
  for (int32_t g : gamma) {
    ++gamma_hist[static_cast<size_t>(g)];
    if (g == 0) ++speculation_off;
  }
}

std::string metrics_json(const ScvCounters& c, const LiveMetrics& live) {
  // ordered_json keeps the README's key order. dump() writes numbers locale-independently
  // and a non-finite double as null, so the text is always valid JSON.
  nlohmann::ordered_json m;
  m["rounds"] = c.rounds;
  m["gamma_hist"] = c.gamma_hist;
  m["windows_per_pass"] =
      c.rounds ? static_cast<double>(c.sequence_rounds) / static_cast<double>(c.rounds) : 0.0;
  m["max_windows_per_pass"] = c.max_windows_per_pass;
  m["speculation_off"] = c.speculation_off;
  m["speculation_off_sequences_now"] = live.speculation_off_sequences_now;
  m["probes"] = c.probes;
  m["probes_skipped"] = c.probes_skipped;
  m["probes_held"] = c.probes_held;
  m["probes_lost"] = c.probes_lost;
  m["drafting_rounds"] = c.drafting_rounds;
  m["probe_rounds"] = c.probe_rounds;
  m["probe_only_rounds"] = c.probe_only_rounds;
  m["measure_hold_rounds"] = c.measure_hold_rounds;
  m["mean_acceptance_estimate"] = live.mean_acceptance_estimate;
  m["batch_acceptance_estimate"] = live.batch_acceptance_estimate;
  m["tracked_sequences"] = live.tracked_sequences;
  m["unmeasured_rounds"] = c.unmeasured_rounds;
  m["budget_exceeded_rounds"] = c.budget_exceeded_rounds;
  m["outcomes_observed"] = c.outcomes_observed;
  m["mean_predicted_speedup"] =
      c.predicted_rounds ? c.predicted_speedup_sum / static_cast<double>(c.predicted_rounds) : 1.0;
  return m.dump();
}

}  // namespace specpipe::scv
