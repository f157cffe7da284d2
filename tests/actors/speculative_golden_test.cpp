// Greedy draft-model speculation through the actor pipeline against the reference:
// for every public case and gamma in 1, 2, 4, 8, the accepted count of every round and
// the output tokens equal the golden data (tests/data/golden-public.json, "spec").
//
// On a GPU (SPECPIPE_TEST_DEVICE=cuda:N, tools/gpu/engine_check.sh) the output tokens must
// still equal the golden ones exactly: that is the lossless contract. The accepted counts
// are the CPU reference's: the GPU GEMMs read BF16 activations, which can move a near-tie
// of the draft model and so one round's proposal. There a case may differ in its rounds,
// but at most one case in the suite, and the mean acceptance stays within 1%. That holds
// for the per-kernel draft forward; the fused draft step (models.draft_fused_step, off by
// default) sums in other orders, so its BF16 near-ties differ once more: on
// an H100 one of the 16 cases' greedy draft runs parts from the per-kernel one at a
// logit gap of 0.006 (tools/gpu/gpu_generate's fused_draft_vs_kernels), and the fused
// suite allows two cases with other rounds (its output is still exact). Draft-ahead
// (slots.drafter.draft_ahead) must not move a single round: its suite has the bounds of
// the per-kernel one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "tests/support/engine.h"
#include "tests/support/golden.h"

namespace specpipe {
namespace {

class SpeculativeGolden : public ::testing::TestWithParam<int> {};

bool on_gpu() {
  const char* device = std::getenv("SPECPIPE_TEST_DEVICE");
  return device && std::string(device).rfind("cuda", 0) == 0;
}

/// Every public case through an engine of `config`: tokens equal the golden ones; the
/// rounds equal the reference's exactly on the CPU, on a GPU but in `gpu_cases` cases
/// (and the mean acceptance within 1%); the KV is all free afterwards.
void expect_golden_rounds(const PipelineConfig& config, int gamma, int gpu_cases) {
  actors::Engine engine(config);
  int index = 0, cases_with_other_rounds = 0;
  double accepted = 0, rounds = 0;
  int64_t drafted_ahead = 0;
  for (const auto& c : test::golden_public()["cases"]) {
    const auto want_tokens = test::expected_greedy(c);
    const auto want_rounds = c["spec"][std::to_string(gamma)]["accepted_per_round"].get<std::vector<int32_t>>();
    const actors::Completion got = engine.generate(test::greedy_request(test::ids(c["prompt_ids"]), 96));
    ASSERT_EQ(got.reason, FinishReason::length) << got.error;
    EXPECT_EQ(got.tokens, want_tokens) << "case " << index;
    if (!on_gpu()) {
      EXPECT_EQ(got.stats.accepted_per_round, want_rounds) << "case " << index;
    } else if (got.stats.accepted_per_round != want_rounds) {
      ++cases_with_other_rounds;
    }
    drafted_ahead += got.stats.drafted_ahead;
    accepted += static_cast<double>(got.stats.accepted);
    rounds += static_cast<double>(got.stats.rounds);
    ++index;
  }
  const double want_mean = test::golden_public()["spec_summary"][std::to_string(gamma)]["mean_accepted"].get<double>();
  if (!on_gpu()) {
    EXPECT_NEAR(accepted / rounds, want_mean, 1e-9);
  } else {
    // With a BF16 K/V store the tokens themselves move off the FP32 reference's in some
    // cases (expected_greedy), and the rounds with them: the tokens are what must hold.
    if (!test::kv_bf16()) {
      EXPECT_LE(cases_with_other_rounds, gpu_cases);
      EXPECT_LE(std::abs(accepted / rounds - want_mean), 0.01 * want_mean);
    }
    ::testing::Test::RecordProperty("cases_with_other_rounds", cases_with_other_rounds);
  }
  // Draft-ahead on: some rounds' drafts were made during the previous round; off: none.
  if (config.drafter.draft_ahead == DraftAhead::on) {
    EXPECT_GT(drafted_ahead, 0);
  } else if (config.drafter.draft_ahead == DraftAhead::off) {
    EXPECT_EQ(drafted_ahead, 0);
  }
  const auto kv = engine.kv_occupancy();
  EXPECT_EQ(kv.free_blocks, kv.total_blocks);
  EXPECT_EQ(kv.sequences, 0u);
}

TEST_P(SpeculativeGolden, AcceptedPerRoundAndOutputMatchReference) {
  PipelineConfig config = test::demo_engine_config(GetParam());
  config.models.draft_fused_step = false;
  config.drafter.draft_ahead = DraftAhead::off;
  expect_golden_rounds(config, GetParam(), 1);
}

// Drafting the next round while the target verifies (on by default with a device) must
// give every round the same drafts: the same rounds as the reference, on the CPU too.
TEST_P(SpeculativeGolden, DraftAheadKeepsEveryRound) {
  PipelineConfig config = test::demo_engine_config(GetParam());
  config.models.draft_fused_step = false;
  config.drafter.draft_ahead = DraftAhead::on;
  expect_golden_rounds(config, GetParam(), 1);
}

TEST_P(SpeculativeGolden, FusedDraftStepKeepsTheOutputExact) {
  if (!on_gpu()) GTEST_SKIP() << "the fused draft step runs on a device only";
  PipelineConfig config = test::demo_engine_config(GetParam());
  config.models.draft_fused_step = true;
  expect_golden_rounds(config, GetParam(), 2);
}

INSTANTIATE_TEST_SUITE_P(Gammas, SpeculativeGolden, ::testing::Values(1, 2, 4, 8));

TEST(SpeculativeGoldenLong, LongPromptsGamma4) {
  actors::Engine engine(test::demo_engine_config(4));
  for (const auto& c : test::golden_long()["cases"]) {
    const actors::Completion got = engine.generate(test::greedy_request(test::ids(c["prompt_ids"]), 64));
    EXPECT_EQ(got.tokens, test::ids(c["target_greedy_64"]));
    if (!on_gpu()) {
      EXPECT_EQ(got.stats.accepted_per_round, c["spec"]["4"]["accepted_per_round"].get<std::vector<int32_t>>());
    }
  }
}

}  // namespace
}  // namespace specpipe
