// SCV (slot verify_plan): the planner math on synthetic costs (checked against brute
// force), the instance's estimates and probes through its C++ API, and the plugin through
// the real libspecpipe_scv.so: round trips, metrics, config errors, invalid inputs, and
// gammas within bounds for random inputs.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "pipeline/plugin_library.h"
#include "pipeline/verify_planner.h"
#include "plugins/scv/acceptance_tracker.h"
#include "plugins/scv/scv_config.h"
#include "plugins/scv/scv_counters.h"
#include "plugins/scv/scv_errors.h"
#include "plugins/scv/scv_instance.h"
#include "plugins/scv/scv_planner.h"
#include "specpipe/plugin.h"

namespace {

using specpipe::scv::RoundCosts;
using specpipe::scv::RoundPlan;
using specpipe::scv::WindowRequest;
using Gammas = std::vector<int32_t>;

RoundCosts costs(double draft, double base, double token, int32_t budget = 0, double draft_base = 0) {
  return RoundCosts{draft, base, token, budget, draft_base, {}};
}

std::vector<WindowRequest> uniform(size_t n, double acceptance, int32_t cap, int32_t requested = 4) {
  return std::vector<WindowRequest>(n, WindowRequest{acceptance, cap, requested});
}

double tokens_per_ms(const std::vector<WindowRequest>& w, const RoundCosts& c, const Gammas& g) {
  double tokens = 0;
  for (size_t i = 0; i < w.size(); ++i) tokens += specpipe::scv::expected_tokens(w[i].acceptance, g[i]);
  return tokens / specpipe::scv::round_cost_ms(c, g);
}

int64_t window_tokens(const Gammas& g) {
  int64_t t = 0;
  for (int32_t x : g) t += 1 + x;
  return t;
}

RoundPlan plan(const std::vector<WindowRequest>& w, const RoundCosts& c, double min_gain = 0.01) {
  return specpipe::scv::plan_round(w, c, specpipe::scv::PlannerOptions{min_gain});
}

// ---- the planner math -------------------------------------------------------------

TEST(ScvPlanner, ExpectedTokensFollowsTheGeometricSeries) {
  EXPECT_DOUBLE_EQ(specpipe::scv::expected_tokens(1.0, 4), 5.0);
  EXPECT_DOUBLE_EQ(specpipe::scv::expected_tokens(0.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(specpipe::scv::expected_tokens(0.5, 2), 1.75);
  EXPECT_NEAR(specpipe::scv::expected_tokens(0.8, 6), (1 - std::pow(0.8, 7)) / 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(specpipe::scv::round_cost_ms(costs(0.5, 1.0, 0.25), Gammas{3, 0, 1}), 0.5 * 3 + 1.0 + 0.25 * 7);
}

TEST(ScvPlanner, CheapDraftingAndHighAcceptancePickLargeGamma) {
  // A GPU-like verify (tokens nearly free next to the forward) and a cheap drafter.
  const auto w = uniform(4, 0.9, 8);
  const RoundPlan p = plan(w, costs(0.02, 1.0, 0.005));
  ASSERT_TRUE(p.measured);
  for (int32_t g : p.gamma) EXPECT_GE(g, 7);
  EXPECT_GT(p.tokens_per_ms(), 3 * p.plain_tokens_per_ms);
}

TEST(ScvPlanner, AcceptanceNearZeroPicksZero) {
  const RoundPlan p = plan(uniform(4, 0.01, 8), costs(0.02, 1.0, 0.005));
  EXPECT_EQ(p.gamma, Gammas(4, 0));
  EXPECT_DOUBLE_EQ(p.tokens_per_ms(), p.plain_tokens_per_ms);
}

TEST(ScvPlanner, ExpensiveVerifyTokensTurnSpeculationOffAtLargeBatch) {
  // This CPU's costs (docs/BENCHMARKS.md): a verify window costs ~0.4 ms per token over a
  // ~0.24 ms base, and the draft model ~0.14 ms per step. Good acceptance does not pay.
  const RoundCosts cpu = costs(0.14, 0.24, 0.4);
  EXPECT_EQ(plan(uniform(32, 0.75, 8), cpu).gamma, Gammas(32, 0));
  EXPECT_EQ(plan(uniform(1, 0.75, 8), cpu).gamma, Gammas{0});
  // A free drafter (n-gram lookup) at batch 1 pays at gamma 1, as measured (1.02x).
  const RoundPlan ngram = plan(uniform(1, 0.75, 8), costs(0.0, 0.24, 0.4));
  EXPECT_EQ(ngram.gamma, Gammas{1});
  // The same slope with a large base (latency-bound forward): on at batch 1, off at 64.
  const RoundCosts c = costs(0.05, 2.0, 0.2);
  EXPECT_GT(plan(uniform(1, 0.8, 8), c).gamma[0], 1);
  EXPECT_EQ(plan(uniform(64, 0.8, 8), c).gamma, Gammas(64, 0));
}

TEST(ScvPlanner, MixedBatchGetsDifferentGammas) {
  std::vector<WindowRequest> w = uniform(3, 0.95, 8);
  const auto poor = uniform(3, 0.05, 8);
  w.insert(w.end(), poor.begin(), poor.end());
  const RoundPlan p = plan(w, costs(0.05, 1.0, 0.02));
  for (int i = 0; i < 3; ++i) EXPECT_GE(p.gamma[i], 4) << i;
  for (int i = 3; i < 6; ++i) EXPECT_EQ(p.gamma[i], 0) << i;
}

TEST(ScvPlanner, TokenBudgetIsRespected) {
  const auto w = uniform(8, 0.95, 8);
  const RoundPlan p = plan(w, costs(0.01, 1.0, 0.001, 20));
  EXPECT_LE(window_tokens(p.gamma), 20);
  EXPECT_EQ(window_tokens(p.gamma), 20);  // drafting pays, so the budget is filled
  EXPECT_FALSE(p.budget_exceeded);
  // Exactly one token per window: no drafts fit.
  EXPECT_EQ(plan(w, costs(0.01, 1.0, 0.001, 8)).gamma, Gammas(8, 0));
  // Not even the windows fit: 0 for all, flagged (the host still runs them).
  const RoundPlan over = plan(w, costs(0.01, 1.0, 0.001, 5));
  EXPECT_EQ(over.gamma, Gammas(8, 0));
  EXPECT_TRUE(over.budget_exceeded);
}

TEST(ScvPlanner, UnmeasuredCostsUseTheRequestedGamma) {
  std::vector<WindowRequest> w = {{0.1, 8, 4}, {0.9, 2, 4}, {0.5, 8, 0}, {0.5, 8, -3}};
  RoundPlan p = plan(w, costs(0, 0, 0));
  EXPECT_FALSE(p.measured);
  EXPECT_EQ(p.gamma, (Gammas{4, 2, 0, 0}));  // clamped to [0, cap]
  // A draft cost alone is not a measurement of the round: still the requested gammas.
  EXPECT_EQ(plan(w, costs(0.3, 0, 0)).gamma, (Gammas{4, 2, 0, 0}));
  // Within a budget the largest gammas give way first.
  p = plan(uniform(3, 0.5, 8, 5), costs(0, 0, 0, 12));
  EXPECT_EQ(p.gamma, (Gammas{3, 3, 3}));
  p = plan(std::vector<WindowRequest>{{0.5, 8, 6}, {0.5, 8, 1}}, costs(0, 0, 0, 6));
  EXPECT_EQ(p.gamma, (Gammas{3, 1}));
}

TEST(ScvPlanner, RespectsEachSequencesCap) {
  std::vector<WindowRequest> w = {{0.99, 2, 4}, {0.99, 0, 4}, {0.99, 8, 4}};
  const RoundPlan p = plan(w, costs(0.01, 1.0, 0.001));
  EXPECT_EQ(p.gamma[0], 2);
  EXPECT_EQ(p.gamma[1], 0);
  EXPECT_EQ(p.gamma[2], 8);
}

TEST(ScvPlanner, MatchesBruteForceOnSmallBatches) {
  std::mt19937 rng(2026);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = 1 + rng() % 3;
    std::vector<WindowRequest> w(n);
    for (auto& x : w) x = {unit(rng) < 0.1 ? 1.0 : unit(rng), static_cast<int32_t>(rng() % 5), 0};
    const RoundCosts c = costs(unit(rng) * 0.5, unit(rng) * 2, unit(rng) * 0.5 + 1e-3,
                               rng() % 3 == 0 ? static_cast<int32_t>(n + rng() % 6) : 0,
                               trial % 2 ? unit(rng) * 2 : 0.0);
    // Every assignment in [0, cap]^n within the budget.
    double best = 0;
    Gammas g(n, 0);
    while (true) {
      if (c.token_budget == 0 || window_tokens(g) <= c.token_budget) best = std::max(best, tokens_per_ms(w, c, g));
      size_t i = 0;
      while (i < n && g[i] == w[i].cap) g[i++] = 0;
      if (i == n) break;
      ++g[i];
    }
    const RoundPlan p = plan(w, c, 0.0);
    EXPECT_NEAR(tokens_per_ms(w, c, p.gamma), best, 1e-9 * best) << "trial " << trial;
    if (c.token_budget) {
      EXPECT_LE(window_tokens(p.gamma), c.token_budget);
    }
  }
}

TEST(ScvPlanner, TheBoundBeforeTheSearchNeverChangesThePlan) {
  // plan_round's O(n x cap) bound ends the search at 0 for all where no G could win; the
  // plan must be the search's, with batches up to 128, caps up to 8, costs on both sides of
  // where drafting stops paying, min_gain, and a previous G with its switch_gain.
  std::mt19937 rng(34);
  std::uniform_real_distribution<double> unit(0, 1);
  int ended_by_bound = 0, searched = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t n = 1 + rng() % 128;
    std::vector<WindowRequest> w(n);
    for (auto& x : w) x = {unit(rng) < 0.05 ? 1.0 : unit(rng), static_cast<int32_t>(rng() % 9), 4};
    // A verify forward and its tokens as on a device (0.2-2 ms + 0-20 us a token), a draft
    // step of 0-3 ms for the batch: from cheap drafting to drafting that never pays.
    const RoundCosts c = costs(unit(rng) * 3, 0.2 + unit(rng) * 1.8, unit(rng) * 0.02,
                               rng() % 4 == 0 ? static_cast<int32_t>(n + rng() % (4 * n)) : 0, unit(rng) * 0.2);
    specpipe::scv::PlannerOptions bounded{trial % 3 == 0 ? 0.0 : 0.01 * (trial % 5), static_cast<int32_t>(rng() % 10) - 1,
                                          unit(rng) * 0.1};
    specpipe::scv::PlannerOptions full = bounded;
    full.bound_first = false;
    const RoundPlan a = specpipe::scv::plan_round(w, c, bounded), b = specpipe::scv::plan_round(w, c, full);
    ASSERT_EQ(a.gamma, b.gamma) << "trial " << trial << " n " << n;
    if (!specpipe::scv::some_level_could_win(w, c, bounded)) {
      ++ended_by_bound;
      ASSERT_TRUE(std::all_of(b.gamma.begin(), b.gamma.end(), [](int32_t g) { return g == 0; })) << "trial " << trial;
    } else {
      ++searched;
    }
  }
  // The bound ends many searches, not all (the inputs straddle where drafting stops paying).
  EXPECT_GT(ended_by_bound, 300);
  EXPECT_GT(searched, 300);
}

TEST(ScvPlanner, MinGainKeepsMarginalSpeculationOff) {
  // g = 1 beats plain by about 0.5%: taken at min_gain 0, refused at 1%.
  const RoundCosts c = costs(0.0, 1.0, 1.0);
  const auto w = uniform(1, 1.01, 1);  // clamped to 1: E(1) = 2 at cost 3 vs 1 at 2 -> +33%
  EXPECT_EQ(plan(w, c).gamma, Gammas{1});
  const auto marginal = uniform(1, 0.51, 1);  // (1.51 / 3) / (1 / 2) = 1.0067
  EXPECT_EQ(plan(marginal, c, 0.0).gamma, Gammas{1});
  EXPECT_EQ(plan(marginal, c, 0.01).gamma, Gammas{0});
}

TEST(ScvPlanner, TheDraftersFixedCostIsPaidOnceAndSavedByTurningOff) {
  // One draft step is cheap and window tokens nearly free, but a round that drafts at all
  // pays 1 ms (a device drafter's sync and catch-up at a large batch): long drafts or
  // none. Charged per step it would pick short drafts; charged to every round it would
  // never see what turning off saves.
  EXPECT_DOUBLE_EQ(specpipe::scv::round_cost_ms(costs(0.1, 1.0, 0.01, 0, 1.0), Gammas{0, 0}), 1.02);
  EXPECT_DOUBLE_EQ(specpipe::scv::round_cost_ms(costs(0.1, 1.0, 0.01, 0, 1.0), Gammas{2, 0}), 1.0 + 0.2 + 1.0 + 0.04);
  const RoundCosts c = costs(0.02, 1.0, 0.001, 0, 1.0);
  EXPECT_EQ(plan(uniform(4, 0.9, 8), c).gamma, Gammas(4, 8));  // 4 x 6.1 tokens in 2.2 ms
  EXPECT_EQ(plan(uniform(4, 0.3, 8), c).gamma, Gammas(4, 0));  // 4 x 1.4 tokens do not pay 1 ms more
}

TEST(ScvPlanner, KeepsThePreviousLargestGammaUnlessAnotherGainsSwitchGain) {
  // Rates of G = 3, 4, 5 within 1% of each other: without a previous G the best wins;
  // with one, it stays unless another beats it by switch_gain.
  const auto w = uniform(1, 0.81, 6);
  const RoundCosts c = costs(0.015, 0.21, 0.054);  // 0.264 ms + 0.069 ms a draft
  const int32_t free_choice = plan(w, c).gamma[0];
  for (int32_t previous : {3, 4}) {
    specpipe::scv::PlannerOptions o{0.01, previous, 0.03};
    EXPECT_EQ(specpipe::scv::plan_round(w, c, o).gamma[0], previous) << "free choice " << free_choice;
  }
  // Far from the best (G = 1): it moves.
  specpipe::scv::PlannerOptions o{0.01, 1, 0.03};
  EXPECT_GE(specpipe::scv::plan_round(w, c, o).gamma[0], 3);
}

/// One sequence on an H100 (stop 30's call): what SCV's line said (verify 0.155 ms + 0.065
/// a window token, drafting free: the drafting rounds' lower third were those whose
/// draft-ahead chain had the drafts ready) and the rounds measured by gamma, which bend:
/// the first draft pays the drafter's launch, long chains outrun the verify beside them.
RoundCosts one_client_costs() {
  RoundCosts c = costs(0, 0.155, 0.065);
  c.round_ms_by_gamma = {0.218, 0.31, 0.386, 0.475, 0.536, 0.65, 0.77};
  return c;
}

TEST(ScvPlanner, OneSequenceTakesTheBestGammaByItsMeasuredRounds) {
  const RoundCosts measured = one_client_costs();
  RoundCosts line = measured;
  line.round_ms_by_gamma.clear();
  for (const double a : {0.5, 0.6, 0.7, 0.82, 0.9, 0.97}) {
    const auto w = uniform(1, a, 6);
    int32_t best = 0;
    for (int32_t g = 1; g <= 6; ++g)
      if (specpipe::scv::expected_tokens(a, g) / measured.round_ms_by_gamma[g] >
          specpipe::scv::expected_tokens(a, best) / measured.round_ms_by_gamma[best])
        best = g;
    const RoundPlan p = plan(w, measured, 0);
    EXPECT_EQ(p.gamma[0], best) << a;
    EXPECT_NEAR(p.cost_ms, measured.round_ms_by_gamma[best], 1e-12) << a;
    EXPECT_NEAR(p.plain_tokens_per_ms, 1 / 0.218, 1e-12);
    // The line alone drafts longer from 0.9 on (gamma 5-6 where 4 is best): each draft
    // looks like a window token (0.065 ms), where the device's rounds bend after 4.
    if (a >= 0.9) {
      EXPECT_GT(plan(w, line, 0).gamma[0], best) << a;
    }
  }
  // Where no gamma is measured beyond plain, each is the line moved by plain's difference
  // from it; one measured gamma moves those next to it.
  RoundCosts partial = measured;
  partial.round_ms_by_gamma = {0.218, 0, 0.386};
  const auto line_ms = [&](int32_t g) { return 0.155 + 0.065 * (1 + g); };
  const auto cost = [&](int32_t g) { return specpipe::scv::round_cost_ms(partial, Gammas{g}); };
  EXPECT_NEAR(cost(0), 0.218, 1e-12);
  EXPECT_NEAR(cost(1), line_ms(1), 1e-12);  // of 0 and 2 the lower, measured below its line: no move
  EXPECT_NEAR(cost(2), 0.386, 1e-12);
  EXPECT_NEAR(cost(5), line_ms(5) + (0.386 - line_ms(2)), 1e-12);
  // Within the token budget and the cap.
  RoundCosts tight = measured;
  tight.token_budget = 3;
  EXPECT_LE(plan(uniform(1, 0.97, 6), tight).gamma[0], 2);
  EXPECT_LE(plan(uniform(1, 0.97, 1), measured).gamma[0], 1);
  // Two sequences: the line (the rounds by gamma are one sequence's).
  EXPECT_EQ(plan(uniform(2, 0.9, 6), measured, 0).gamma, plan(uniform(2, 0.9, 6), line, 0).gamma);
}

TEST(ScvPlanner, OneSequenceKeepsItsGammaUnlessAnotherGainsSingleSwitchGain) {
  // At 0.8 gamma 2, 3 and 4 are within 2% of each other (6.32, 6.22, 6.27 tokens a ms):
  // the previous one stays; from gamma 0 (4.59), 1 (5.81) or 6 (5.13) it moves to the best.
  const RoundCosts c = one_client_costs();
  const auto w = uniform(1, 0.8, 6);
  for (const int32_t previous : {2, 3, 4}) {
    const specpipe::scv::PlannerOptions o{0.01, previous, 0, 0.03};
    EXPECT_EQ(specpipe::scv::plan_round(w, c, o).gamma[0], previous);
  }
  for (const int32_t previous : {0, 1, 6}) {
    const specpipe::scv::PlannerOptions o{0.01, previous, 0, 0.03};
    EXPECT_EQ(specpipe::scv::plan_round(w, c, o).gamma[0], 2) << previous;
  }
}

/// Rounds of the demo pair through the server on an H100 (docs/BENCHMARKS.md section 8,
/// 27dbc09), at 1, 8, 32 and 128 clients: plain, and the draft model at gamma 2, 4, 6.
/// A round's wall time is clients x tokens per round / tokens per second; the verify
/// forward is given 70% of it.
struct MeasuredLevel {
  int32_t clients;
  double plain_tokens_per_s;
  double draft_tokens_per_s[3];  // gamma 2, 4, 6
  double tokens_per_round[3];
};
constexpr MeasuredLevel kSection8[] = {
    {1, 3786, {6676, 6732, 5494}, {2.47, 3.46, 4.06}},
    {8, 27335, {20704, 22065, 20968}, {2.40, 3.24, 3.76}},
    {32, 52533, {52732, 46750, 41288}, {2.47, 3.46, 4.06}},
    {128, 93537, {66507, 64316, 58929}, {2.47, 3.46, 4.06}},
};

/// The engine's cost model after the rounds of every level, as the scheduler feeds it.
specpipe::CostModel measured_device_costs() {
  specpipe::CostModel m;
  for (int repeat = 0; repeat < 40; ++repeat)
    for (const MeasuredLevel& l : kSection8) {
      const double plain_ms = 1000.0 * l.clients / l.plain_tokens_per_s;
      m.add_round({l.clients, 0, l.clients, 0, 0.7 * plain_ms, plain_ms});
      for (int k = 0; k < 3; ++k) {
        const int32_t g = 2 + 2 * k;
        const double ms = 1000.0 * l.clients * l.tokens_per_round[k] / l.draft_tokens_per_s[k];
        m.add_round({l.clients, g, int64_t{l.clients} * (1 + g), 0.3 * ms, 0.7 * ms, ms});
      }
    }
  return m;
}

RoundCosts plugin_costs(const specpipe::PlanCosts& c) {
  return costs(c.draft_step_ms, c.verify_base_ms, c.verify_token_ms, c.token_budget, c.draft_base_ms);
}

TEST(ScvPlanner, DeviceRoundCostsByBatchSizeGiveGammaNearTheBestFixedAtOneClientAndOffUnderLoad) {
  // Acceptance 0.81 is what the draft model's tokens per round at gamma 2-6 say.
  const specpipe::CostModel m = measured_device_costs();
  const RoundPlan one = plan(uniform(1, 0.81, 6), plugin_costs(m.costs(1, 0)));
  // Gamma 2 and 4 ran within 1% of each other (6,676 / 6,732 tokens/s), gamma 6 18% slower.
  EXPECT_GE(one.gamma[0], 2);
  EXPECT_LE(one.gamma[0], 4);
  // Under load plain was the fastest at 8 and 128 clients; at 32, gamma 2 tied with plain
  // (1.00x) and gamma 4 lost (0.89x).
  EXPECT_EQ(plan(uniform(8, 0.81, 6), plugin_costs(m.costs(8, 0))).gamma, Gammas(8, 0));
  const RoundPlan mid = plan(uniform(32, 0.81, 6), plugin_costs(m.costs(32, 0)));
  EXPECT_LE(*std::max_element(mid.gamma.begin(), mid.gamma.end()), 2);
  EXPECT_EQ(plan(uniform(128, 0.81, 6), plugin_costs(m.costs(128, 0))).gamma, Gammas(128, 0));
  // Nor would perfect acceptance pay at 8 or 128: no probes there. At one client it would.
  for (int32_t n : {8, 128}) {
    const RoundCosts c = plugin_costs(m.costs(n, 0));
    const RoundPlan off = plan(uniform(static_cast<size_t>(n), 0.05, 6), c);
    EXPECT_FALSE(specpipe::scv::drafting_could_pay(c, off, 6)) << n;
  }
  const RoundCosts c1 = plugin_costs(m.costs(1, 0));
  EXPECT_TRUE(specpipe::scv::drafting_could_pay(c1, plan(uniform(1, 0.05, 6), c1), 6));
}

// ---- estimates, probes and counters through the C++ instance ------------------------

specpipe::scv::ScvInstance make_instance(const std::string& json, int32_t model_max_gamma = 8) {
  return specpipe::scv::ScvInstance(specpipe::scv::parse_scv_config(json, model_max_gamma), nullptr);
}

specpipe_plan_sequence seq(int64_t id, int32_t max_gamma = 8, int32_t requested = 4) {
  return specpipe_plan_sequence{id, requested, max_gamma, 100};
}

Gammas plan_once(specpipe::scv::ScvInstance& scv, const std::vector<specpipe_plan_sequence>& s, const RoundCosts& c) {
  Gammas g(s.size(), -1);
  scv.plan(s, c, g);
  return g;
}

/// Plans one sequence (7) for `rounds` rounds, every draft rejected; its gammas.
Gammas plan_rejecting(specpipe::scv::ScvInstance& scv, int rounds, const RoundCosts& c) {
  Gammas seen;
  for (int round = 0; round < rounds; ++round) {
    const Gammas g = plan_once(scv, {seq(7)}, c);
    seen.push_back(g[0]);
    if (g[0] > 0) {
      const specpipe_plan_observation o{7, g[0], 0};
      scv.observe(std::span(&o, 1));
    }
  }
  return seen;
}

TEST(ScvInstance, CostsByGammaFalsePlansOneSequenceByTheLineAlone) {
  // Acceptance 0.97 (the prior, no evidence yet): gamma 4 by the rounds measured by gamma,
  // 6 by the line (OneSequenceTakesTheBestGammaByItsMeasuredRounds).
  auto by_gamma = make_instance(R"({"prior_acceptance": 0.97})", 6);
  auto line = make_instance(R"({"prior_acceptance": 0.97, "costs_by_gamma": false})", 6);
  const RoundCosts c = one_client_costs();
  RoundCosts line_costs = c;
  line_costs.round_ms_by_gamma.clear();
  EXPECT_EQ(plan_once(by_gamma, {seq(1, 6)}, c), Gammas{4});
  EXPECT_EQ(plan_once(line, {seq(1, 6)}, c), plan(uniform(1, 0.97, 6), line_costs).gamma);
  EXPECT_NE(plan_once(line, {seq(1, 6)}, c), Gammas{4});
}

TEST(ScvInstance, ProbesAnOffSequenceEveryProbeInterval) {
  auto scv = make_instance(R"({"prior_acceptance": 0.02, "probe_interval": 4, "probe_rounds": 1})");
  const RoundCosts c = costs(0.3, 1.0, 0.02);
  const Gammas seen = plan_rejecting(scv, 12, c);
  EXPECT_EQ(seen, (Gammas{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(scv.counters().probes, 3u);
  EXPECT_EQ(scv.counters().speculation_off, 9u);
  // A sequence capped at 0 (context limit) is not off by choice: never probed.
  for (int round = 0; round < 8; ++round) EXPECT_EQ(plan_once(scv, {seq(8, 0)}, c)[0], 0);
}

TEST(ScvInstance, AProbeLastsProbeRoundsRounds) {
  // A probe's first round carries the drafter's catch-up, which the host leaves out of its
  // costs: the rounds after it are what measures drafting again.
  auto scv = make_instance(R"({"prior_acceptance": 0.02, "probe_interval": 4, "probe_rounds": 3})");
  const RoundCosts c = costs(0.3, 1.0, 0.02);
  const Gammas seen = plan_rejecting(scv, 14, c);
  EXPECT_EQ(seen, (Gammas{0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0}));
  EXPECT_EQ(scv.counters().probes, 6u);
  // A probe under way goes first under a tight budget, and one cut short starts afresh.
  auto tight = make_instance(R"({"prior_acceptance": 0.02, "probe_interval": 1, "probe_rounds": 2})");
  const RoundCosts one_draft = costs(0.3, 1.0, 0.02, 3);  // two windows and one draft
  EXPECT_EQ(plan_once(tight, {seq(1), seq(2)}, one_draft), (Gammas{1, 0}));
  EXPECT_EQ(plan_once(tight, {seq(1), seq(2)}, one_draft), (Gammas{1, 0}));  // 1's probe goes on
  EXPECT_EQ(plan_once(tight, {seq(1), seq(2)}, one_draft), (Gammas{0, 1}));  // 2 has waited longest
}

TEST(ScvInstance, NoProbesWhereEvenPerfectAcceptanceWouldNotPay) {
  // A large batch on a device: drafting at all costs 1.7 ms more on a 1 ms round. Off
  // sequences are not probed (a probe there is a plain round plus the drafter's cost,
  // which one sequence's drafts cannot repay); at a small batch with a cheap drafter
  // they are.
  auto scv = make_instance(R"({"prior_acceptance": 0.02, "probe_interval": 4})");
  std::vector<specpipe_plan_sequence> s;
  for (int64_t id = 0; id < 64; ++id) s.push_back(seq(id, 6));
  const RoundCosts loaded = costs(0.08, 0.5, 0.007, 0, 1.7);
  for (int round = 0; round < 20; ++round) EXPECT_EQ(plan_once(scv, s, loaded), Gammas(64, 0)) << round;
  EXPECT_EQ(scv.counters().probes, 0u);
  EXPECT_GT(scv.counters().probes_skipped, 0u);
  const RoundCosts light = costs(0.02, 0.5, 0.0001, 0, 0.0);
  EXPECT_EQ(plan_once(scv, {seq(0, 6), seq(1, 6)}, light), (Gammas{1, 1}));  // both long due
  EXPECT_EQ(scv.counters().probes, 2u);
}

TEST(ScvInstance, ProbesShareATightBudgetLongestWaitingFirst) {
  auto scv = make_instance(R"({"prior_acceptance": 0.02, "probe_interval": 2, "probe_rounds": 1})");
  const std::vector<specpipe_plan_sequence> s = {seq(1), seq(2), seq(3)};
  const RoundCosts c = costs(0.3, 1.0, 0.02, 4);  // room for one draft beyond the windows
  EXPECT_EQ(plan_once(scv, s, c), (Gammas{0, 0, 0}));
  EXPECT_EQ(plan_once(scv, s, c), (Gammas{1, 0, 0}));  // all due: the first in order
  EXPECT_EQ(plan_once(scv, s, c), (Gammas{0, 1, 0}));
  EXPECT_EQ(plan_once(scv, s, c), (Gammas{0, 0, 1}));  // 3 has waited longest, not 1
  // No room at all: nobody probes.
  EXPECT_EQ(plan_once(scv, s, costs(0.3, 1.0, 0.02, 3)), (Gammas{0, 0, 0}));
}

TEST(ScvInstance, EstimatesMoveWithObserveAndForgetResets) {
  auto scv = make_instance(R"({"prior_acceptance": 0.5, "prior_weight": 4})");
  EXPECT_DOUBLE_EQ(scv.acceptance_estimate(1), 0.5);
  const std::vector<specpipe_plan_observation> good = {{1, 4, 4}, {2, 4, 0}};
  for (int i = 0; i < 20; ++i) scv.observe(good);
  EXPECT_GT(scv.acceptance_estimate(1), 0.8);
  EXPECT_LT(scv.acceptance_estimate(2), 0.3);
  // A new sequence starts at the batch estimate, between the two.
  const double batch = scv.acceptance_estimate(99);
  EXPECT_GT(batch, scv.acceptance_estimate(2));
  EXPECT_LT(batch, scv.acceptance_estimate(1));
  scv.forget(1);
  EXPECT_DOUBLE_EQ(scv.acceptance_estimate(1), batch);
}

TEST(ScvInstance, EstimateIsUnbiasedAtLargeGamma) {
  // With gamma 8 and a = 0.7 most drafts after the first rejection are never judged:
  // accepted / proposed would read ~0.26; counting judged drafts recovers a.
  specpipe::scv::AcceptanceTracker tracker({0.5, 4, 1 << 20});
  std::mt19937 rng(5);
  std::bernoulli_distribution accept(0.7);
  for (int round = 0; round < 4000; ++round) {
    int32_t k = 0;
    while (k < 8 && accept(rng)) ++k;
    const specpipe::scv::DraftOutcome o{3, 8, k};
    tracker.observe(std::span(&o, 1));
  }
  EXPECT_NEAR(tracker.estimate(3), 0.7, 0.02);
}

/// Plans and simulates rounds for one sequence whose true acceptance is `truth`.
Gammas simulate(specpipe::scv::ScvInstance& scv, double truth, int rounds, const RoundCosts& c, std::mt19937& rng) {
  std::bernoulli_distribution accept(truth);
  Gammas history;
  for (int r = 0; r < rounds; ++r) {
    const int32_t g = plan_once(scv, {seq(1)}, c)[0];
    history.push_back(g);
    if (g == 0) continue;
    int32_t k = 0;
    while (k < g && accept(rng)) ++k;
    const specpipe_plan_observation o{1, g, k};
    scv.observe(std::span(&o, 1));
  }
  return history;
}

TEST(ScvInstance, SpeculationTurnsOffAndComesBackWithAcceptance) {
  auto scv = make_instance("{}");
  // Speculation pays once a > ~0.35 here.
  const RoundCosts c = costs(0.3, 1.0, 0.02);
  std::mt19937 rng(11);
  const Gammas low = simulate(scv, 0.05, 200, c, rng);
  const auto tail_on = std::count_if(low.end() - 64, low.end(), [](int32_t g) { return g > 0; });
  EXPECT_LE(tail_on, 16);  // the probes only: 4 rounds after every 16 off
  const Gammas high = simulate(scv, 0.95, 200, c, rng);
  for (auto it = high.end() - 64; it != high.end(); ++it) EXPECT_GE(*it, 2);
}

TEST(ScvCounters, MetricsJsonIsValidWithNonFiniteValues) {
  specpipe::scv::ScvCounters c(2);
  c.record_round(std::vector<int32_t>{0, 2, 2});
  specpipe::scv::LiveMetrics live;
  live.mean_acceptance_estimate = std::numeric_limits<double>::quiet_NaN();
  live.batch_acceptance_estimate = std::numeric_limits<double>::infinity();
  const nlohmann::ordered_json m = nlohmann::ordered_json::parse(specpipe::scv::metrics_json(c, live));
  EXPECT_TRUE(m.at("mean_acceptance_estimate").is_null()) << m.dump();
  EXPECT_TRUE(m.at("batch_acceptance_estimate").is_null()) << m.dump();
  EXPECT_EQ(m.at("gamma_hist").dump(), "[1,0,2]");
  EXPECT_EQ(m.begin().key(), "rounds");  // the README's order
  EXPECT_EQ((--m.end()).key(), "mean_predicted_speedup");
}

// ---- the plugin through the real shared library ------------------------------------

struct LogHost {
  std::vector<std::pair<int32_t, std::string>> lines;
  specpipe_host_api api() {
    specpipe_host_api a{};
    a.abi_version = SPECPIPE_PLUGIN_ABI_VERSION;
    a.struct_size = sizeof(specpipe_host_api);
    a.host = this;
    a.log = [](void* host, int32_t level, const char* message) {
      static_cast<LogHost*>(host)->lines.emplace_back(level, message);
    };
    return a;
  }
};

specpipe_model_desc model_desc(int32_t max_gamma = 8) {
  specpipe_model_desc m{};
  m.struct_size = sizeof(m);
  m.num_layers = 2;
  m.num_kv_heads = 2;
  m.head_dim = 4;
  m.kv_dim = 8;
  m.block_size = 16;
  m.max_gamma = max_gamma;
  m.max_batch = 64;
  m.device = DLDevice{kDLCPU, 0};
  return m;
}

specpipe_plan_costs abi_costs(double draft, double base, double token, int32_t budget = 0) {
  specpipe_plan_costs c{};
  c.struct_size = sizeof(c);
  c.draft_step_ms = draft;
  c.verify_base_ms = base;
  c.verify_token_ms = token;
  c.token_budget = budget;
  return c;
}

class ScvPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    lib_ = specpipe::PluginLibrary::load(SCV_PLUGIN_PATH);
    ASSERT_TRUE(lib_->fills("verify_plan"));
    ASSERT_FALSE(lib_->fills("kv_write"));
  }
  void TearDown() override {
    for (void* i : instances_) table().destroy(i);
  }
  const specpipe_plugin_table& table() const { return lib_->table(); }
  const specpipe_verify_plan_hooks& hooks() const { return *table().verify_plan; }

  /// create() with `config`; the status, and the message in error_.
  specpipe_status create(const char* config, void** out, int32_t model_max_gamma = 8) {
    const specpipe_model_desc m = model_desc(model_max_gamma);
    error_[0] = '\0';
    const specpipe_status s = table().create(&api_, &m, config, out, error_, sizeof error_);
    if (s == SPECPIPE_OK) instances_.push_back(*out);
    return s;
  }
  void* instance(const char* config = "{}") {
    void* i = nullptr;
    EXPECT_EQ(create(config, &i), SPECPIPE_OK) << error_;
    return i;
  }
  nlohmann::json metrics(void* i) {
    std::string buffer(4096, '\0');
    const size_t need = table().describe_metrics(i, buffer.data(), buffer.size());
    EXPECT_LE(need, buffer.size());
    buffer.resize(std::strlen(buffer.c_str()));
    EXPECT_EQ(need, buffer.size() + 1);
    return nlohmann::json::parse(buffer);
  }
  specpipe_status plan(void* i, const std::vector<specpipe_plan_sequence>& s, const specpipe_plan_costs& c, Gammas& g) {
    g.assign(s.size(), -1);
    error_[0] = '\0';
    return hooks().plan(i, s.data(), static_cast<int32_t>(s.size()), &c, g.data(), error_, sizeof error_);
  }

  std::shared_ptr<const specpipe::PluginLibrary> lib_;
  LogHost host_;
  specpipe_host_api api_ = host_.api();
  std::vector<void*> instances_;
  char error_[512] = {};
};

TEST_F(ScvPlugin, TableDescribesTheSlotAndEntryRefusesOtherAbis) {
  EXPECT_STREQ(table().name, "scv");
  ASSERT_NE(table().verify_plan, nullptr);
  EXPECT_NE(hooks().observe, nullptr);
  EXPECT_NE(hooks().forget, nullptr);
  EXPECT_EQ(table().kv_write, nullptr);
  void* handle = dlopen(SCV_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr);
  auto entry = reinterpret_cast<specpipe_plugin_entry_fn>(dlsym(handle, SPECPIPE_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry(SPECPIPE_PLUGIN_ABI_VERSION + 1), nullptr);
  // The loader keeps its own copy of the table (SDK 1.1: a 1.0 plugin's shorter table is
  // padded with NULLs), so compare what the entry hands out with that copy field by field.
  const specpipe_plugin_table* own = entry(SPECPIPE_PLUGIN_ABI_VERSION);
  ASSERT_NE(own, nullptr);
  EXPECT_STREQ(own->name, table().name);
  EXPECT_EQ(own->verify_plan, table().verify_plan);
  EXPECT_EQ(own->create, table().create);
  dlclose(handle);
}

TEST_F(ScvPlugin, PlanObserveRoundTripAndMetrics) {
  void* scv = instance(R"({"prior_acceptance": 0.9, "prior_weight": 4, "probe_interval": 8})");
  ASSERT_FALSE(host_.lines.empty());  // create() logs its settings
  EXPECT_NE(host_.lines[0].second.find("scv"), std::string::npos);
  const std::vector<specpipe_plan_sequence> s = {seq(10), seq(11), seq(12, 2)};
  Gammas g;
  // Not measured yet: the requested gammas (within each cap).
  ASSERT_EQ(plan(scv, s, abi_costs(0, 0, 0), g), SPECPIPE_OK) << error_;
  EXPECT_EQ(g, (Gammas{4, 4, 2}));
  // Measured, cheap: high acceptance drafts long windows.
  ASSERT_EQ(plan(scv, s, abi_costs(0.02, 1.0, 0.005), g), SPECPIPE_OK) << error_;
  EXPECT_GE(g[0], 5);
  EXPECT_EQ(g[2], 2);
  // Sequence 11 rejects everything for a while: once its estimate has fallen, a draft of
  // its no longer pays for its verify token; the others keep going.
  for (int r = 0; r < 20; ++r) {
    const std::vector<specpipe_plan_observation> o = {{10, g[0], g[0]}, {11, g[1], 0}, {12, g[2], g[2]}};
    hooks().observe(scv, o.data(), static_cast<int32_t>(o.size()));
    ASSERT_EQ(plan(scv, s, abi_costs(0.02, 1.0, 0.1), g), SPECPIPE_OK) << error_;
  }
  EXPECT_GE(g[0], 5);
  EXPECT_EQ(g[1], 0);

  const nlohmann::json m = metrics(scv);
  for (const char* key : {"rounds", "gamma_hist", "windows_per_pass", "speculation_off",
                          "speculation_off_sequences_now", "probes", "mean_acceptance_estimate"})
    EXPECT_TRUE(m.contains(key)) << key << " in " << m.dump();
  EXPECT_EQ(m["rounds"], 22);
  ASSERT_EQ(m["gamma_hist"].size(), 9u);
  uint64_t planned = 0;
  for (const auto& x : m["gamma_hist"]) planned += x.get<uint64_t>();
  EXPECT_EQ(planned, 66u);
  EXPECT_DOUBLE_EQ(m["windows_per_pass"].get<double>(), 3.0);
  EXPECT_EQ(m["speculation_off_sequences_now"], 1);
  EXPECT_GE(m["speculation_off"].get<int>(), 1);
  EXPECT_EQ(m["unmeasured_rounds"], 1);
  EXPECT_GT(m["mean_acceptance_estimate"].get<double>(), 0.5);

  // forget() drops the sequence; the metrics follow.
  hooks().forget(scv, 11);
  EXPECT_EQ(metrics(scv)["speculation_off_sequences_now"], 0);
  EXPECT_EQ(metrics(scv)["tracked_sequences"], 2);
}

TEST_F(ScvPlugin, DescribeMetricsReportsTheSizeItNeeds) {
  void* scv = instance();
  char small[8];
  const size_t need = table().describe_metrics(scv, small, sizeof small);
  EXPECT_GT(need, sizeof small);
  EXPECT_EQ(std::strlen(small), sizeof small - 1);
  EXPECT_EQ(table().describe_metrics(scv, nullptr, 0), need);
}

TEST_F(ScvPlugin, ConfigErrorsNameTheKey) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"prior_acceptance": 1.5})", "prior_acceptance"},
      {R"({"prior_acceptance": "high"})", "prior_acceptance"},
      {R"({"prior_weight": 0})", "prior_weight"},
      {R"({"probe_interval": 0})", "probe_interval"},
      {R"({"probe_interval": 2.5})", "probe_interval"},
      {R"({"probe_rounds": 0})", "probe_rounds"},
      {R"({"max_gamma": -1})", "max_gamma"},
      {R"({"max_gamma": 9})", "max_gamma"},  // the model's is 8
      {R"({"min_gain": -0.1})", "min_gain"},
      {R"({"memory_rounds": 0})", "memory_rounds"},
      {R"({"min_gain": null})", "min_gain"},
      {R"({"costs_by_gamma": 1})", "costs_by_gamma"},
      {R"({"single_switch_gain": -1})", "single_switch_gain"},
      {R"({"probe_backoff_batch": 1.5})", "probe_backoff_batch"},
      {R"({"measure_rounds": -1})", "measure_rounds"},
      {R"({"gamma": 4})", "gamma"},
      {R"({"probe_interval": 4, "probe_interval": 8})", "probe_interval"},
      {R"({"gamma": 4, "probe_interval": 4, "probe_interval": 8})", "gamma"},  // document order
      {R"({"x": {"a": [1, {"b": null}], "a": 2}})", "x"},  // nested values: only the key is judged
  };
  for (const auto& [config, key] : cases) {
    void* i = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(create(config, &i), SPECPIPE_ERR_CONFIG) << config;
    EXPECT_EQ(i, nullptr);
    EXPECT_NE(std::string(error_).find(std::string("'") + key + "'"), std::string::npos) << config << " -> " << error_;
  }
  for (const char* bad : {"[1, 2]", "{\"a\": }", "{\"prior_weight\": 2", "{} {}", "{\"a\": 01}", "null", "3"}) {
    void* i = nullptr;
    EXPECT_EQ(create(bad, &i), SPECPIPE_ERR_CONFIG) << bad;
    EXPECT_NE(std::string(error_).find("JSON"), std::string::npos) << error_;
  }
  // A repeated key is judged with its first value before it is refused as repeated.
  void* repeated = nullptr;
  EXPECT_EQ(create(R"({"probe_interval": 0, "probe_interval": 8})", &repeated), SPECPIPE_ERR_CONFIG);
  EXPECT_NE(std::string(error_).find("got 0"), std::string::npos) << error_;
  // Valid configs: empty text, null, nested values are refused only by key.
  void* ok = nullptr;
  EXPECT_EQ(create("", &ok), SPECPIPE_OK) << error_;
  EXPECT_EQ(create(" \n\t ", &ok), SPECPIPE_OK) << error_;
  EXPECT_EQ(create(nullptr, &ok), SPECPIPE_OK) << error_;
  EXPECT_EQ(create(R"( {"max_gamma": 3, "min_gain": 0, "prior_acceptance": 1e-1, "memory_rounds": 4,
                      "costs_by_gamma": false} )", &ok),
            SPECPIPE_OK)
      << error_;
  // A model beyond SCV's limit needs an explicit cap.
  EXPECT_EQ(create("{}", &ok, 100), SPECPIPE_ERR_CONFIG);
  EXPECT_NE(std::string(error_).find("'max_gamma'"), std::string::npos) << error_;
  EXPECT_EQ(create(R"({"max_gamma": 16})", &ok, 100), SPECPIPE_OK) << error_;
}

