#include "pipeline/verify_planner.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace specpipe {

void FixedGammaPlanner::plan(std::span<const PlanSequence> sequences, const PlanCosts&, std::span<int32_t> gamma) {
  for (size_t i = 0; i < sequences.size(); ++i)
    gamma[i] = std::clamp(sequences[i].gamma, 0, std::max(0, sequences[i].gamma_cap));
}

void PluginVerifyPlanner::plan(std::span<const PlanSequence> sequences, const PlanCosts& costs,
                               std::span<int32_t> gamma) {
  if (!plugin_->disabled()) {
    std::vector<specpipe_plan_sequence> in;
    for (const PlanSequence& s : sequences)
      in.push_back({s.request, s.gamma, std::max(0, s.gamma_cap), s.context_length});
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

void RecentLine::add(double x, double y) {
  constexpr double kKeep = 0.97;  // about the last 30 points count
  w_ = kKeep * w_ + 1;
  wx_ = kKeep * wx_ + x;
  wy_ = kKeep * wy_ + y;
  wxx_ = kKeep * wxx_ + x * x;
  wxy_ = kKeep * wxy_ + x * y;
}

bool RecentLine::has_slope(double min_variance) const {
  const double mx = mean_x();
  const double var = wxx_ / w_ - mx * mx;
  return var > 1e-6 * std::max(1.0, mx * mx) && var > min_variance;
}

double RecentLine::raw_slope() const {
  const double mx = mean_x();
  return (wxy_ / w_ - mx * mean_y()) / (wxx_ / w_ - mx * mx);
}

double RecentLine::slope() const { return std::max(0.0, raw_slope()); }

double RecentLine::intercept() const { return std::max(0.0, mean_y() - slope() * mean_x()); }

void CostModel::add_round(int32_t draft_steps, double draft_ms, int64_t window_tokens, double verify_ms) {
  if (draft_steps > 0) draft_.add(draft_steps, draft_ms);
  verify_.add(static_cast<double>(window_tokens), verify_ms);
}

PlanCosts CostModel::costs(int32_t token_budget) const {
  PlanCosts c;
  c.token_budget = token_budget;
  if (verify_.empty()) return c;  // nothing measured yet
  if (verify_.has_slope()) {
    c.verify_token_ms = verify_.slope();
    c.verify_base_ms = verify_.intercept();
  } else {
    // One window size seen so far: split the cost evenly between base and tokens, a
    // neutral guess that the next rounds' different sizes correct.
    c.verify_base_ms = verify_.mean_y() / 2;
    c.verify_token_ms = verify_.mean_x() > 0 ? verify_.mean_y() / 2 / verify_.mean_x() : 0;
  }
  if (draft_.empty()) return c;
  c.draft_step_ms = draft_.mean_y() / draft_.mean_x();  // everything per step
  // Rounds of nearly one length make the slope noise; a variance of half a step or more
  // (probes at other gammas, sequences of different lengths) tells it apart.
  constexpr double kMinStepVariance = 0.5;
  if (draft_.has_slope(kMinStepVariance)) {
    const double slope = draft_.raw_slope();
    const double fixed = draft_.mean_y() - slope * draft_.mean_x();
    if (slope > 0 && fixed >= 0) {
      c.draft_step_ms = slope;
      c.verify_base_ms += fixed;  // paid once a round, whatever the gamma
    }
  }
  return c;
}

}  // namespace specpipe
