#include "pipeline/verify_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

namespace specpipe {

namespace {
/// Rounds of one sequence skipped per draft length before they count
/// (CostModel::kOneSkipped); SPECPIPE_ONE_SKIPPED=N (0..64) overrides it for A/B
/// timings in one build (docs/BENCHMARKS.md section 8: fewer once shapes are warm).
size_t one_skipped() {
  static const size_t n = [] {
    const char* env = std::getenv("SPECPIPE_ONE_SKIPPED");
    if (env == nullptr || *env == '\0') return CostModel::kOneSkipped;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    return *end == '\0' && v >= 0 && v <= 64 ? static_cast<size_t>(v) : CostModel::kOneSkipped;
  }();
  return n;
}
}  // namespace

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
    const specpipe_plan_costs c{sizeof(specpipe_plan_costs),
                                costs.draft_step_ms,
                                costs.verify_base_ms,
                                costs.verify_token_ms,
                                costs.token_budget,
                                costs.draft_base_ms,
                                costs.round_ms_by_gamma.empty() ? nullptr : costs.round_ms_by_gamma.data(),
                                static_cast<int32_t>(costs.round_ms_by_gamma.size())};
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
  if (r.catch_up) {
    if (r.sequences <= 1 || r.draft_steps <= 0 || !(r.wall_ms > 0)) return;
    // What it cost beyond a usual round of its size, gamma and window (drafting costs
    // and all); before this size's costs are measured, nothing is known to subtract.
    const PlanCosts c = usual_costs(r.sequences, 0);
    if (c.verify_base_ms <= 0 && c.verify_token_ms <= 0) return;
    const double usual = c.draft_base_ms + c.draft_step_ms * r.draft_steps + c.verify_base_ms +
                         c.verify_token_ms * static_cast<double>(r.window_tokens);
    Bucket& b = buckets_[bucket_of(r.sequences)];
    b.catch_up_ms = kCatchUpKeep * b.catch_up_ms + std::max(0.0, r.wall_ms - usual);
    b.catch_up_rounds = kCatchUpKeep * b.catch_up_rounds + 1;
    return;
  }
  if (r.draft_steps > 0) draft_.add(r.draft_steps, r.draft_ms);
  verify_.add(static_cast<double>(r.window_tokens), r.verify_ms);
  if (r.sequences <= 0) return;
  if (r.sequences == 1 && r.draft_steps <= kOneMaxGamma && r.wall_ms > 0) {
    OneLength& l = one_[static_cast<size_t>(std::max(0, r.draft_steps))];
    l.last = ++one_rounds_;
    if (l.seen++ >= one_skipped()) l.wall_ms[(l.seen - one_skipped() - 1) % kOneKept] = r.wall_ms;
  }
  Bucket& b = buckets_[bucket_of(r.sequences)];
  b.verify.add(static_cast<double>(r.window_tokens), r.verify_ms);
  if (!(r.wall_ms > 0)) return;
  if (r.draft_steps == 0) {
    b.plain[b.plain_seen++ % kPlainKept] = {static_cast<double>(r.sequences), r.wall_ms};
    b.since_plain = 0;
  } else {
    ++b.since_plain;
    b.catch_up_ms *= kCatchUpKeep;
    b.catch_up_rounds = kCatchUpKeep * b.catch_up_rounds + 1;
    // Kept whole: the drafts' window tokens come off at the slope known when the line is
    // read (with the slope of the time each round was added, rounds added as the slope
    // moved disagreed, and a drafting cost counted twice or not at all froze SCV off).
    b.drafting[b.drafting_seen++ % kDraftKept] = {static_cast<double>(r.draft_steps),
                                                   static_cast<double>(r.window_tokens - r.sequences), r.wall_ms};
  }
}

namespace {

/// What a device round usually costs, from a few (sorted) wall times: the lower third,
/// not the median. What slows a round only ever adds (a shape's first two rounds run
/// eagerly and then capture a CUDA graph, a catch-up, a stall), so of three rounds of a
/// new shape two are slow and the median would be one of them.
template <typename It, typename Ms>
double usual_ms(It first, size_t count, Ms ms) {
  return ms(*(first + static_cast<std::ptrdiff_t>((count - 1) / 3)));
}

/// What a round of one shape typically costs, from a few wall times: the mean of those
/// within twice the least. Not the lower third: at one sequence rounds of one draft
/// length differ by what they are (a draft-ahead chain taken or missed, its drafts
/// accepted or not), and the mean of those is what the length costs; a shape's first
/// rounds (eager, a graph's capture: several times a round) are what is left out.
double typical_ms(std::span<const double> walls) {
  const double least = *std::min_element(walls.begin(), walls.end());
  double sum = 0, count = 0;
  for (const double ms : walls)
    if (ms <= 2 * least) sum += ms, count += 1;
  return sum / count;
}

/// Calls fn(first, count) for each run of one draft length among the first `kept` of `at`
/// (sorted by length).
template <typename Rounds, typename Fn>
void for_each_length(const Rounds& at, size_t kept, Fn fn) {
  for (size_t first = 0, end = 0; first < kept; first = end) {
    for (end = first; end < kept && at[end].steps == at[first].steps;) ++end;
    fn(first, end - first);
  }
}

/// Whether some draft length has `usual` rounds among the first `kept` of `at` (sorted
/// by length).
template <typename Rounds>
bool has_usual_length(const Rounds& at, size_t kept, size_t usual) {
  bool any = false;
  for_each_length(at, kept, [&](size_t, size_t count) { any = any || count >= usual; });
  return any;
}

}  // namespace

