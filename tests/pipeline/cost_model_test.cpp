// The scheduler's cost estimates for verify_plan strategies (pipeline/verify_planner.h):
// a drafter's fixed cost per round must not be charged per draft step, or a planner
// undervalues long drafts (SCV on a GPU picked gamma ~2.4 where 4 was faster), nor to
// every round, or a planner cannot see what turning speculation off saves; and a round's
// cost is kept per batch size, from the round's wall time, because on a device a window
// token and a draft step cost very different amounts at batch 1 and at batch 128.
#include "pipeline/verify_planner.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <vector>

namespace specpipe {
namespace {

/// A round of one sequence with only the draft and verify times (no wall time: the
/// pooled estimates alone).
RoundSample timed(int32_t steps, double draft_ms, int64_t window_tokens, double verify_ms) {
  return {1, steps, window_tokens, draft_ms, verify_ms, 0};
}

TEST(CostModel, NothingMeasuredGivesZeroCosts) {
  const PlanCosts c = CostModel{}.costs(4, 7);
  EXPECT_EQ(c.draft_step_ms, 0.0);
  EXPECT_EQ(c.draft_base_ms, 0.0);
  EXPECT_EQ(c.verify_base_ms, 0.0);
  EXPECT_EQ(c.verify_token_ms, 0.0);
  EXPECT_EQ(c.token_budget, 7);
}

TEST(CostModel, DraftFixedCostGoesToDraftingRoundsNotToEachStep) {
  // draft 0.3 ms a round + 0.08 ms a step; verify 0.35 ms + 0.01 ms a window token.
  CostModel m;
  for (int round = 0; round < 60; ++round) {
    const int32_t steps = 1 + round % 6;
    m.add_round(timed(steps, 0.3 + 0.08 * steps, steps + 1, 0.35 + 0.01 * (steps + 1)));
  }
  const PlanCosts c = m.costs(1, 0);
  EXPECT_NEAR(c.draft_step_ms, 0.08, 1e-9);
  EXPECT_NEAR(c.draft_base_ms, 0.3, 1e-9);  // saved by a round without drafts
  EXPECT_NEAR(c.verify_token_ms, 0.01, 1e-9);
  EXPECT_NEAR(c.verify_base_ms, 0.35, 1e-9);
}

TEST(CostModel, OneDraftLengthSoFarChargesAllDraftTimePerStep) {
  CostModel m;
  for (int round = 0; round < 10; ++round) m.add_round(timed(4, 0.3 + 0.08 * 4, 5, 0.4));
  const PlanCosts c = m.costs(1, 0);
  EXPECT_NEAR(c.draft_step_ms, (0.3 + 0.32) / 4, 1e-9);
  EXPECT_EQ(c.draft_base_ms, 0.0);
  // One window size: the verify cost split evenly between base and tokens.
  EXPECT_NEAR(c.verify_base_ms, 0.2, 1e-9);
  EXPECT_NEAR(c.verify_token_ms, 0.2 / 5, 1e-9);
}

TEST(CostModel, ARareOtherDraftLengthDoesNotMakeANoisySlope) {
  // Mostly gamma 4 with jitter, one round at 5 that happened to be slow: a fitted slope
  // would be ~1 ms a step. Too little variance: everything stays per step.
  CostModel m;
  for (int round = 0; round < 40; ++round) m.add_round(timed(4, 0.6 + (round % 2 ? 0.01 : -0.01), 5, 0.4));
  m.add_round(timed(5, 1.6, 6, 0.4));
  const PlanCosts c = m.costs(1, 0);
  EXPECT_GT(c.draft_step_ms, 0.1);
  EXPECT_LT(c.draft_step_ms, 0.2);  // about (0.6 .. 1.6) / 4..5, not 1.0
}

TEST(CostModel, RoundsWithoutDraftsLeaveTheDraftEstimateAlone) {
  CostModel m;
  for (int round = 0; round < 20; ++round) {
    const int32_t steps = round % 2 == 0 ? 2 : 4;
    m.add_round(timed(steps, 0.1 + 0.05 * steps, steps + 1, 0.3));
    m.add_round(timed(0, 0.0, 1, 0.3));  // speculation off for the batch: no draft time
  }
  EXPECT_NEAR(m.costs(1, 0).draft_step_ms, 0.05, 1e-9);
}

TEST(CostModel, BatchSizesKeepTheirOwnRoundCosts) {
  // Batch 1: a window token is nearly free and drafting costs 0.06 ms a step; batch 128:
  // a round without drafts 1.4 ms, and drafting adds 1.3 ms plus 0.05 ms a step plus
  // 0.008 ms a window token.
  CostModel m;
  for (int round = 0; round < 90; ++round) {
    const int32_t g = 2 + 2 * (round % 3);  // 2, 4, 6
    m.add_round({1, 0, 1, 0, 0.2, 0.26});
    m.add_round({1, g, 1 + g, 0.05, 0.2 + 0.001 * g, 0.26 + 0.06 * g + 0.001 * g});
    m.add_round({128, 0, 128, 0, 1.0, 1.4});
    const int64_t tokens = 128 * (1 + g);
    m.add_round({128, g, tokens, 0.5, 1.0 + 0.008 * (tokens - 128),
                 1.4 + 1.3 + 0.05 * g + 0.008 * static_cast<double>(tokens - 128)});
  }
  const PlanCosts one = m.costs(1, 0);
  EXPECT_NEAR(one.verify_token_ms, 0.001, 1e-6);
  EXPECT_NEAR(one.verify_base_ms + one.verify_token_ms, 0.26, 1e-6);  // a round without drafts
  EXPECT_NEAR(one.draft_step_ms, 0.06, 1e-6);
  EXPECT_NEAR(one.draft_base_ms, 0.0, 1e-6);
  const PlanCosts big = m.costs(128, 0);
  EXPECT_NEAR(big.verify_token_ms, 0.008, 1e-6);
  EXPECT_NEAR(big.verify_base_ms + 128 * big.verify_token_ms, 1.4, 1e-6);
  EXPECT_NEAR(big.draft_step_ms, 0.05, 1e-6);
  EXPECT_NEAR(big.draft_base_ms, 1.3, 1e-6);
  // 100 sequences are costed as 128 (the nearest power of two), less 28 windows.
  const PlanCosts near = m.costs(100, 0);
  EXPECT_NEAR(near.verify_base_ms + 100 * near.verify_token_ms, 1.4 - 28 * 0.008, 1e-6);
  EXPECT_NEAR(near.draft_base_ms, 1.3, 1e-6);
  EXPECT_EQ(CostModel::bucket_of(1), 0u);
  EXPECT_EQ(CostModel::bucket_of(11), 3u);
  EXPECT_EQ(CostModel::bucket_of(12), 4u);
  EXPECT_EQ(CostModel::bucket_of(100000), CostModel::kBuckets - 1);
}

TEST(CostModel, SpeculationOffIsCostedAsTheMeasuredPlainRound) {
  // Rounds without drafts only (SCV has turned speculation off at this batch): the
  // modelled cost of a round at gamma 0 is their wall time, not the verify forward alone.
  CostModel m;
  for (int round = 0; round < 30; ++round) m.add_round({32, 0, 32, 0, 0.45, 0.61});
  const PlanCosts c = m.costs(32, 0);
  EXPECT_NEAR(c.verify_base_ms + 32 * c.verify_token_ms, 0.61, 1e-9);
}

TEST(CostModel, ABatchSizeThatOnlyDraftedGetsPlainRoundsMeasuredAndTheirMedianCounts) {
  // Batch 8 on a device: plain 0.22 ms a round; drafting costs 0.35 ms once a round
  // drafts plus 0.1 ms a step. A strategy that drafts from the start never sees plain at
  // this size: the drafting line at zero steps (0.57 ms, the fixed cost inside) stood in
  // for it, and turning speculation off looked as if it saved nothing.
  CostModel m;
  auto drafting = [&](int32_t g) { m.add_round({8, g, 8 * (1 + g), 0.3, 0.2, 0.57 + 0.1 * g}); };
  EXPECT_TRUE(m.plain_due(8));  // nothing at this size yet: plain first
  drafting(2);
  drafting(4);
  EXPECT_TRUE(m.plain_due(8));  // still no plain round here
  EXPECT_TRUE(m.plain_due(1));  // nor at another batch size
  EXPECT_FALSE(m.plain_due(0));
  // The first plain rounds of a shape run eagerly or capture its CUDA graph: slow.
  // Plain is due until kUsualRounds are known, then after 2 drafting rounds.
  const double plain_walls[] = {0.9, 3.0, 0.22, 0.22, 0.22};
  for (size_t i = 0; i < std::size(plain_walls); ++i) {
    m.add_round({8, 0, 8, 0, 0.2, plain_walls[i]});
    EXPECT_EQ(m.plain_due(8), i + 1 < CostModel::kUsualRounds) << i;
    drafting(2);
    drafting(4);
  }
  const PlanCosts c = m.costs(8, 0);
  EXPECT_NEAR(c.verify_base_ms + 8 * c.verify_token_ms, 0.22, 1e-9);  // the lower third, not the mean
  EXPECT_GT(c.draft_base_ms, 0.3);  // what turning off saves is seen
  // Measured enough: the next plain round is due after kPlainEvery drafting rounds.
  for (int32_t since = 2; since + 1 < CostModel::kPlainEvery; ++since) {
    drafting(2);
    EXPECT_FALSE(m.plain_due(8));
  }
  drafting(2);
  EXPECT_TRUE(m.plain_due(8));
}

TEST(CostModel, AShapesFirstDraftingRoundsDoNotMakeDraftingLookDear) {
  // Batch 1 on a device: plain 0.26 ms a round, drafting 4 tokens 0.46 ms. The first
  // drafting rounds of a shape run eagerly or capture a CUDA graph (8 ms). With
  // acceptance 0.8 drafting 4 brings 3.36 tokens a round: it must still pay, as the plain
  // rounds' own first sightings do not make plain look dear.
  CostModel m;
  const double plain_walls[] = {5.0, 0.26, 0.26, 0.26, 0.26};
  for (double wall : plain_walls) m.add_round({1, 0, 1, 0, 0.2, wall});
  for (int round = 0; round < 3; ++round) m.add_round({1, 4, 5, 7.5, 0.2, 8.0});
  for (int round = 0; round < 6; ++round) m.add_round({1, 4, 5, 0.15, 0.2, 0.46});
  const PlanCosts c = m.costs(1, 0);
  const double plain_ms = c.verify_base_ms + c.verify_token_ms;
  EXPECT_NEAR(plain_ms, 0.26, 1e-9);
  const double drafting_ms = c.draft_base_ms + 4 * c.draft_step_ms + c.verify_base_ms + 5 * c.verify_token_ms;
  const double accepted = 1 + 0.8 + 0.8 * 0.8 + 0.8 * 0.8 * 0.8 + 0.8 * 0.8 * 0.8 * 0.8;
  EXPECT_NEAR(drafting_ms, 0.46, 1e-6);
  EXPECT_GT(accepted / drafting_ms, 1.0 / plain_ms);
}

TEST(CostModel, ABatchSizeWithoutDraftingRoundsTakesTheNearestSizesDraftingCostsScaledByPlain) {
  // 32 sequences: plain 0.6 ms, drafting 0.1 ms + 0.4 ms a step. 128: plain rounds only
  // (1.2 ms), as while a level fills or while the strategy keeps speculation off there.
  // The pooled draft time (cheap: 0.05 ms a step) must not stand in for 128's drafting
  // costs: the nearest size's do, scaled by 1.2 / 0.6.
  CostModel m;
  for (int round = 0; round < 20; ++round) {
    const int32_t g = 2 + 2 * (round % 3);
    m.add_round({32, 0, 32, 0, 0.4, 0.6});
    m.add_round({32, g, 32 * (1 + g), 0.05 * g, 0.4, 0.6 + 0.1 + 0.4 * g});
    m.add_round({128, 0, 128, 0, 0.9, 1.2});
  }
  const PlanCosts mid = m.costs(32, 0);
  EXPECT_NEAR(mid.draft_step_ms, 0.4, 0.02);
  EXPECT_NEAR(mid.draft_base_ms, 0.1, 0.05);
  const PlanCosts big = m.costs(128, 0);
  EXPECT_NEAR(big.draft_step_ms, 2 * mid.draft_step_ms, 1e-9);
  EXPECT_NEAR(big.draft_base_ms, 2 * mid.draft_base_ms, 1e-9);
  EXPECT_NEAR(big.verify_base_ms + 128 * big.verify_token_ms, 1.2, 1e-9);
  // 8 sequences (plain rounds only): the nearest size with drafting rounds is 32, scaled
  // by 8's plain round over 32's (0.3 / 0.6).
  for (int round = 0; round < 5; ++round) m.add_round({8, 0, 8, 0, 0.2, 0.3});
  EXPECT_NEAR(m.costs(8, 0).draft_step_ms, 0.5 * mid.draft_step_ms, 1e-9);
  // A size with nothing measured: the pooled estimates, and plain is due first.
  EXPECT_TRUE(m.plain_due(2));
}

TEST(CostModel, BeforeAnyDraftingLineDraftingCostsNothing) {
  // A server's first rounds: plain measured, and drafting only in a few rounds of new
  // shapes (eager, then a graph capture: 1 and 3 ms more). Those must not price drafting
  // out (a strategy would then neither draft nor probe, and nothing would measure it
  // again): until a draft length has kUsualRounds rounds, drafting costs nothing.
  CostModel m;
  for (int round = 0; round < 3; ++round) m.add_round({1, 0, 1, 0, 0.2, round == 0 ? 1.26 : 0.26});
  m.add_round({1, 4, 5, 0.3, 0.21, 1.5});
  m.add_round({1, 4, 5, 0.9, 0.21, 3.5});
  PlanCosts c = m.costs(1, 0);
  EXPECT_EQ(c.draft_step_ms, 0.0);
  EXPECT_EQ(c.draft_base_ms, 0.0);
  EXPECT_NEAR(c.verify_base_ms + c.verify_token_ms, 0.26, 1e-9);
  m.add_round({1, 4, 5, 0.06, 0.21, 0.5});  // the third round of gamma 4: the line
  c = m.costs(1, 0);
  EXPECT_NEAR(c.draft_base_ms + 4 * c.draft_step_ms + 4 * c.verify_token_ms, 0.5 - 0.26, 1e-9);
}

TEST(CostModel, OneSequencesRoundsAreReadPerDraftLengthByTheirMeanLessFirstSightings) {
  // One sequence on a device (H100, stop 30): plain 0.218 ms, and rounds of one draft
  // length that differ by what they were: 0.36 ms where the draft-ahead chain had the
  // drafts ready, 0.41 where it missed. A length's first rounds are new shapes (eager,
  // then captured: 1 and 3 ms), and a stall (3 ms) later is left out too. The mean of the
  // rest is what the length costs (the lower third would be the taken chains alone).
  CostModel m;
  const auto rounds = [&](int32_t g, std::initializer_list<double> walls) {
    for (const double wall : walls) m.add_round({1, g, 1 + g, g > 0 ? 0.05 : 0.0, 0.2, wall});
  };
  const auto first_sightings = [&](int32_t g) {
    for (size_t i = 0; i < CostModel::kOneSkipped; ++i) rounds(g, {i % 2 ? 3.0 : 1.0});
  };
  first_sightings(0);
  rounds(0, {0.218, 0.218, 0.218});
  first_sightings(1);
  rounds(1, {0.31, 0.31, 0.31});
  first_sightings(2);
  rounds(2, {3.0, 0.36, 0.41, 0.41, 0.36, 0.41});
  first_sightings(5);
  rounds(5, {0.7, 0.7});  // too few yet
  PlanCosts c = m.costs(1, 0);
  ASSERT_EQ(c.round_ms_by_gamma.size(), 3u);
  EXPECT_NEAR(c.round_ms_by_gamma[0], 0.218, 1e-9);
  EXPECT_NEAR(c.round_ms_by_gamma[1], 0.31, 1e-9);
  EXPECT_NEAR(c.round_ms_by_gamma[2], (2 * 0.36 + 3 * 0.41) / 5, 1e-9);
  rounds(5, {0.7});
  c = m.costs(1, 0);
  ASSERT_EQ(c.round_ms_by_gamma.size(), 6u);
  EXPECT_EQ(c.round_ms_by_gamma[4], 0.0);  // never drafted 4: not measured
  // The last kOneKept rounds of a length count; a length not drafted for kOneFresh rounds
  // of one sequence is no longer given (plain, 2 and 5 here).
  for (uint64_t round = 0; round < CostModel::kOneFresh; ++round) rounds(1, {0.5});
  c = m.costs(1, 0);
  EXPECT_EQ(c.round_ms_by_gamma, (std::vector<double>{0.0, 0.5}));
  // Other batch sizes: none (their rounds mix gammas; the line stands).
  for (int round = 0; round < 20; ++round) m.add_round({2, 1, 4, 0.05, 0.2, 0.35});
  EXPECT_TRUE(m.costs(2, 0).round_ms_by_gamma.empty());
}

}  // namespace
}  // namespace specpipe
