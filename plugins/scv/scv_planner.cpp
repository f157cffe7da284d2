#include "scv_planner.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace specpipe::scv {
namespace {

/// PlannerOptions::min_gain as the planner applies it (a negative one is 0).
double effective_min_gain(const PlannerOptions& options) { return options.min_gain > 0 ? options.min_gain : 0.0; }

double clamp_acceptance(double a) {
  if (!(a > 0)) return 0;  // also NaN
  return a < 1 ? a : 1;
}

/// One more draft for one window: the l-th draft of window w adds a_w^l expected tokens
/// (it counts only if all l drafts are accepted) and costs one verify token.
struct Draft {
  double value;
  int32_t level;
  int32_t window;
};

/// Lowers the largest gammas first until the windows fit `budget` tokens; the caller has
/// checked that gamma 0 for all fits.
void trim_to_budget(std::vector<int32_t>& gamma, int64_t budget) {
  int64_t total = 0;
  for (int32_t g : gamma) total += 1 + g;
  while (total > budget) {
    const int32_t top = *std::max_element(gamma.begin(), gamma.end());
    for (int32_t& g : gamma) {
      if (total <= budget) break;
      if (g == top) {
        --g;
        --total;
      }
    }
  }
}

class MeasuredPlanner {
 public:
  MeasuredPlanner(std::span<const WindowRequest> windows, const RoundCosts& costs, double min_gain)
      : costs_(costs), min_gain_(min_gain), n_(static_cast<int64_t>(windows.size())) {
    free_tokens_ = costs.token_budget > 0 ? costs.token_budget - n_ : std::numeric_limits<int64_t>::max();
    for (size_t w = 0; w < windows.size(); ++w) {
      const double a = clamp_acceptance(windows[w].acceptance);
      double value = 1;
      for (int32_t level = 1; level <= windows[w].cap; ++level) {
        value *= a;
        if (value <= 0) break;  // a = 0, or underflow: never worth a token
        drafts_.push_back({value, level, static_cast<int32_t>(w)});
        max_level_ = std::max(max_level_, level);
      }
    }
    // Ties (a = 1) go to the lower level first, so every window's drafts are taken in
    // order 1, 2, ... and "taken drafts of w" is always a prefix: gamma_w = its count.
    std::sort(drafts_.begin(), drafts_.end(), [](const Draft& x, const Draft& y) {
      if (x.value != y.value) return x.value > y.value;
      if (x.level != y.level) return x.level < y.level;
      return x.window < y.window;
    });
  }

  struct Choice {
    double ratio;         ///< expected tokens per ms
    int32_t top_level;    ///< the largest gamma it gives any window
  };

  /// The best tokens/ms with max gamma <= g_max, and those gammas into `gamma` if given.
  /// For a fixed G the draft cost is a constant, every draft costs one verify token, and
  /// the ratio (T0 + sum of taken values) / (C0 + s * taken) is maximised by the top
  /// drafts by value: adding the next one raises the ratio iff value / s exceeds it, and
  /// once it does not, no later (smaller) one can. min_gain tightens that test.
  Choice best_for(int32_t g_max, std::vector<int32_t>* gamma) const {
    double tokens = static_cast<double>(n_);
    double cost = costs_.verify_base_ms + costs_.verify_token_ms * static_cast<double>(n_) +
                  costs_.draft_step_ms * g_max + (g_max > 0 ? costs_.draft_base_ms : 0);
    const double bar = costs_.verify_token_ms * (1 + min_gain_);
    int64_t taken = 0;
    int32_t top_level = 0;
    for (const Draft& d : drafts_) {
      if (taken >= free_tokens_) break;
      if (d.level > g_max) continue;
      if (d.value * cost <= bar * tokens) break;  // value / s <= (1 + min_gain) * ratio
      tokens += d.value;
      cost += costs_.verify_token_ms;
      ++taken;
      top_level = std::max(top_level, d.level);
      if (gamma) (*gamma)[d.window] = d.level;
    }
    return {tokens / cost, top_level};
  }

  int32_t max_level() const { return max_level_; }

