#pragma once
/// The `verify_plan` slot: how many drafts each sequence gets this round. The built-in
/// strategy gives every sequence its requested gamma; a plugin (SCV) chooses from
/// acceptance estimates and the measured costs the CostModel keeps.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "pipeline/drafter.h"
#include "pipeline/plugin_instance.h"

namespace specpipe {

struct PlanSequence {
  RequestId request;
  int32_t gamma;           ///< the request's gamma (ABI: requested_gamma)
  /// The most it may get this round: slots.drafter.max_gamma, less near the end of the
  /// model's positions, 0 for a request that does not speculate (ABI: max_gamma).
  int32_t gamma_cap;
  int32_t context_length;
};

struct PlanCosts {
  double draft_step_ms = 0;    ///< one more draft step for the batch (the marginal cost)
  /// A round's fixed cost: the verify forward at zero window tokens plus what drafting
  /// costs whatever the gamma (a device drafter's sync and catch-up window).
  double verify_base_ms = 0;
  double verify_token_ms = 0;  ///< each window token's extra cost
  int32_t token_budget = 0;    ///< most window tokens per verify pass (0: none)
};

struct PlanObservation {
  RequestId request;
  int32_t proposed;
  int32_t accepted;
};

class VerifyPlanner {
 public:
  virtual ~VerifyPlanner() = default;
  virtual std::string name() const = 0;
  /// gamma[i] in [0, sequences[i].gamma_cap].
  virtual void plan(std::span<const PlanSequence> sequences, const PlanCosts& costs, std::span<int32_t> gamma) = 0;
  virtual void observe(std::span<const PlanObservation> /*observations*/) {}
  virtual void forget(RequestId /*request*/) {}
  virtual nlohmann::json metrics() const { return nlohmann::json::object(); }
};

/// The built-in strategy: every sequence gets its requested gamma (within its limit).
class FixedGammaPlanner final : public VerifyPlanner {
 public:
  std::string name() const override { return "fixed"; }
  void plan(std::span<const PlanSequence> sequences, const PlanCosts& costs, std::span<int32_t> gamma) override;
};

/// A plugin in the slot. Outputs are checked; a failing or misbehaving plugin is disabled
/// and the fixed strategy plans from then on (counted in metrics()).
class PluginVerifyPlanner final : public VerifyPlanner {
 public:
  explicit PluginVerifyPlanner(std::shared_ptr<PluginInstance> plugin) : plugin_(std::move(plugin)) {}
  std::string name() const override { return plugin_->name(); }
  void plan(std::span<const PlanSequence> sequences, const PlanCosts& costs, std::span<int32_t> gamma) override;
  void observe(std::span<const PlanObservation> observations) override;
  void forget(RequestId request) override;
  nlohmann::json metrics() const override { return plugin_->metrics(); }

 private:
  std::shared_ptr<PluginInstance> plugin_;
  FixedGammaPlanner fallback_;
};

/// y ~ intercept + slope * x over the recent points, by exponentially weighted least
/// squares (about the last 30 points count).
class RecentLine {
 public:
  void add(double x, double y);
  bool empty() const { return w_ <= 0; }
  /// Whether x varied enough to tell slope from intercept: its variance is above
  /// `min_variance` (0: any variance beyond rounding).
  bool has_slope(double min_variance = 0) const;
  double raw_slope() const;  ///< the fitted slope, any sign; needs has_slope()
  double slope() const;      ///< >= 0; needs has_slope()
  double intercept() const;  ///< >= 0, with slope(); needs has_slope()
  double mean_x() const { return wx_ / w_; }
  double mean_y() const { return wy_ / w_; }

 private:
  double w_ = 0, wx_ = 0, wy_ = 0, wxx_ = 0, wxy_ = 0;
};

/// Running estimates of the costs a planner needs, from each round's measurements: draft
/// time and verify time, each a line over the round's draft steps / window tokens. A
/// drafter's fixed cost per round (on a device: one sync and the catch-up window per
/// chain) goes to the round's fixed cost, so the planner weighs one more draft at its
/// marginal price. Until the draft steps have varied by about a step, or when the fit
/// is implausible (a negative fixed cost), all draft time counts per step: the per-step
/// cost is never above the plain average.
class CostModel {
 public:
  void add_round(int32_t draft_steps, double draft_ms, int64_t window_tokens, double verify_ms);
  PlanCosts costs(int32_t token_budget) const;

 private:
  RecentLine draft_;   // draft_ms ~ fixed + per step * draft_steps (rounds that drafted)
  RecentLine verify_;  // verify_ms ~ base + per token * window_tokens
};

}  // namespace specpipe