size_t CostModel::Bucket::sorted_drafting(std::array<DraftRound, kDraftKept>& at, double token_ms) const {
  const size_t kept = std::min(drafting_seen, kDraftKept);
  at = drafting;
  // What is left of a round less its drafts' window tokens: plain, the drafter's fixed
  // cost and its steps.
  for (size_t i = 0; i < kept; ++i) at[i].ms = at[i].wall_ms - token_ms * at[i].extra_tokens;
  std::sort(at.begin(), at.begin() + static_cast<std::ptrdiff_t>(kept),
            [](const DraftRound& x, const DraftRound& y) { return x.steps != y.steps ? x.steps < y.steps : x.ms < y.ms; });
  return kept;
}

bool CostModel::Bucket::has_drafting_line() const {
  std::array<DraftRound, kDraftKept> at;
  const size_t kept = sorted_drafting(at, 0);
  // Rounds spread over many lengths, none with kUsualRounds, still make a line once
  // there are enough of them: only a server's first few are all new shapes.
  return kept >= 2 * kUsualRounds || has_usual_length(at, kept, kUsualRounds);
}

CostModel::DraftLine CostModel::Bucket::drafting_line(double token_ms) const {
  std::array<DraftRound, kDraftKept> at;
  const size_t kept = sorted_drafting(at, token_ms);
  // Per draft length with kUsualRounds rounds or more among those kept (every length if
  // none has that many), its usual cost, weighted by its rounds: least squares over
  // those. Fewer may all be a new shape's slow rounds, and one such point among good ones
  // tilts the line (a negative slope puts every cost in the fixed part).
  const bool any_usual = has_usual_length(at, kept, kUsualRounds);
  double w = 0, wx = 0, wy = 0, wxx = 0, wxy = 0;
  for_each_length(at, kept, [&](size_t first, size_t count) {
    if (any_usual && count < kUsualRounds) return;
    const double y = usual_ms(at.begin() + static_cast<std::ptrdiff_t>(first), count,
                              [](const DraftRound& r) { return r.ms; });
    const auto c = static_cast<double>(count);
    const double x = at[first].steps;
    w += c, wx += c * x, wy += c * y, wxx += c * x * x, wxy += c * x * y;
  });
  DraftLine line;
  line.mean_steps = wx / w;
  line.mean_ms = wy / w;
  line.step_variance = wxx / w - line.mean_steps * line.mean_steps;
  if (line.step_variance > 1e-9) line.slope = (wxy / w - line.mean_steps * line.mean_ms) / line.step_variance;
  return line;
}

double CostModel::Bucket::plain_at(double n, double token_ms) const {
  const size_t kept = std::min(plain_seen, kPlainKept);
  std::array<double, kPlainKept> at{};
  for (size_t i = 0; i < kept; ++i)
    at[i] = plain[i].wall_ms + (token_ms < 0 ? 0.0 : token_ms * (n - plain[i].sequences));
  std::sort(at.begin(), at.begin() + static_cast<std::ptrdiff_t>(kept));
  return usual_ms(at.begin(), kept, [](double ms) { return ms; });
}