 private:
  RoundCosts costs_;
  double min_gain_;
  int64_t n_;
  int64_t free_tokens_;
  int32_t max_level_ = 0;
  std::vector<Draft> drafts_;
};

/// Whether any first draft would be taken at G = 1 (MeasuredPlanner::best_for(1)'s first
/// test, for the best of them): if none is, the plan is 0 for all and no larger G can
/// win. O(n), where the planner sorts n x cap drafts: under load, where speculation is
/// off, the common case, and a round's planning is on the scheduler's critical path.
bool first_draft_pays(std::span<const WindowRequest> windows, const RoundCosts& costs, double min_gain) {
  const auto n = static_cast<double>(windows.size());
  if (costs.token_budget > 0 && costs.token_budget - static_cast<int64_t>(windows.size()) < 1) return false;
  double best = 0;
  for (const WindowRequest& w : windows)
    if (w.cap >= 1) best = std::max(best, clamp_acceptance(w.acceptance));
  const double cost = costs.verify_base_ms + costs.verify_token_ms * n + costs.draft_step_ms + costs.draft_base_ms;
  return best > 0 && best * cost > costs.verify_token_ms * (1 + min_gain) * n;
}

/// The round's cost by the line (RoundCosts' model).
double line_cost_ms(const RoundCosts& costs, std::span<const int32_t> gamma) {
  int64_t tokens = 0;
  int32_t g_max = 0;
  for (int32_t g : gamma) {
    tokens += 1 + g;
    g_max = std::max(g_max, g);
  }
  return (g_max > 0 ? costs.draft_base_ms : 0) + costs.draft_step_ms * g_max + costs.verify_base_ms +
         costs.verify_token_ms * static_cast<double>(tokens);
}

/// One sequence's round cost at each gamma in [0, cap]: measured where round_ms_by_gamma
/// has it; elsewhere the line, moved by the nearest measured gamma's difference from it
/// (at one sequence on a device the line runs below every measured gamma: drafting's
/// cost bends with g, which one line cannot follow, and an unmeasured gamma that looked
/// free would be tried again and again).
std::vector<double> one_sequence_costs(const RoundCosts& costs, int32_t cap) {
  const auto line = [&](int32_t g) { return line_cost_ms(costs, std::span<const int32_t>(&g, 1)); };
  const auto measured = [&](int32_t g) {
    return g < static_cast<int32_t>(costs.round_ms_by_gamma.size()) && costs.round_ms_by_gamma[g] > 0;
  };
  std::vector<double> out(static_cast<size_t>(cap) + 1);
  for (int32_t g = 0; g <= cap; ++g) {
    if (measured(g)) {
      out[g] = costs.round_ms_by_gamma[g];
      continue;
    }
    int32_t near = -1;
    for (int32_t d = 1; near < 0 && d < static_cast<int32_t>(costs.round_ms_by_gamma.size()) + cap; ++d) {
      if (g - d >= 0 && measured(g - d)) near = g - d;
      else if (measured(g + d)) near = g + d;
    }
    out[g] = line(g) + (near >= 0 ? std::max(0.0, costs.round_ms_by_gamma[near] - line(near)) : 0.0);
  }
  return out;
}

/// plan_round for one sequence whose rounds are measured by gamma: each gamma's expected
/// tokens over its round's cost, the best (a larger gamma by min_gain; the previous one
/// unless another beats it by single_switch_gain), within the token budget.
int32_t plan_one(const WindowRequest& window, const RoundCosts& costs, const PlannerOptions& options,
                 double min_gain) {
  int32_t cap = std::max(window.cap, 0);
  if (costs.token_budget > 0) cap = std::min(cap, costs.token_budget - 1);
  if (options.hold_previous && options.previous_max_gamma >= 0 && options.previous_max_gamma <= cap)
    return options.previous_max_gamma;
  const std::vector<double> cost = one_sequence_costs(costs, cap);
  const auto rate = [&](int32_t g) { return cost[g] > 0 ? expected_tokens(window.acceptance, g) / cost[g] : 0.0; };
  int32_t best = 0;
  for (int32_t g = 1; g <= cap; ++g)
    if (rate(g) > rate(best) * (1 + min_gain)) best = g;
  const int32_t previous = options.previous_max_gamma;
  if (previous >= 0 && previous <= cap && best != previous &&
      rate(best) <= rate(previous) * (1 + options.single_switch_gain))
    best = previous;
  return best;
}

}  // namespace

// The bound on each G's rate: at most every draft of level <= G taken (their values
// summed) over the round's cost without their verify tokens; met with a margin of 1e-9
// (relative), so a rounding difference from the search's sums never ends it where the
// search would not.
bool some_level_could_win(std::span<const WindowRequest> windows, const RoundCosts& costs,
                          const PlannerOptions& options) {
  const double min_gain = effective_min_gain(options);
  const auto n = static_cast<double>(windows.size());
  const double base = costs.verify_base_ms + costs.verify_token_ms * n;
  const double plain = base > 0 ? n / base : std::numeric_limits<double>::infinity();
  constexpr double kMargin = 1 + 1e-9;
  int32_t max_cap = 0;
  for (const WindowRequest& w : windows) max_cap = std::max(max_cap, w.cap);
  std::vector<double> power(windows.size(), 1.0);  // a_w^g
  double values = 0;                                // every draft of level <= g
  for (int32_t g = 1; g <= max_cap; ++g) {
    for (size_t w = 0; w < windows.size(); ++w)
      if (g <= windows[w].cap) values += power[w] *= clamp_acceptance(windows[w].acceptance);
    const double cost = base + costs.draft_step_ms * g + costs.draft_base_ms;
    const double bound = cost > 0 ? (n + values) / cost : std::numeric_limits<double>::infinity();
    if (bound * kMargin > plain * (1 + min_gain)) return true;  // the search might pick g
    // ... or keep the previous round's G over 0 (hysteresis).
    if (g == options.previous_max_gamma && bound * kMargin * (1 + options.switch_gain) >= plain) return true;
  }
  // (A previous G beyond every cap is never reached by the search: no hysteresis.)
  return false;
}

