// SpecPV exact mode on the long golden prompts (3,000 and 7,000 tokens) and on every
// public golden case (slow: minutes on 2 cores): the tokens are plain greedy decoding's,
// with partial rounds and rollbacks on the way.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/engine.h"
#include "tests/support/golden.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

PipelineConfig with_specpv(const std::string& config_json) {
  PipelineConfig c = test::demo_engine_config(4);
  c.plugins.push_back({"specpv", test::plugin_library(SPECPV_PLUGIN_PATH), config_json});
  c.slots.verify_view = "specpv";
  return c;
}

/// 256 tokens of view: a tenth of the short prompt, under a twentieth of the long one.
/// (On this CPU the 3,000-token prompt rolls back, the 7,000-token one did not.)
void expect_long_prompts_plain(const std::string& extra) {
  actors::Engine engine(with_specpv(R"({"sink": 32, "retrieval": 128, "window": 32, "buffer": 64)" + extra + "}"));
  int64_t rollbacks = 0;
  for (const auto& c : test::golden_long()["cases"]) {
    const auto prompt = test::ids(c["prompt_ids"]);
    const actors::Completion got = engine.generate(test::greedy_request(prompt, 64));
    EXPECT_EQ(got.tokens, test::ids(c["target_greedy_64"])) << prompt.size() << " " << got.error;
    EXPECT_GT(got.stats.view.exact_rounds, 0) << prompt.size();
    rollbacks += got.stats.view.rollbacks;
  }
  EXPECT_GT(rollbacks, 0);
}

TEST(SpecpvExactLong, LongPromptsEqualPlain) { expect_long_prompts_plain(""); }

// Retrieval by attention mass instead of the default, Quest's bound: the same tokens.
TEST(SpecpvExactLong, LongPromptsEqualPlainWithAttentionMassRetrieval) {
  expect_long_prompts_plain(R"(, "retrieval_by": "attention_mass")");
}

// The adaptive interval (full rounds brought forward after rollbacks) changes the
// schedule only: the same tokens.
TEST(SpecpvExactLong, LongPromptsEqualPlainWithTheAdaptiveInterval) {
  expect_long_prompts_plain(R"(, "adaptive_interval": true)");
}

TEST(SpecpvExactLong, EveryGoldenCaseEqualsPlain) {
  actors::Engine engine(
      with_specpv(R"({"sink": 16, "retrieval": 16, "window": 16, "buffer": 64, "refresh_interval": 3})"));
  ViewStats sum;
  int index = 0;
  for (const auto& c : test::golden_public()["cases"]) {
    const actors::Completion got = engine.generate(test::greedy_request(test::ids(c["prompt_ids"]), 96));
    EXPECT_EQ(got.tokens, test::ids(c["target_greedy_96"])) << "case " << index++;
    sum.merge(got.stats.view);
  }
  EXPECT_GT(sum.exact_rounds, 0);
  EXPECT_GT(sum.rollbacks, 0);
}

}  // namespace
}  // namespace specpipe
