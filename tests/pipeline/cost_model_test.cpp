// The scheduler's cost estimates for verify_plan strategies (pipeline/verify_planner.h):
// a drafter's fixed cost per round must not be charged per draft step, or a planner
// undervalues long drafts (SCV on a GPU picked gamma ~2.4 where 4 was faster).
#include "pipeline/verify_planner.h"

#include <gtest/gtest.h>

namespace specpipe {
namespace {

TEST(CostModel, NothingMeasuredGivesZeroCosts) {
  const PlanCosts c = CostModel{}.costs(7);
  EXPECT_EQ(c.draft_step_ms, 0.0);
  EXPECT_EQ(c.verify_base_ms, 0.0);
  EXPECT_EQ(c.verify_token_ms, 0.0);
  EXPECT_EQ(c.token_budget, 7);
}

TEST(CostModel, DraftFixedCostGoesToTheRoundNotToEachStep) {
  // draft 0.3 ms a round + 0.08 ms a step; verify 0.35 ms + 0.01 ms a window token.
  CostModel m;
  for (int round = 0; round < 60; ++round) {
    const int32_t steps = 1 + round % 6;
    m.add_round(steps, 0.3 + 0.08 * steps, steps + 1, 0.35 + 0.01 * (steps + 1));
  }
  const PlanCosts c = m.costs(0);
  EXPECT_NEAR(c.draft_step_ms, 0.08, 1e-9);
  EXPECT_NEAR(c.verify_token_ms, 0.01, 1e-9);
  EXPECT_NEAR(c.verify_base_ms, 0.35 + 0.3, 1e-9);
}

TEST(CostModel, OneDraftLengthSoFarChargesAllDraftTimePerStep) {
  CostModel m;
  for (int round = 0; round < 10; ++round) m.add_round(4, 0.3 + 0.08 * 4, 5, 0.4);
  const PlanCosts c = m.costs(0);
  EXPECT_NEAR(c.draft_step_ms, (0.3 + 0.32) / 4, 1e-9);
  // One window size: the verify cost split evenly between base and tokens.
  EXPECT_NEAR(c.verify_base_ms, 0.2, 1e-9);
  EXPECT_NEAR(c.verify_token_ms, 0.2 / 5, 1e-9);
}

TEST(CostModel, ARareOtherDraftLengthDoesNotMakeANoisySlope) {
  // Mostly gamma 4 with jitter, one round at 5 that happened to be slow: a fitted slope
  // would be ~1 ms a step. Too little variance: everything stays per step.
  CostModel m;
  for (int round = 0; round < 40; ++round) m.add_round(4, 0.6 + (round % 2 ? 0.01 : -0.01), 5, 0.4);
  m.add_round(5, 1.6, 6, 0.4);
  const PlanCosts c = m.costs(0);
  EXPECT_GT(c.draft_step_ms, 0.1);
  EXPECT_LT(c.draft_step_ms, 0.2);  // about (0.6 .. 1.6) / 4..5, not 1.0
}

TEST(CostModel, RoundsWithoutDraftsLeaveTheDraftEstimateAlone) {
  CostModel m;
  for (int round = 0; round < 20; ++round) {
    const int32_t steps = round % 2 == 0 ? 2 : 4;
    m.add_round(steps, 0.1 + 0.05 * steps, steps + 1, 0.3);
    m.add_round(0, 0.0, 1, 0.3);  // speculation off for the batch: no draft time
  }
  EXPECT_NEAR(m.costs(0).draft_step_ms, 0.05, 1e-9);
}

}  // namespace
}  // namespace specpipe
