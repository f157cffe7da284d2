#pragma once
/// SCV's config: the JSON object given to create(), parsed once into a validated struct
/// (README.md, "Config").
#include <cstdint>
#include <string_view>

namespace specpipe::scv {

/// The largest gamma SCV plans for: the planner's work grows with batch x gamma, and no
/// drafter here proposes more than a few tens of tokens a round.
inline constexpr int32_t kGammaLimit = 64;

struct ScvConfig {
  double prior_acceptance = 0.6;  ///< [0, 1]: acceptance assumed before any evidence
  double prior_weight = 16;       ///< > 0: pseudo-drafts behind each prior
  int32_t probe_interval = 16;    ///< >= 1: rounds at gamma 0 before a probe at gamma 1
  int32_t probe_rounds = 4;       ///< >= 1: consecutive rounds a probe lasts
  int32_t max_gamma = 0;          ///< [0, model max_gamma]: cap on every gamma
  double min_gain = 0.01;         ///< >= 0: relative improvement a step must bring
  int32_t memory_rounds = 16;     ///< >= 1: rounds of a sequence's evidence that count
  double switch_gain = 0.03;      ///< >= 0: what another largest gamma must gain over the last round's
  /// One sequence: plan by the host's measured round cost per gamma where it gives them
  /// (ABI 1.3); false: the line alone, as before (an A/B on a device).
  bool costs_by_gamma = true;
  /// >= 0: switch_gain for one sequence planned by its measured rounds (see
  /// PlannerOptions::single_switch_gain).
  double single_switch_gain = 0.2;
  /// >= 0: from this batch size up a probe that did not turn drafting on doubles the wait
  /// before the next probe at that batch size (up to 16x probe_interval); 0: never.
  int32_t probe_backoff_batch = 4;
  /// >= 0: one sequence planned by its measured rounds keeps a gamma the host has not
  /// measured yet for up to this many rounds in a row, so that it gets measured; 0: never.
  int32_t measure_rounds = 12;
};

/// Parses and validates `json` (empty text: all defaults; max_gamma defaults to
/// model_max_gamma, which must be >= 0). Throws ConfigError naming the key for unknown
/// keys, repeated keys, values of the wrong kind or out of range, and malformed JSON.
ScvConfig parse_scv_config(std::string_view json, int32_t model_max_gamma);

}  // namespace specpipe::scv
