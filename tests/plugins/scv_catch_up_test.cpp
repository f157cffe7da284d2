// SCV and the scheduler's CostModel at a batch of several sequences where each request's
// first drafting round carries the draft model's catch-up on its prompt (on an H100 at 8
// clients, every few rounds): those rounds stay out of the cost lines, and what they cost
// beyond a usual drafting round is charged to drafting (draft_base_ms). Without it the
// drafting rounds left looked cheap and SCV drafted at 8 clients where every fixed gamma
// lost to plain (docs/BENCHMARKS.md section 8, stop 32).
#include <gtest/gtest.h>

#include <vector>

#include "pipeline/verify_planner.h"
#include "plugins/scv/scv_planner.h"

namespace scv_catch_up {
namespace {

using specpipe::CostModel;
using specpipe::PlanCosts;
using specpipe::RoundSample;

/// A round of n sequences with `gamma` drafts each: the verify forward 0.2 ms plus 2 us a
/// window token, the wall time given.
RoundSample round_of(int32_t n, int32_t gamma, double wall_ms, bool catch_up = false) {
  const int64_t window = static_cast<int64_t>(n) * (1 + gamma);
  return {n, gamma, window, gamma > 0 ? 0.05 * gamma : 0.0, 0.2 + 0.002 * static_cast<double>(window), wall_ms,
          catch_up};
}

/// Batch 8 as on the H100 (plain 0.29 ms a round; a usual gamma-2 round 0.45 ms); with
/// `catch_ups`, every 4th drafting round is a request's first, 2.5 ms.
CostModel batch_of_eight(bool catch_ups, int32_t n = 8) {
  CostModel m;
  for (int i = 0; i < 5; ++i) m.add_round(round_of(n, 0, 0.29));
  for (int i = 0; i < 64; ++i) m.add_round(round_of(n, 2, catch_ups && i % 4 == 3 ? 2.5 : 0.45, catch_ups && i % 4 == 3));
  return m;
}

/// SCV's plan for n sequences at acceptance 0.8 (cap 4) with these costs.
std::vector<int32_t> plan(const PlanCosts& c, int32_t n) {
  const std::vector<specpipe::scv::WindowRequest> windows(static_cast<size_t>(n), {0.8, 4, 4});
  const specpipe::scv::RoundCosts costs{c.draft_step_ms,   c.verify_base_ms, c.verify_token_ms,
                                        c.token_budget,    c.draft_base_ms,  c.round_ms_by_gamma};
  return specpipe::scv::plan_round(windows, costs).gamma;
}

TEST(ScvCatchUp, CatchUpsChargedToDraftingTurnItOffAtEight) {
  // Without catch-ups drafting pays at 0.8 (19.5 tokens in about 0.45 ms against 8 in
  // 0.29): SCV drafts.
  const PlanCosts usual = batch_of_eight(false).costs(8, 0);
  EXPECT_GT(plan(usual, 8)[0], 0);
  // With them a drafting round costs about 0.45 + (2.5 - 0.45) / 4 ms on average: plain
  // is better, and the costs say so.
  const PlanCosts with = batch_of_eight(true).costs(8, 0);
  EXPECT_NEAR(with.draft_base_ms - usual.draft_base_ms, 2.05 / 4, 0.05);
  EXPECT_NEAR(with.draft_step_ms, usual.draft_step_ms, 1e-9);
  EXPECT_NEAR(with.verify_base_ms, usual.verify_base_ms, 1e-9);
  EXPECT_EQ(plan(with, 8), std::vector<int32_t>(8, 0));
}

TEST(ScvCatchUp, TheShareFadesOnceCatchUpsStop) {
  CostModel m = batch_of_eight(true);
  const double base_then = m.costs(8, 0).draft_base_ms;
  for (int i = 0; i < 200; ++i) m.add_round(round_of(8, 2, 0.45));
  const double base_now = m.costs(8, 0).draft_base_ms;
  EXPECT_LT(base_now, 0.05 * base_then);
  EXPECT_GT(plan(m.costs(8, 0), 8)[0], 0);
}

TEST(ScvCatchUp, OneSequenceAndUnmeasuredSizesAreNotCharged) {
  // One sequence: its costs and plan are those without the catch-up rounds.
  const PlanCosts one = batch_of_eight(true, 1).costs(1, 0), plain_one = batch_of_eight(false, 1).costs(1, 0);
  EXPECT_DOUBLE_EQ(one.draft_base_ms, plain_one.draft_base_ms);
  // A catch-up round before anything is measured is not kept: nothing to compare it with.
  CostModel fresh;
  fresh.add_round(round_of(8, 2, 5.0, true));
  for (int i = 0; i < 5; ++i) fresh.add_round(round_of(8, 0, 0.29));
  for (int i = 0; i < 16; ++i) fresh.add_round(round_of(8, 2, 0.45));
  EXPECT_NEAR(fresh.costs(8, 0).draft_base_ms, batch_of_eight(false).costs(8, 0).draft_base_ms, 0.01);
  // Nor is a catch-up round without drafts (nothing drafted: nothing caught up).
  CostModel m = batch_of_eight(false);
  m.add_round(round_of(8, 0, 5.0, true));
  EXPECT_DOUBLE_EQ(m.costs(8, 0).draft_base_ms, batch_of_eight(false).costs(8, 0).draft_base_ms);
}

}  // namespace
}  // namespace scv_catch_up
