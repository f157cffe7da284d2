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
                                costs.verify_token_ms, costs.token_budget, costs.draft_base_ms};
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

size_t CostModel::bucket_of(int32_t sequences) {
  if (sequences <= 1) return 0;
  const auto b = static_cast<size_t>(std::lround(std::log2(static_cast<double>(sequences))));
  return std::min(b, kBuckets - 1);
}

double CostModel::token_ms(const Bucket& b, const PlanCosts& pooled) const {
  // This batch size's slope once its window lengths have varied by a tenth (drafts of
  // different lengths, rounds with and without drafts); until then the pooled one.
  if (!b.verify.empty()) {
    const double spread = 0.1 * b.verify.mean_x();
    if (b.verify.has_slope(std::max(1.0, spread * spread))) return b.verify.slope();
  }
  return pooled.verify_token_ms;
}

void CostModel::add_round(const RoundSample& r) {
  if (r.draft_steps > 0) draft_.add(r.draft_steps, r.draft_ms);
  verify_.add(static_cast<double>(r.window_tokens), r.verify_ms);
  if (r.sequences <= 0) return;
  Bucket& b = buckets_[bucket_of(r.sequences)];
  b.verify.add(static_cast<double>(r.window_tokens), r.verify_ms);
  if (!(r.wall_ms > 0)) return;
  if (r.draft_steps == 0) {
    b.plain[b.plain_seen++ % kPlainKept] = {static_cast<double>(r.sequences), r.wall_ms};
    b.since_plain = 0;
  } else {
    ++b.since_plain;
    // The drafts' window tokens at this batch size's slope come off: what is left is
    // plain, the drafter's fixed cost and its steps.
    const auto extra = static_cast<double>(r.window_tokens - r.sequences);
    b.drafting.add(r.draft_steps, r.wall_ms - token_ms(b, pooled(0)) * extra);
  }
}

double CostModel::Bucket::plain_at(double n, double token_ms) const {
  const size_t kept = std::min(plain_seen, kPlainKept);
  std::array<double, kPlainKept> at{};
  for (size_t i = 0; i < kept; ++i)
    at[i] = plain[i].wall_ms + (token_ms < 0 ? 0.0 : token_ms * (n - plain[i].sequences));
  std::sort(at.begin(), at.begin() + static_cast<std::ptrdiff_t>(kept));
  return kept % 2 ? at[kept / 2] : (at[kept / 2 - 1] + at[kept / 2]) / 2;
}

bool CostModel::plain_due(int32_t sequences) const {
  if (sequences <= 0) return false;
  const Bucket& b = buckets_[bucket_of(sequences)];
  return b.since_plain >= (b.plain_seen < kPlainKept ? 2 : kPlainEvery);
}

PlanCosts CostModel::pooled(int32_t token_budget) const {
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
      c.draft_base_ms = fixed;  // paid once a round that drafts, whatever the gamma
    }
  }
  return c;
}

PlanCosts CostModel::costs(int32_t sequences, int32_t token_budget) const {
  PlanCosts c = pooled(token_budget);
  if (sequences <= 0) return c;
  const Bucket& b = buckets_[bucket_of(sequences)];
  const bool no_plain = b.plain_seen == 0;
  if (no_plain && b.drafting.empty()) return c;  // a batch size not seen yet
  const double t = token_ms(b, c);
  const auto n = static_cast<double>(sequences);
  // A round without drafts at this batch size: measured (the median of the last few), or
  // else (no such round yet) the drafting line at zero steps, or else the pooled verify
  // line at n tokens.
  double plain = no_plain ? c.verify_base_ms + t * n : b.plain_at(n, t);
  if (!b.drafting.empty()) {
    // Drafting rounds whose steps varied by about a step give the line: its slope (>= 0:
    // a flat line means the steps cost nothing next to the drafter's fixed cost) is a
    // step, and what it has above plain at zero steps the fixed cost. Rounds of about one
    // length, or a line below plain at zero steps: all they cost beyond plain is per step.
    const RecentLine& d = b.drafting;
    // Drafting rounds are compared with plain at the batch sizes they were measured at.
    double plain_ref = no_plain ? plain : b.plain_at(0, -1);
    constexpr double kMinStepVariance = 0.5;
    c.draft_base_ms = 0;
    c.draft_step_ms = -1;
    if (d.has_slope(kMinStepVariance)) {
      const double step = std::max(0.0, d.raw_slope());
      const double at_zero = d.mean_y() - step * d.mean_x();
      if (no_plain && at_zero > 0) plain = plain_ref = at_zero;
      if (at_zero >= plain_ref) {
        c.draft_step_ms = step;
        c.draft_base_ms = at_zero - plain_ref;
      }
    }
    if (c.draft_step_ms < 0) c.draft_step_ms = std::max(0.0, d.mean_y() - plain_ref) / d.mean_x();
  }
  c.verify_token_ms = t;
  c.verify_base_ms = std::max(0.0, plain - t * n);
  return c;
}

}  // namespace specpipe
