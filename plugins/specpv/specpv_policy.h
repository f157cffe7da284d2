#pragma once
/// The SpecPV schedule: which rounds verify against a partial view, which fully, and when
/// to refresh the retrieved blocks; and the plugin's counters.
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>

#include "specpipe/plugin.h"
#include "specpv_config.h"

namespace specpv {

class SpecpvPolicy {
 public:
  explicit SpecpvPolicy(SpecpvConfig config) : c_(config) {}
  const SpecpvConfig& config() const { return c_; }

  /// One decision per sequence. Full with a refresh when the retrieved blocks are
  /// missing or stale (refresh_interval partial rounds since the last full one) or the
  /// buffer would overflow; full without one while the whole context fits the budget;
  /// else partial. With adaptive_interval the interval is the sequence's own (observe).
  specpipe_view_decision decide(const specpipe_view_sequence& s);
  void observe(std::span<const specpipe_view_observation> observations);
  void forget(int64_t sequence) { interval_.erase(sequence); }
  /// The counters as a JSON object; every one is labelled with the mode.
  std::string metrics_json() const;

 private:
  SpecpvConfig c_;
  int64_t partial_ = 0, full_ = 0, refreshes_ = 0, short_context_ = 0;
  int64_t partial_proposed_ = 0, partial_accepted_ = 0, full_proposed_ = 0, full_accepted_ = 0;
  int64_t rollbacks_ = 0, rolled_back_tokens_ = 0;
  /// adaptive_interval: each sequence's partial rounds before its next full one (absent:
  /// refresh_interval); full rounds it brought forward, and the interval's cuts.
  std::unordered_map<int64_t, int32_t> interval_;
  int64_t early_full_ = 0, interval_cuts_ = 0;
};

}  // namespace specpv