double expected_tokens(double acceptance, int32_t gamma) {
  const double a = clamp_acceptance(acceptance);
  double sum = 1, term = 1;
  for (int32_t l = 1; l <= gamma; ++l) {
    term *= a;
    sum += term;
  }
  return sum;
}

double round_cost_ms(const RoundCosts& costs, std::span<const int32_t> gamma) {
  if (gamma.size() == 1 && !costs.round_ms_by_gamma.empty()) {
    const int32_t g = std::max(gamma[0], 0);
    return one_sequence_costs(costs, g)[static_cast<size_t>(g)];
  }
  return line_cost_ms(costs, gamma);
}

bool drafting_could_pay(const RoundCosts& costs, const RoundPlan& plan, int32_t cap) {
  if (!plan.measured || cap < 1 || plan.cost_ms <= 0) return false;
  const int32_t top = plan.gamma.empty() ? 0 : *std::max_element(plan.gamma.begin(), plan.gamma.end());
  // g drafts all accepted add g tokens; they cost g window tokens, the steps beyond the
  // round's G, and the drafter's fixed cost if the round drafts nothing yet. The ratio
  // is monotone in g between the kinks, so its ends and the kink decide. At half that
  // cost: the drafting costs a sequence was turned off on may be stale or inflated (a
  // stall, a shape's first rounds), and a probe is what measures them again; where
  // drafting costs several plain rounds (a large batch on a device) even half does not
  // pay.
  constexpr double kProbeCostShare = 0.5;
  for (const int32_t g : {1, std::clamp(top, 1, cap), cap}) {
    const double extra = kProbeCostShare * (costs.verify_token_ms * g + costs.draft_step_ms * std::max(0, g - top) +
                                            (top == 0 ? costs.draft_base_ms : 0));
    if ((plan.expected_tokens + g) * plan.cost_ms > plan.expected_tokens * (plan.cost_ms + extra)) return true;
  }
  return false;
}

RoundPlan plan_round(std::span<const WindowRequest> windows, const RoundCosts& costs, const PlannerOptions& options) {
  RoundPlan plan;
  const size_t n = windows.size();
  plan.gamma.assign(n, 0);
  plan.measured = costs.measured();
  const int64_t budget = costs.token_budget > 0 ? costs.token_budget : std::numeric_limits<int64_t>::max();
  plan.budget_exceeded = static_cast<int64_t>(n) > budget;

  if (!plan.budget_exceeded && n > 0) {
    if (!plan.measured) {
      for (size_t i = 0; i < n; ++i) plan.gamma[i] = std::clamp(windows[i].requested, 0, std::max(windows[i].cap, 0));
      trim_to_budget(plan.gamma, budget);
    } else if (n == 1 && !costs.round_ms_by_gamma.empty()) {
      plan.gamma[0] = plan_one(windows[0], costs, options, effective_min_gain(options));
    } else if (const double min_gain = effective_min_gain(options);
               first_draft_pays(windows, costs, min_gain) &&
               (!options.bound_first || some_level_could_win(windows, costs, options))) {
      const MeasuredPlanner planner(windows, costs, min_gain);
      int32_t best_g = 0;
      double best = planner.best_for(0, nullptr).ratio;
      double previous = -1;  // the previous round's G's rate, if within reach
      if (options.previous_max_gamma == 0) previous = best;
      for (int32_t g = 1; g <= planner.max_level(); ++g) {
        const auto choice = planner.best_for(g, nullptr);
        if (g == options.previous_max_gamma) previous = choice.ratio;
        if (choice.ratio > best * (1 + min_gain)) {
          best = choice.ratio;
          best_g = g;
        }
        // No level-g draft beat the bar: each has value <= s * R_g, and every deeper one
        // less, so any plan at G > g is a plan at g plus drafts worth less than R_g per
        // ms plus more draft steps - it cannot beat R_g (exact at min_gain 0).
        if (choice.top_level < g) break;
      }
      // Hysteresis: keep the previous G unless the best beats it by switch_gain.
      if (previous > 0 && best_g != options.previous_max_gamma && best <= previous * (1 + options.switch_gain))
        best_g = options.previous_max_gamma;
      if (best_g > 0) planner.best_for(best_g, &plan.gamma);
    }
  }

  for (size_t i = 0; i < n; ++i) plan.expected_tokens += expected_tokens(windows[i].acceptance, plan.gamma[i]);
  if (plan.measured) {
    plan.cost_ms = round_cost_ms(costs, plan.gamma);
    const std::vector<int32_t> zeros(n, 0);
    const double plain_cost = round_cost_ms(costs, zeros);
    plan.plain_tokens_per_ms = plain_cost > 0 ? static_cast<double>(n) / plain_cost : 0;
  }
  return plan;
}

}  // namespace specpipe::scv
