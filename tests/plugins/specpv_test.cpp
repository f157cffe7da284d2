// SpecPV (plugins/specpv, slot verify_view) in the running pipeline, through the real
// .so: exact mode gives plain greedy decoding's tokens with budgets small enough that
// partial rounds and rollbacks really happen; approximate mode is labelled; budgets
// larger than the context verify fully; unusable configs are refused at load with the
// reason; a plugin answering garbage is disabled (counted) and every token stays right.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "core/error.h"
#include "pipeline/plugin_instance.h"
#include "tests/support/engine.h"
#include "tests/support/golden.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

const std::string kSpecpv = test::plugin_library(SPECPV_PLUGIN_PATH);
const std::string kFaulty = test::plugin_library(FAULTY_PLUGIN_PATH);

/// Budgets of a few blocks: on the golden prompts (a few hundred tokens) most rounds
/// are partial and some provisional tokens are wrong.
constexpr const char* kTiny =
    R"({"sink": 16, "retrieval": 16, "window": 16, "buffer": 64, "refresh_interval": 3)";

PipelineConfig with_specpv(const std::string& config_json, const std::string& path = kSpecpv) {
  PipelineConfig c = test::demo_engine_config(4);
  c.plugins.push_back({"specpv", path, config_json});
  c.slots.verify_view = "specpv";
  return c;
}

std::vector<int32_t> first(const std::vector<int32_t>& v, size_t n) { return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)}; }

/// The first `cases` public golden cases, `tokens` each: tokens equal the target's
/// greedy ones; returns the view counters summed.
ViewStats expect_golden(actors::Engine& engine, size_t cases, int32_t tokens) {
  ViewStats sum;
  size_t index = 0;
  for (const auto& c : test::golden_public()["cases"]) {
    if (index == cases) break;
    const actors::Completion got = engine.generate(test::greedy_request(test::ids(c["prompt_ids"]), tokens));
    EXPECT_EQ(got.reason, FinishReason::length) << got.error;
    EXPECT_EQ(got.tokens, first(test::ids(c["target_greedy_96"]), static_cast<size_t>(tokens))) << "case " << index;
    sum.merge(got.stats.view);
    ++index;
  }
  const auto kv = engine.kv_occupancy();
  EXPECT_EQ(kv.free_blocks, kv.total_blocks);
  return sum;
}

TEST(SpecpvExact, GoldenCasesEqualPlainWithPartialRoundsAndRollbacks) {
  actors::Engine engine(with_specpv(std::string(kTiny) + R"(, "retrieval_by": "attention_mass"})"));
  const ViewStats v = expect_golden(engine, 3, 48);
  EXPECT_GT(v.exact_rounds, 0);
  EXPECT_EQ(v.approximate_rounds, 0);
  EXPECT_GT(v.rollbacks, 0) << "budgets this small should make some provisional token wrong";
  EXPECT_GT(v.refreshes, 0);
  EXPECT_STREQ(v.mode(), "exact");
  const nlohmann::json m = engine.strategy_metrics()["verify_view"];
  EXPECT_EQ(m["strategy"], "specpv");
  EXPECT_EQ(m["mode"], "exact");
  EXPECT_TRUE(m["lossless"].get<bool>());
  EXPECT_FALSE(m["host"]["disabled"].get<bool>()) << m.dump();
  // Every refresh round's sequence was re-selected by the retrieval actor, none failed.
  EXPECT_EQ(m["retrieval"]["sequences"].get<int64_t>(), v.refreshes) << m.dump();
  EXPECT_EQ(m["retrieval"]["failures"].get<int64_t>(), 0);
  EXPECT_GT(m["retrieval"]["requests"].get<int64_t>(), 0);
  // On a GPU (SPECPIPE_TEST_DEVICE=cuda:N) every one of them on the device (query sums,
  // summaries, scores and top-k there); on the CPU none.
  const char* device = std::getenv("SPECPIPE_TEST_DEVICE");
  const bool cuda = device && std::string(device).rfind("cuda", 0) == 0;
  EXPECT_EQ(m["retrieval"]["on_device"].get<int64_t>(), cuda ? v.refreshes : 0) << m.dump();
  // Retrieval by attention mass: the forward (CPU or CUDA) gives every refresh its
  // blocks' mass, so no refresh falls back to Quest's bound.
  EXPECT_EQ(m["retrieval_by"], "attention_mass");
  EXPECT_EQ(m["retrieval"]["by_mass"].get<int64_t>(), v.refreshes) << m.dump();
  EXPECT_EQ(m["retrieval"]["mass_fallbacks"].get<int64_t>(), 0) << m.dump();
}

// retrieval_by: quest (the default), the block summaries' bound: the same tokens,
// nothing by mass.
TEST(SpecpvExact, QuestRetrievalEqualsPlainWithRollbacks) {
  actors::Engine engine(with_specpv(std::string(kTiny) + "}"));
  const ViewStats v = expect_golden(engine, 1, 32);
  EXPECT_GT(v.rollbacks, 0);
  const nlohmann::json m = engine.strategy_metrics()["verify_view"];
  EXPECT_EQ(m["retrieval_by"], "quest");
  EXPECT_EQ(m["retrieval"]["sequences"].get<int64_t>(), v.refreshes) << m.dump();
  EXPECT_EQ(m["retrieval"]["by_mass"].get<int64_t>(), 0) << m.dump();
  EXPECT_EQ(m["retrieval"]["mass_fallbacks"].get<int64_t>(), 0) << m.dump();
}

