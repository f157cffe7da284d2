// SCV's exploration where it is dear and its one-sequence measuring hold, through the C++
// instance (docs/BENCHMARKS.md section 8, stop 33):
//  - from probe_backoff_batch sequences up a probe is a drafting round for the whole batch
//    whose first round carries the draft model's catch-up on each probed context; a probe
//    that did not turn drafting on doubles the wait before the next one at that batch size
//    (on an H100 SCV ran 0.91 / 0.82x plain at 32 / 128 clients while not drafting);
//  - one sequence planned by its measured rounds keeps a gamma the host has not measured
//    yet until the host can measure it (on an H100 SCV tried gamma 5 for a round or two,
//    the new length's slow first rounds tilted the line back, and it stayed at 2 where 4
//    was best: 3-5 were never measured).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plugins/scv/scv_config.h"
#include "plugins/scv/scv_instance.h"
#include "plugins/scv/scv_planner.h"
#include "specpipe/plugin.h"

namespace scv_probe {
namespace {

using specpipe::scv::RoundCosts;
using specpipe::scv::ScvInstance;
using Gammas = std::vector<int32_t>;

ScvInstance make_instance(const std::string& json, int32_t model_max_gamma = 8) {
  return ScvInstance(specpipe::scv::parse_scv_config(json, model_max_gamma), nullptr);
}

Gammas plan_once(ScvInstance& scv, const std::vector<specpipe_plan_sequence>& s, const RoundCosts& c) {
  Gammas g(s.size(), -1);
  scv.plan(s, c, g);
  return g;
}

/// `rounds` rounds of 8 sequences whose drafts are all rejected (accept: all accepted);
/// the last round's gammas.
Gammas run_eight(ScvInstance& scv, int rounds, const RoundCosts& c, bool accept) {
  std::vector<specpipe_plan_sequence> s;
  for (int64_t id = 0; id < 8; ++id) s.push_back({id, 4, 8, 100});
  Gammas g;
  for (int round = 0; round < rounds; ++round) {
    g = plan_once(scv, s, c);
    std::vector<specpipe_plan_observation> seen;
    for (size_t i = 0; i < s.size(); ++i)
      if (g[i] > 0) seen.push_back({s[i].sequence, g[i], accept ? g[i] : 0});
    scv.observe(seen);
  }
  return g;
}

// Off at acceptance 0.02, but a sequence's drafts, all accepted at half the cost, would
// pay: its probes are due every probe_interval rounds off.
const RoundCosts kEight{0.02, 1.0, 0.02, 0, 0, {}};

TEST(ScvProbe, LostProbesDoubleTheWaitFromProbeBackoffBatchUp) {
  auto scv = make_instance(R"({"prior_acceptance": 0.02})");
  EXPECT_EQ(run_eight(scv, 600, kEight, false), Gammas(8, 0));
  // Probes start at rounds 16, 52, 120, 252 and 512 (each after the last one's end +
  // 16 x 2, 4, 8, 16 rounds), 4 rounds x 8 sequences each.
  EXPECT_EQ(scv.counters().probes, 5u * 4 * 8);
  EXPECT_EQ(scv.counters().probes_lost, 5u);
  EXPECT_EQ(scv.counters().probe_rounds, 5u * 4);
  EXPECT_EQ(scv.counters().probe_only_rounds, 5u * 4);
  EXPECT_EQ(scv.counters().drafting_rounds, 5u * 4);
  EXPECT_GT(scv.counters().probes_held, 0u);
  // Without the backoff (as before): after every 15 rounds off, 31 probes of 4 rounds each.
  auto every = make_instance(R"({"prior_acceptance": 0.02, "probe_backoff_batch": 0})");
  run_eight(every, 600, kEight, false);
  EXPECT_EQ(every.counters().probes, 31u * 4 * 8);
  EXPECT_EQ(every.counters().probes_lost, 0u);
  // Below probe_backoff_batch the wait stays probe_interval.
  auto small = make_instance(R"({"prior_acceptance": 0.02, "probe_backoff_batch": 9})");
  run_eight(small, 600, kEight, false);
  EXPECT_EQ(small.counters().probes, 31u * 4 * 8);
}

TEST(ScvProbe, AProbeThatWinsEndsTheBackoff) {
  auto scv = make_instance(R"({"prior_acceptance": 0.02})");
  run_eight(scv, 600, kEight, false);  // backed off to 16 x 16 rounds
  // Acceptance rises: the next probe (round 772) turns drafting on, and it stays on.
  EXPECT_EQ(run_eight(scv, 150, kEight, true), Gammas(8, 0));
  const Gammas on = run_eight(scv, 60, kEight, true);
  for (int32_t g : on) EXPECT_GT(g, 0);
  EXPECT_EQ(scv.counters().probes_lost, 5u);
  // Off again: the wait starts from probe_interval x 2 once more, so two probes are lost
  // within 100 rounds (from 16 x 16 rounds there would be one at most).
  run_eight(scv, 100, kEight, false);
  EXPECT_EQ(scv.counters().probes_lost, 7u);
}

// One sequence, acceptance 0.9 held by a heavy prior; the host has measured gamma 0 and 2.
// At first the line makes 5 the best (unmeasured gammas cost the line plus gamma 2's
// excess over it); then its first rounds make a step dear and 2 is best by 20% and more.
RoundCosts one_sequence(double step, std::vector<double> by_gamma = {0.22, 0, 0.30}) {
  return RoundCosts{step, 0.2, 0.01, 0, 0, std::move(by_gamma)};
}

TEST(ScvProbe, OneSequenceHoldsAnUnmeasuredGammaUntilItCanBeMeasured) {
  const std::string config = R"({"prior_acceptance": 0.9, "prior_weight": 1e6})";
  const std::vector<specpipe_plan_sequence> one = {{1, 4, 5, 100}};
  auto scv = make_instance(config);
  EXPECT_EQ(plan_once(scv, one, one_sequence(0.01)), Gammas{5});
  for (int round = 0; round < 11; ++round) EXPECT_EQ(plan_once(scv, one, one_sequence(0.1)), Gammas{5}) << round;
  EXPECT_EQ(scv.counters().measure_hold_rounds, 11u);
  // Held 12 rounds and still not measured: the plan decides again.
  EXPECT_EQ(plan_once(scv, one, one_sequence(0.1)), Gammas{2});
  // Measured within the hold, and better than 2: kept.
  auto measured = make_instance(config);
  plan_once(measured, one, one_sequence(0.01));
  for (int round = 0; round < 11; ++round) plan_once(measured, one, one_sequence(0.1));
  for (int round = 0; round < 20; ++round)
    EXPECT_EQ(plan_once(measured, one, one_sequence(0.1, {0.22, 0, 0.30, 0, 0, 0.40})), Gammas{5});
  // Without the hold (as before): back to 2 in the next round, 5 never measured.
  auto off = make_instance(R"({"prior_acceptance": 0.9, "prior_weight": 1e6, "measure_rounds": 0})");
  EXPECT_EQ(plan_once(off, one, one_sequence(0.01)), Gammas{5});
  EXPECT_EQ(plan_once(off, one, one_sequence(0.1)), Gammas{2});
  EXPECT_EQ(off.counters().measure_hold_rounds, 0u);
  // A measured gamma is not held: the plan moves away from it as before.
  auto all = make_instance(config);
  EXPECT_EQ(plan_once(all, one, one_sequence(0.01, {0.22, 0.30, 0.30, 0.50, 0.50, 0.40})), Gammas{5});
  EXPECT_EQ(plan_once(all, one, one_sequence(0.01, {0.22, 0.30, 0.30, 0.50, 0.50, 0.80})), Gammas{2});
  EXPECT_EQ(all.counters().measure_hold_rounds, 0u);
}

}  // namespace
}  // namespace scv_probe
