// SCV's planner (plugins/scv/scv_planner.h) called directly, on synthetic costs (checked
// against brute force) and on an H100's recorded ones (scv_test_costs.h): the gammas a
// round's costs and acceptances give, the token budget, min_gain, the switch gains, the
// bound before the search, and one sequence's rounds measured by gamma.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "pipeline/verify_planner.h"
#include "plugins/scv/scv_planner.h"
#include "scv_test_costs.h"

namespace scv_test {
namespace {

double tokens_per_ms(const std::vector<WindowRequest>& w, const RoundCosts& c, const Gammas& g) {
  double tokens = 0;
  for (size_t i = 0; i < w.size(); ++i) tokens += specpipe::scv::expected_tokens(w[i].acceptance, g[i]);
  return tokens / specpipe::scv::round_cost_ms(c, g);
}

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

/// The engine's cost model after the rounds of every level of kSection8, as the scheduler
/// feeds it; the verify forward is given 70% of a round's wall time.
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

}  // namespace
}  // namespace scv_test
