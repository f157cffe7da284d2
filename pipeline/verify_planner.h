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
  int32_t requested_gamma;
  int32_t max_gamma;       ///< the most it may get (context limit)
  int32_t context_length;
};

struct PlanCosts {
  double draft_step_ms = 0;    ///< one draft step for the batch
  double verify_base_ms = 0;   ///< verify forward at zero window tokens
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
  /// gamma[i] in [0, sequences[i].max_gamma].
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

/// Running estimates of the costs a planner needs, from each round's measurements:
/// draft time per draft step (exponential average) and verify time as a linear function
/// of the round's window tokens (exponentially weighted least squares).
class CostModel {
 public:
  void add_round(int32_t draft_steps, double draft_ms, int64_t window_tokens, double verify_ms);
  PlanCosts costs(int32_t token_budget) const;

 private:
  double draft_step_ms_ = 0;
  bool have_draft_ = false;
  // Weighted sums for verify_ms ~ base + slope * tokens.
  double w_ = 0, wx_ = 0, wy_ = 0, wxx_ = 0, wxy_ = 0;
};

}  // namespace specpipe
