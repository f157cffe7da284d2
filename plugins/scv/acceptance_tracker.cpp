#include "acceptance_tracker.h"

#include <algorithm>

namespace specpipe::scv {

AcceptanceTracker::AcceptanceTracker(const TrackerOptions& options)
    : options_(options), decay_(1.0 - 1.0 / std::max(options.memory_rounds, 1)) {}

void AcceptanceTracker::observe(std::span<const DraftOutcome> outcomes) {
  Evidence this_round;
  for (const DraftOutcome& o : outcomes) {
    if (o.proposed <= 0) continue;
    const int32_t k = std::clamp(o.accepted, 0, o.proposed);
    const double trials = k < o.proposed ? k + 1.0 : static_cast<double>(k);
    Evidence& e = sequences_[o.sequence];
    e.accepted = e.accepted * decay_ + k;
    e.trials = e.trials * decay_ + trials;
    this_round.accepted += k;
    this_round.trials += trials;
  }
  // The batch evidence ages by rounds, not by sequences, so a large batch does not
  // forget faster than a small one.
  if (this_round.trials > 0) {
    batch_.accepted = batch_.accepted * decay_ + this_round.accepted;
    batch_.trials = batch_.trials * decay_ + this_round.trials;
  }
}

double AcceptanceTracker::batch_estimate() const {
  const double w = options_.prior_weight;
  return (w * options_.prior_acceptance + batch_.accepted) / (w + batch_.trials);
}

double AcceptanceTracker::shrunk(const Evidence& e) const {
  const double w = options_.prior_weight;
  return (w * batch_estimate() + e.accepted) / (w + e.trials);
}

double AcceptanceTracker::estimate(int64_t sequence) const {
  const auto it = sequences_.find(sequence);
  return it == sequences_.end() ? batch_estimate() : shrunk(it->second);
}

double AcceptanceTracker::mean_estimate() const {
  if (sequences_.empty()) return batch_estimate();
  double sum = 0;
  for (const auto& [id, e] : sequences_) sum += shrunk(e);
  return sum / static_cast<double>(sequences_.size());
}

}  // namespace specpipe::scv