bool CostModel::plain_due(int32_t sequences) const {
  if (sequences <= 0) return false;
  const Bucket& b = buckets_[bucket_of(sequences)];
  // Too few yet at this size: plain first, kUsualRounds of them (a new shape's first two
  // rounds are slow), so that a strategy is fed neither the pooled estimates (blind to
  // the batch size) nor a plain round made dear by its shape's first sightings, which
  // made drafting look cheap beside it.
  if (b.plain_seen < kUsualRounds) return true;
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

CostModel::DraftCosts CostModel::Bucket::draft_costs(double token_ms, double& plain_ref, bool plain_measured) const {
  // Drafting rounds whose steps varied by about a step give the line: its slope (>= 0: a
  // flat line means the steps cost nothing next to the drafter's fixed cost) is a step,
  // and what it has above plain at zero steps the fixed cost. Rounds of about one length,
  // or a line below plain at zero steps: all they cost beyond plain is per step.
  const DraftLine d = drafting_line(token_ms);
  constexpr double kMinStepVariance = 0.5;
  if (d.step_variance > kMinStepVariance) {
    const double step = std::max(0.0, d.slope);
    const double at_zero = d.mean_ms - step * d.mean_steps;
    if (!plain_measured && at_zero > 0) plain_ref = at_zero;
    if (at_zero >= plain_ref) return {step, at_zero - plain_ref};
  }
  return {std::max(0.0, d.mean_ms - plain_ref) / d.mean_steps, 0};
}

const CostModel::Bucket* CostModel::nearest_drafting(size_t k) const {
  // The nearest size first; of two as near, the larger (drafting costs grow with the
  // batch: the cautious guess).
  for (size_t d = 1; d < kBuckets; ++d)
    for (const size_t j : {k + d, k - d})
      if (j < kBuckets && buckets_[j].plain_seen > 0 && buckets_[j].has_drafting_line()) return &buckets_[j];
  return nullptr;
}

PlanCosts CostModel::costs(int32_t sequences, int32_t token_budget) const {
  PlanCosts c = usual_costs(sequences, token_budget);
  if (sequences > 1) {
    const Bucket& b = buckets_[bucket_of(sequences)];
    if (b.catch_up_rounds > 0) c.draft_base_ms += b.catch_up_ms / b.catch_up_rounds;
  }
  return c;
}

PlanCosts CostModel::usual_costs(int32_t sequences, int32_t token_budget) const {
  PlanCosts c = pooled(token_budget);
  if (sequences <= 0) return c;
  const size_t k = bucket_of(sequences);
  const Bucket& b = buckets_[k];
  const bool no_plain = b.plain_seen == 0;
  const bool drafting = b.has_drafting_line();
  if (no_plain && !drafting) return c;  // a batch size not seen yet
  const double t = token_ms(b, c);
  const auto n = static_cast<double>(sequences);
  // A round without drafts at this batch size: measured (the lower third of the last few), or
  // else (no such round yet) the drafting line at zero steps, or else the pooled verify
  // line at n tokens.
  double plain = no_plain ? c.verify_base_ms + t * n : b.plain_at(n, t);
  if (drafting) {
    // Drafting rounds are compared with plain at the batch sizes they were measured at.
    double plain_ref = no_plain ? plain : b.plain_at(0, -1);
    const DraftCosts d = b.draft_costs(t, plain_ref, !no_plain);
    if (no_plain) plain = plain_ref;
    c.draft_step_ms = d.step_ms;
    c.draft_base_ms = d.base_ms;
  } else if (const Bucket* near = nearest_drafting(k)) {
    // Plain rounds but no drafting line at this size yet (a batch size passed through
    // while a level fills or drains, or one where the strategy has not drafted): the
    // nearest size's drafting costs, scaled by the two sizes' plain rounds. The pooled
    // line (the draft actor's time over every size) hides the drafter's fixed cost and
    // its growth with the batch: on a device a strategy fed it drafted at 64 sequences
    // where a drafting round costs several plain ones.
    double there = near->plain_at(0, -1);
    const DraftCosts d = near->draft_costs(token_ms(*near, c), there, true);
    const double scale = there > 0 ? b.plain_at(0, -1) / there : 1.0;
    c.draft_step_ms = d.step_ms * scale;
    c.draft_base_ms = d.base_ms * scale;
  } else {
    // Plain rounds and no drafting line at any size (a server's first rounds): drafting
    // costs nothing until measured, so a strategy drafts and its rounds make the line.
    // The pooled draft time would be a few rounds' mean, shapes' first sightings
    // included, dear enough that no acceptance repays it: a strategy then neither drafts
    // nor probes, and nothing measures it again.
    c.draft_step_ms = 0;
    c.draft_base_ms = 0;
  }
  c.verify_token_ms = t;
  c.verify_base_ms = std::max(0.0, plain - t * n);
  if (sequences == 1) {
    // Per draft length, measured (index 0 is plain): kUsualRounds rounds past its first
    // sightings, the last of them recent.
    const auto given = [&](const OneLength& l) {
      return l.seen >= one_skipped() + kUsualRounds && one_rounds_ - l.last < kOneFresh;
    };
    size_t top = 0;
    for (size_t g = 0; g < one_.size(); ++g)
      if (given(one_[g])) top = g + 1;
    c.round_ms_by_gamma.assign(top, 0.0);
    for (size_t g = 0; g < top; ++g)
      if (const OneLength& l = one_[g]; given(l))
        c.round_ms_by_gamma[g] =
            typical_ms(std::span<const double>(l.wall_ms).first(std::min(l.seen - one_skipped(), kOneKept)));
  }
  return c;
}

}  // namespace specpipe