TEST_F(ScvPlugin, InvalidInputsAreRefused) {
  void* scv = instance();
  const std::vector<specpipe_plan_sequence> s = {seq(1), seq(2)};
  const specpipe_plan_costs c = abi_costs(0.1, 1.0, 0.1);
  Gammas g(2, -1);
  auto call = [&](void* i, const specpipe_plan_sequence* sp, int32_t n, const specpipe_plan_costs* cp, int32_t* gp) {
    error_[0] = '\0';
    return hooks().plan(i, sp, n, cp, gp, error_, sizeof error_);
  };
  EXPECT_EQ(call(scv, s.data(), -1, &c, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("count"), std::string::npos);
  EXPECT_EQ(call(scv, nullptr, 2, &c, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(call(scv, s.data(), 2, &c, nullptr), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(call(scv, s.data(), 2, nullptr, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(call(nullptr, s.data(), 2, &c, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(call(scv, nullptr, 0, nullptr, nullptr), SPECPIPE_OK);  // nothing to plan
  const std::vector<specpipe_plan_sequence> negative = {seq(1), seq(2, -1)};
  EXPECT_EQ(call(scv, negative.data(), 2, &c, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("max_gamma"), std::string::npos) << error_;
  EXPECT_EQ(g, Gammas(2, -1));  // nothing written on error
  specpipe_plan_costs nan_costs = c;
  nan_costs.verify_token_ms = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(call(scv, s.data(), 2, &nan_costs, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  specpipe_plan_costs negative_budget = c;
  negative_budget.token_budget = -1;
  EXPECT_EQ(call(scv, s.data(), 2, &negative_budget, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(metrics(scv)["rounds"], 0);  // refused calls change nothing
  // A slightly negative fitted intercept is read as 0, not refused.
  specpipe_plan_costs dip = c;
  dip.verify_base_ms = -0.01;
  EXPECT_EQ(call(scv, s.data(), 2, &dip, g.data()), SPECPIPE_OK) << error_;
  // Round costs by gamma (ABI 1.3): a count with no array, or out of range, is refused.
  specpipe_plan_costs by_gamma = c;
  by_gamma.round_ms_by_gamma_count = 2;
  EXPECT_EQ(call(scv, s.data(), 2, &by_gamma, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error_).find("round_ms_by_gamma"), std::string::npos) << error_;
  const double walls[2] = {0.2, std::numeric_limits<double>::infinity()};
  by_gamma.round_ms_by_gamma = walls;
  EXPECT_EQ(call(scv, s.data(), 2, &by_gamma, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  by_gamma.round_ms_by_gamma_count = -1;
  EXPECT_EQ(call(scv, s.data(), 2, &by_gamma, g.data()), SPECPIPE_ERR_INVALID_ARGUMENT);
  // ... and not read where the host's struct (ABI 1.2) ends before it.
  by_gamma.struct_size = offsetof(specpipe_plan_costs, round_ms_by_gamma);
  EXPECT_EQ(call(scv, s.data(), 2, &by_gamma, g.data()), SPECPIPE_OK) << error_;
  // A host with a smaller (older) costs struct: the missing fields read as 0.
  specpipe_plan_costs old = c;
  old.struct_size = offsetof(specpipe_plan_costs, verify_token_ms);
  EXPECT_EQ(call(scv, s.data(), 2, &old, g.data()), SPECPIPE_OK) << error_;

  // observe() cannot fail: bad calls are logged and ignored.
  hooks().observe(scv, nullptr, 3);
  hooks().observe(scv, nullptr, -1);
  hooks().observe(nullptr, nullptr, 0);
  hooks().forget(nullptr, 1);
  EXPECT_EQ(host_.lines.back().first, 2);

  // create(): NULL out-pointer or model, negative model max_gamma.
  const specpipe_model_desc m = model_desc();
  EXPECT_EQ(table().create(&api_, &m, "{}", nullptr, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  void* out = nullptr;
  EXPECT_EQ(table().create(&api_, nullptr, "{}", &out, error_, sizeof error_), SPECPIPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(create("{}", &out, -1), SPECPIPE_ERR_INVALID_ARGUMENT);
  // Without an error buffer, a failure is still a status.
  EXPECT_EQ(table().create(&api_, &m, "{\"x\": 1}", &out, nullptr, 0), SPECPIPE_ERR_CONFIG);
  // Without a host, the plugin still works (it just cannot log).
  EXPECT_EQ(table().create(nullptr, &m, "{}", &out, error_, sizeof error_), SPECPIPE_OK);
  instances_.push_back(out);
}

TEST_F(ScvPlugin, GammasStayWithinBoundsForRandomInputs) {
  std::mt19937 rng(424242);
  std::uniform_real_distribution<double> unit(0, 1);
  void* scv = instance(R"({"max_gamma": 6, "probe_interval": 3})");
  for (int round = 0; round < 2000; ++round) {
    const int32_t n = static_cast<int32_t>(rng() % 40);
    std::vector<specpipe_plan_sequence> s(static_cast<size_t>(n));
    for (auto& x : s)
      x = specpipe_plan_sequence{static_cast<int64_t>(rng() % 64), static_cast<int32_t>(rng() % 12) - 2,
                                 static_cast<int32_t>(rng() % 10), static_cast<int32_t>(rng() % 4096)};
    const bool measured = rng() % 5 != 0;
    const int32_t budget = rng() % 3 == 0 ? static_cast<int32_t>(rng() % 120) : 0;
    const specpipe_plan_costs c = measured ? abi_costs(unit(rng) * 0.5, unit(rng) * 3, unit(rng) * 0.5, budget)
                                           : abi_costs(0, 0, 0, budget);
    Gammas g;
    ASSERT_EQ(plan(scv, s, c, g), SPECPIPE_OK) << error_;
    for (int32_t i = 0; i < n; ++i) {
      ASSERT_GE(g[i], 0);
      ASSERT_LE(g[i], std::min(s[i].max_gamma, 6)) << "round " << round;
    }
    if (budget > 0 && n <= budget) {
      ASSERT_LE(window_tokens(g), budget) << "round " << round;
    }
    if (budget > 0 && n > budget) {
      ASSERT_EQ(g, Gammas(g.size(), 0));
    }
    std::vector<specpipe_plan_observation> o;
    for (int32_t i = 0; i < n; ++i)
      o.push_back({s[i].sequence, g[i], static_cast<int32_t>(rng() % (g[i] + 2)) - (rng() % 7 == 0 ? 2 : 0)});
    hooks().observe(scv, o.data(), static_cast<int32_t>(o.size()));
    if (rng() % 10 == 0) hooks().forget(scv, static_cast<int64_t>(rng() % 64));
  }
  const nlohmann::json m = metrics(scv);
  EXPECT_EQ(m["gamma_hist"].size(), 7u);
  const double a = m["mean_acceptance_estimate"].get<double>();
  EXPECT_GE(a, 0.0);
  EXPECT_LE(a, 1.0);
}

}  // namespace
