#pragma once
/// One SCV instance (one pipeline's verify_plan slot): the acceptance estimates, the
/// per-sequence probe clocks and the counters, and the plan / observe / forget steps the
/// C hooks call. C++ throughout; errors are PluginError (scv_errors.h).
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "acceptance_tracker.h"
#include "scv_config.h"
#include "scv_counters.h"
#include "scv_planner.h"
#include "specpipe/plugin.h"

namespace specpipe::scv {

/// The costs of a specpipe_plan_costs as this plugin reads them: only the fields within
/// its struct_size (others are 0). A negative intercept or slope (a least-squares fit can
/// dip below 0) counts as 0. Throws PluginError(INVALID_ARGUMENT) for a non-finite cost
/// or a negative token_budget.
RoundCosts costs_from_abi(const specpipe_plan_costs& costs);

class ScvInstance {
 public:
  /// `host` may be NULL (no logging); borrowed until destruction.
  ScvInstance(const ScvConfig& config, const specpipe_host_api* host);

  /// Writes gamma[i] in [0, min(sequences[i].max_gamma, config max_gamma)] for every
  /// sequence. Validates everything before changing any state: a negative max_gamma
  /// throws PluginError(INVALID_ARGUMENT). `gamma` has sequences.size() entries.
  void plan(std::span<const specpipe_plan_sequence> sequences, const RoundCosts& costs, std::span<int32_t> gamma);
  /// Learns from the last round's outcomes (see AcceptanceTracker::observe).
  void observe(std::span<const specpipe_plan_observation> observations);
  /// Drops everything known about the sequence.
  void forget(int64_t sequence);

  std::string metrics_json() const;
  double acceptance_estimate(int64_t sequence) const { return tracker_.estimate(sequence); }
  const ScvCounters& counters() const { return counters_; }
  const ScvConfig& config() const { return config_; }
  /// Through the host's log service when it has one; level as in specpipe_host_api.
  void log(int32_t level, const std::string& message) const;

  /// A sequence neither planned nor observed for this many rounds is dropped, so a host
  /// that never calls forget() (the hook is optional) does not grow the state forever.
  static constexpr uint64_t kStaleRounds = 4096;

 private:
  struct SequenceState {
    int32_t rounds_off = 0;   ///< consecutive rounds planned at 0 by choice
    int32_t probe_left = 0;   ///< rounds of its current probe still to come
    int32_t last_gamma = -1;  ///< -1 until planned
    bool probed = false;      ///< probed since the plan last gave it drafts (judged when its probe ends)
    uint64_t last_round = 0;  ///< the last round that planned or observed it
  };
  /// Probes at one batch size (sizes in (2^(k-1), 2^k] share bucket k), from
  /// probe_backoff_batch up: consecutive probes that ended without the plan turning
  /// drafting on, and the round before which no new probe starts there.
  struct ProbeBackoff {
    int32_t lost = 0;
    uint64_t hold_until = 0;
  };
  static constexpr int32_t kMaxProbeBackoff = 4;  ///< the wait doubles up to 16x probe_interval
  static constexpr size_t kBackoffBuckets = 32;
  /// ProbeBackoff of a batch of n sequences, or nullptr below probe_backoff_batch.
  ProbeBackoff* backoff_for(size_t n);

  void evict_stale();
  /// A debug line when the round's largest gamma changes (and every 1024 rounds): what
  /// the planner saw and chose.
  void trace(std::span<const specpipe_plan_sequence> sequences, const RoundCosts& costs, const RoundPlan& plan,
             int32_t previous) const;

  ScvConfig config_;
  const specpipe_host_api* host_;
  AcceptanceTracker tracker_;
  ScvCounters counters_;
  std::unordered_map<int64_t, SequenceState> states_;
  uint64_t round_ = 0;
  bool speculating_ = true;  ///< whether the last measured round had any drafts
  int32_t previous_max_gamma_ = -1;  ///< the last round's largest gamma (-1: none yet)
  int32_t held_rounds_ = 0;  ///< rounds in a row planned at previous_max_gamma_ (one sequence)
  std::array<ProbeBackoff, kBackoffBuckets> backoff_{};
  // Scratch, reused every round.
  std::vector<WindowRequest> windows_;
  std::vector<SequenceState*> states_now_;
  std::vector<size_t> due_;
};

}  // namespace specpipe::scv
