#pragma once
/// Per-sequence estimates of the per-draft acceptance probability, learned from the
/// outcome of each round, shrunk toward a batch-wide estimate (itself shrunk toward a
/// configured prior) so that a new or rarely observed sequence is not planned on the
/// evidence of one window.
#include <cstdint>
#include <span>
#include <unordered_map>

namespace specpipe::scv {

/// What happened to one sequence's drafts in one round.
struct DraftOutcome {
  int64_t sequence = 0;
  int32_t proposed = 0;  ///< drafts verified
  int32_t accepted = 0;  ///< of them accepted (the accepted prefix), clamped to [0, proposed]
};

struct TrackerOptions {
  double prior_acceptance = 0.6;  ///< the batch estimate before any evidence
  double prior_weight = 4;        ///< pseudo-trials behind each prior (> 0)
  int32_t memory_rounds = 16;     ///< evidence r observed rounds old weighs (1 - 1/memory)^r
};

class AcceptanceTracker {
 public:
  explicit AcceptanceTracker(const TrackerOptions& options);

  /// Adds one round's outcomes. A window with k of p drafts accepted tested k + 1 drafts
  /// when k < p (the first rejection ends the window; later drafts were never judged) and
  /// p when k = p: counting p trials would bias the estimate low at large gamma.
  /// Outcomes with proposed <= 0 carry no evidence and are ignored.
  void observe(std::span<const DraftOutcome> outcomes);

  /// The sequence's estimate: its own evidence with prior_weight pseudo-trials at the
  /// batch estimate; the batch estimate for a sequence with no evidence.
  double estimate(int64_t sequence) const;
  /// The batch-wide estimate: all sequences' evidence with the configured prior.
  double batch_estimate() const;
  /// The mean of the tracked sequences' estimates (the batch estimate if none).
  double mean_estimate() const;

  void forget(int64_t sequence) { sequences_.erase(sequence); }
  size_t tracked() const { return sequences_.size(); }

 private:
  /// Exponentially decayed counts of accepted drafts and of drafts judged.
  struct Evidence {
    double accepted = 0;
    double trials = 0;
  };
  double shrunk(const Evidence& e) const;

  TrackerOptions options_;
  double decay_;
  Evidence batch_;
  std::unordered_map<int64_t, Evidence> sequences_;
};

}  // namespace specpipe::scv