// adaptive_interval: a full round that rolled back halves that sequence's partial rounds
// before the next full one (counted), and the output stays plain decoding's.
TEST(SpecpvExact, AdaptiveIntervalVerifiesSoonerAfterARollbackAndStaysExact) {
  actors::Engine engine(with_specpv(std::string(kTiny) + R"(, "adaptive_interval": true})"));
  const ViewStats v = expect_golden(engine, 1, 32);
  EXPECT_GT(v.rollbacks, 0);
  const nlohmann::json m = engine.strategy_metrics()["verify_view"];
  EXPECT_TRUE(m["adaptive_interval"].get<bool>()) << m.dump();
  EXPECT_GT(m["interval_cuts"].get<int64_t>(), 0) << m.dump();
  EXPECT_GT(m["early_full_decisions"].get<int64_t>(), 0) << m.dump();
  EXPECT_FALSE(m["host"]["disabled"].get<bool>()) << m.dump();
}

// Batched: sequences with views of their own (and rollbacks) in one verify forward.
TEST(SpecpvExact, ConcurrentRequestsEqualPlain) {
  actors::Engine engine(with_specpv(std::string(kTiny) + "}"));
  const auto& cases = test::golden_public()["cases"];
  test::Completions done;
  std::map<RequestId, size_t> index;
  for (size_t i = 3; i < 6; ++i)
    index[engine.submit(test::greedy_request(test::ids(cases[i]["prompt_ids"]), 40), done.sink())] = i;
  int64_t partial = 0;
  for (const auto& [id, c] : done.wait(index.size())) {
    EXPECT_EQ(c.tokens, first(test::ids(cases[index.at(id)]["target_greedy_96"]), 40)) << "case " << index.at(id);
    partial += c.stats.view.partial_rounds();
  }
  EXPECT_GT(partial, 0);
}

TEST(SpecpvApproximate, IsLabelledInEveryStatistic) {
  actors::Engine engine(with_specpv(std::string(kTiny) + R"(, "mode": "approximate"})"));
  const auto& c = test::golden_public()["cases"][0];
  const actors::Completion got = engine.generate(test::greedy_request(test::ids(c["prompt_ids"]), 48));
  ASSERT_EQ(got.reason, FinishReason::length) << got.error;
  EXPECT_EQ(got.tokens.size(), 48u);
  EXPECT_GT(got.stats.view.approximate_rounds, 0);
  EXPECT_EQ(got.stats.view.rollbacks, 0) << "approximate verdicts are final";
  EXPECT_STREQ(got.stats.view.mode(), "approximate");
  const nlohmann::json m = engine.strategy_metrics()["verify_view"];
  EXPECT_EQ(m["mode"], "approximate");
  EXPECT_FALSE(m["lossless"].get<bool>());
}

TEST(SpecpvBudgets, LargerThanTheContextVerifiesFully) {
  actors::Engine engine(
      with_specpv(R"({"sink": 4096, "retrieval": 4096, "window": 4096, "buffer": 4096, "refresh_interval": 1})"));
  const ViewStats v = expect_golden(engine, 2, 32);
  EXPECT_EQ(v.partial_rounds(), 0);
  EXPECT_GT(v.full_rounds, 0);
}

/// create() through the real .so, without a pipeline (no model to load).
void expect_refused(const std::string& config_json, const std::string& reason) {
  specpipe_model_desc model{};
  model.struct_size = sizeof(model);
  model.num_layers = 2;
  model.block_size = 16;
  try {
    PluginInstance instance(PluginLibrary::load(kSpecpv), "verify_view", model, nlohmann::json::parse(config_json),
                            nullptr);
    FAIL() << "expected the config to be refused: " << reason;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(kSpecpv), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << message;
  }
}

TEST(SpecpvConfig, UnusableConfigsAreRefusedWithTheReason) {
  expect_refused(R"({"refresh_interval": 0})", "refresh_interval: 0 would never verify fully");
  expect_refused(R"({"retrieval": 0})", "zero retrieval blocks");
  expect_refused(R"({"retrieval": 15})", "zero retrieval blocks");
  expect_refused(R"({"retrieval_by": "nearest"})", "retrieval_by: must be");
  expect_refused(R"({"mode": "fast"})", "mode: must be \"exact\" or \"approximate\"");
  expect_refused(R"({"sink": -1})", "sink: -1 is not in");
  expect_refused(R"({"windows": 3})", "unknown key 'windows'");
  expect_refused(R"({"adaptive_interval": 1})", "adaptive_interval: not true or false");
}

TEST(SpecpvConfig, PipelineRefusesItBeforeRunning) {
  try {
    actors::Engine engine(with_specpv(R"({"refresh_interval": 0})"));
    FAIL() << "expected the pipeline to refuse the plugin";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refresh_interval"), std::string::npos) << e.what();
  }
}

// A verify_view plugin that answers garbage in round 3 (after partial rounds began) is
// disabled: from then on every round verifies fully, and the output is still exact.
class GarbageView : public ::testing::TestWithParam<const char*> {};

TEST_P(GarbageView, FallsBackToFullCountedAndExact) {
  actors::Engine engine(with_specpv(std::string(R"({"fail": ")") + GetParam() + R"(", "at_round": 3})", kFaulty));
  const ViewStats v = expect_golden(engine, 1, 40);
  EXPECT_GT(v.full_rounds, 0);
  const nlohmann::json m = engine.strategy_metrics()["verify_view"];
  EXPECT_TRUE(m["host"]["disabled"].get<bool>()) << m.dump();
  EXPECT_FALSE(m["host"]["fallbacks"].empty()) << m.dump();
}

INSTANTIATE_TEST_SUITE_P(Modes, GarbageView, ::testing::Values("view_garbage", "view_zero_retrieval", "view_bad_status"));

}  // namespace
}  // namespace specpipe
