// SCV's instance (plugins/scv/scv_instance.h) through its C++ API: acceptance estimates
// from observe() and forget(), probes of sequences whose speculation is off, the gammas
// over simulated rounds, and the counters' JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "plugins/scv/acceptance_tracker.h"
#include "plugins/scv/scv_config.h"
#include "plugins/scv/scv_counters.h"
#include "plugins/scv/scv_instance.h"
#include "scv_test_costs.h"
#include "specpipe/plugin.h"

namespace scv_test {
namespace {

specpipe::scv::ScvInstance make_instance(const std::string& json, int32_t model_max_gamma = 8) {
  return specpipe::scv::ScvInstance(specpipe::scv::parse_scv_config(json, model_max_gamma), nullptr);
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
  // 6 by the line (ScvPlanner.OneSequenceTakesTheBestGammaByItsMeasuredRounds).
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

}  // namespace
}  // namespace scv_test
