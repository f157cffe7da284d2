#include "pipeline/verify_planner.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace specpipe {

void FixedGammaPlanner::plan(std::span<const PlanSequence> sequences, const PlanCosts&, std::span<int32_t> gamma) {
  for (size_t i = 0; i < sequences.size(); ++i)
    gamma[i] = std::clamp(sequences[i].requested_gamma, 0, std::max(0, sequences[i].max_gamma));
}

void PluginVerifyPlanner::plan(std::span<const PlanSequence> sequences, const PlanCosts& costs,
                               std::span<int32_t> gamma) {
  if (!plugin_->disabled()) {
    std::vector<specpipe_plan_sequence> in;
    for (const PlanSequence& s : sequences)
      in.push_back({s.request, s.requested_gamma, std::max(0, s.max_gamma), s.context_length});
    const specpipe_plan_costs c{sizeof(specpipe_plan_costs), costs.draft_step_ms, costs.verify_base_ms,
                                costs.verify_token_ms, costs.token_budget};
    std::fill(gamma.begin(), gamma.end(), -1);
    const specpipe_status s = plugin_->call("plan", [&](char* err, size_t n) {
      return plugin_->table().verify_plan->plan(plugin_->handle(), in.data(), static_cast<int32_t>(in.size()), &c,
                                               gamma.data(), err, n);
    });
    if (s > 0) {
      plugin_->count_fallback("declined");
    } else if (s < 0) {
      plugin_->disable("plan_failed");
    } else {
      size_t bad = 0;
      while (bad < sequences.size() && gamma[bad] >= 0 && gamma[bad] <= in[bad].max_gamma) ++bad;
      if (bad == sequences.size()) return;
      plugin_->disable("plan_out_of_range", fmt::format("plan gave gamma {} for sequence {}, allowed 0..{}", gamma[bad],
                                                        in[bad].sequence, in[bad].max_gamma));
    }
  }
  fallback_.plan(sequences, costs, gamma);
}

void PluginVerifyPlanner::observe(std::span<const PlanObservation> observations) {
  if (plugin_->disabled() || !plugin_->table().verify_plan->observe) return;
  std::vector<specpipe_plan_observation> in;
  for (const PlanObservation& o : observations) in.push_back({o.request, o.proposed, o.accepted});
  const specpipe_status s = plugin_->call("observe", [&](char*, size_t) {
    plugin_->table().verify_plan->observe(plugin_->handle(), in.data(), static_cast<int32_t>(in.size()));
    return SPECPIPE_OK;
  });
  if (s != SPECPIPE_OK) plugin_->disable("observe_failed");
}

void PluginVerifyPlanner::forget(RequestId request) {
  if (plugin_->disabled() || !plugin_->table().verify_plan->forget) return;
  const specpipe_status s = plugin_->call("forget", [&](char*, size_t) {
    plugin_->table().verify_plan->forget(plugin_->handle(), request);
    return SPECPIPE_OK;
  });
  if (s != SPECPIPE_OK) plugin_->disable("forget_failed");
}

void CostModel::add_round(int32_t draft_steps, double draft_ms, int64_t window_tokens, double verify_ms) {
  constexpr double kKeep = 0.97;  // about the last 30 rounds count
  if (draft_steps > 0) {
    const double per_step = draft_ms / draft_steps;
    draft_step_ms_ = have_draft_ ? kKeep * draft_step_ms_ + (1 - kKeep) * per_step : per_step;
    have_draft_ = true;
  }
  const double x = static_cast<double>(window_tokens);
  w_ = kKeep * w_ + 1;
  wx_ = kKeep * wx_ + x;
  wy_ = kKeep * wy_ + verify_ms;
  wxx_ = kKeep * wxx_ + x * x;
  wxy_ = kKeep * wxy_ + x * verify_ms;
}

PlanCosts CostModel::costs(int32_t token_budget) const {
  PlanCosts c;
  c.token_budget = token_budget;
  if (w_ <= 0) return c;  // nothing measured yet
  c.draft_step_ms = draft_step_ms_;
  const double mean_x = wx_ / w_, mean_y = wy_ / w_;
  const double var_x = wxx_ / w_ - mean_x * mean_x;
  if (var_x > 1e-6 * std::max(1.0, mean_x * mean_x)) {
    c.verify_token_ms = std::max(0.0, (wxy_ / w_ - mean_x * mean_y) / var_x);
    c.verify_base_ms = std::max(0.0, mean_y - c.verify_token_ms * mean_x);
  } else {
    // One window size seen so far: split the cost evenly between base and tokens, a
    // neutral guess that the next rounds' different sizes correct.
    c.verify_base_ms = mean_y / 2;
    c.verify_token_ms = mean_x > 0 ? mean_y / 2 / mean_x : 0;
  }
  return c;
}

}  // namespace specpipe
