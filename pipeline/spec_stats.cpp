#include "pipeline/spec_stats.h"

#include <algorithm>

namespace specpipe {

void SpecStats::add_round(int32_t proposed_now, int32_t accepted_now) {
  ++rounds;
  proposed += proposed_now;
  accepted += accepted_now;
  if (accepted_hist.size() <= static_cast<size_t>(accepted_now)) accepted_hist.resize(static_cast<size_t>(accepted_now) + 1, 0);
  ++accepted_hist[static_cast<size_t>(accepted_now)];
  accepted_per_round.push_back(accepted_now);
}

const char* ViewStats::mode() const {
  if (partial_rounds() == 0) return "full";
  if (approximate_rounds == 0) return "exact";
  return exact_rounds == 0 ? "approximate" : "mixed";
}

void ViewStats::merge(const ViewStats& o) {
  full_rounds += o.full_rounds;
  exact_rounds += o.exact_rounds;
  approximate_rounds += o.approximate_rounds;
  partial_proposed += o.partial_proposed;
  partial_accepted += o.partial_accepted;
  full_proposed += o.full_proposed;
  full_accepted += o.full_accepted;
  rollbacks += o.rollbacks;
  rolled_back_tokens += o.rolled_back_tokens;
  refreshes += o.refreshes;
  forced_full += o.forced_full;
  partial_host_bytes += o.partial_host_bytes;
  full_host_bytes += o.full_host_bytes;
  view_copy_bytes += o.view_copy_bytes;
  view_host_blocks += o.view_host_blocks;
  view_dropped_blocks += o.view_dropped_blocks;
  view_copy_refusals += o.view_copy_refusals;
  host_fallbacks += o.host_fallbacks;
  partial_verify_ms += o.partial_verify_ms;
  full_verify_ms += o.full_verify_ms;
}

void SpecStats::merge(const SpecStats& o) {
  requests += o.requests;
  rounds += o.rounds;
  proposed += o.proposed;
  accepted += o.accepted;
  generated += o.generated;
  if (accepted_hist.size() < o.accepted_hist.size()) accepted_hist.resize(o.accepted_hist.size(), 0);
  for (size_t k = 0; k < o.accepted_hist.size(); ++k) accepted_hist[k] += o.accepted_hist[k];
  prompt_tokens += o.prompt_tokens;
  cached_prompt_tokens += o.cached_prompt_tokens;
  draft_failures += o.draft_failures;
  drafted_ahead += o.drafted_ahead;
  overlapped_rounds += o.overlapped_rounds;
  max_rounds_in_flight = std::max(max_rounds_in_flight, o.max_rounds_in_flight);
  prefill_ms += o.prefill_ms;
  draft_ms += o.draft_ms;
  verify_ms += o.verify_ms;
  commit_ms += o.commit_ms;
  messaging_ms += o.messaging_ms;
  queued_ms += o.queued_ms;
  wall_ms += o.wall_ms;
  view.merge(o.view);
}

}  // namespace specpipe
