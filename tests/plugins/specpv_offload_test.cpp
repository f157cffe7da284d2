// SpecPV over the host tier (issue 17 item 5): with a target pool too small for the
// requests, their oldest K/V live on the host tier, and exact mode still gives plain
// greedy decoding's tokens. Partial rounds read the host-tier blocks of their views
// from pool copies made after each refresh, so they stream no K/V: the ring bytes they
// caused are measured (0), the full rounds' are not.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "actors/pipeline_builder.h"
#include "core/error.h"
#include "tests/support/engine.h"
#include "tests/support/forwarding_model.h"
#include "tests/support/golden.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

/// Budgets of a few blocks: most rounds are partial, some provisional tokens wrong.
constexpr const char* kTiny = R"({"sink": 16, "retrieval": 32, "window": 16, "buffer": 64, "refresh_interval": 3})";

/// The demo pair, a target pool of `pool_tokens` and an 8 MiB host tier, SpecPV.
PipelineConfig offload_specpv(int32_t pool_tokens, const std::string& specpv = kTiny) {
  PipelineConfig c = test::demo_engine_config(4);
  c.kv.tokens = pool_tokens;
  c.offload.enable = true;
  c.offload.host_bytes = int64_t{8} << 20;
  c.offload.ring_slots = 3;
  c.scheduler.prefill_chunk = 64;  // chunks the small pool can take
  c.plugins.push_back({"specpv", test::plugin_library(SPECPV_PLUGIN_PATH), specpv});
  c.slots.verify_view = "specpv";
  return c;
}

std::vector<int32_t> first(const std::vector<int32_t>& v, size_t n) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)};
}

/// Public golden cases 0, 3 and 7 (217, 173 and 172 prompt tokens) x `tokens`: the
/// target's greedy tokens; returns the view counters summed.
ViewStats expect_golden(actors::Engine& engine, int32_t tokens) {
  ViewStats sum;
  const auto& cases = test::golden_public()["cases"];
  for (size_t index : {0u, 3u, 7u}) {
    const auto& c = cases[index];
    const actors::Completion got = engine.generate(test::greedy_request(test::ids(c["prompt_ids"]), tokens));
    EXPECT_EQ(got.reason, FinishReason::length) << got.error;
    EXPECT_EQ(got.tokens, first(test::ids(c["target_greedy_96"]), static_cast<size_t>(tokens))) << "case " << index;
    sum.merge(got.stats.view);
  }
  // Both tiers empty afterwards: the view copies went with their sequences.
  const KvOccupancy kv = engine.kv_occupancy();
  EXPECT_EQ(kv.free_blocks, kv.total_blocks);
  EXPECT_EQ(kv.host_free_blocks, kv.host_total_blocks);
  EXPECT_EQ(kv.sequences, 0u);
  return sum;
}

TEST(SpecpvHostTier, ExactEqualsPlainAndPartialRoundsStreamNothing) {
  actors::Engine engine(offload_specpv(192));
  const ViewStats v = expect_golden(engine, 64);
  EXPECT_GT(v.exact_rounds, 0);
  EXPECT_GT(v.rollbacks, 0) << "budgets this small should make some provisional token wrong";
  EXPECT_GT(v.refreshes, 0);
  // Host-tier blocks really were in the views, read from pool copies...
  EXPECT_GT(v.view_host_blocks, 0);
  EXPECT_GT(v.view_copy_bytes, 0);
  EXPECT_EQ(v.view_copy_refusals, 0);
  EXPECT_EQ(v.host_fallbacks, 0);
  // ... and partial rounds streamed nothing, while full rounds streamed the host part.
  EXPECT_EQ(v.partial_host_bytes, 0);
  EXPECT_GT(v.full_host_bytes, 0);
  const nlohmann::json m = engine.strategy_metrics();
  ASSERT_TRUE(m.contains("offload")) << m.dump();
  EXPECT_GT(m["offload"]["bytes_to_host"].get<int64_t>(), 0) << m.dump();
  EXPECT_EQ(m["offload"]["view_bytes_to_pool"].get<int64_t>(), v.view_copy_bytes) << m.dump();
  // Every byte the ring loaded in rounds is a full round's (prefill streams the rest).
  EXPECT_GE(m["offload"]["ring_bytes_loaded"].get<int64_t>(), v.full_host_bytes) << m.dump();
  EXPECT_FALSE(m["verify_view"]["host"]["disabled"].get<bool>()) << m.dump();
}

// A pool that cannot hold the copies beside the sequence (8 blocks; a view of 4 sink +
// 2 retrieved blocks + the recent region): copies are refused (those partial rounds read
// the whole prefix) or given back when a reserve needs their blocks (the views leave the
// host blocks out until the next refresh); counted, and the output stays exact.
TEST(SpecpvHostTier, NoRoomForCopiesFallsBackCountedAndExact) {
  actors::Engine engine(
      offload_specpv(128, R"({"sink": 64, "retrieval": 32, "window": 16, "buffer": 64, "refresh_interval": 3})"));
  const ViewStats v = expect_golden(engine, 32);
  EXPECT_GT(v.partial_rounds(), 0);
  EXPECT_GT(v.host_fallbacks + v.view_dropped_blocks, 0);
  // A fallback streams, and is counted as a partial round's bytes.
  EXPECT_EQ(v.partial_host_bytes > 0, v.host_fallbacks > 0);
}

/// The target behind a model whose block summaries fail (a device's once did, when the
/// round's queued moves to the host tier reached them: issue 17). Counts the forwards
/// and the token ids they got.
class FailingSummaries final : public test::ForwardingModel {
 public:
  using ForwardingModel::ForwardingModel;
  KeySummariser key_summariser() override {
    return [this](std::span<const int32_t>, float*, float*) {
      ++summaries;
      fail(ErrorCode::internal, "test: block summaries failed");
    };
  }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink, Logits& out) override {
    for (const ForwardWindow& w : windows)
      for (int32_t t : w.tokens) negative_tokens += t < 0 ? 1 : 0;
    inner_->forward(windows, kv, sink, out);
  }
  int summaries = 0;
  int negative_tokens = 0;
};

// An error while a round prepares a sequence's view (here the block summaries of its
// retrieval) fails that request with the error, and the engine serves on; the request
// never goes on without a verdict (its next token -1 fed to both models' next forwards,
// as on an H200 before the fix).
TEST(SpecpvHostTier, ViewPreparationErrorFailsTheRequest) {
  const PipelineConfig c = offload_specpv(4096);  // everything in the pool: summaries asked for
  actors::PipelineParts parts = actors::load_pipeline(c);
  auto target = std::make_shared<FailingSummaries>(parts.target);
  parts.target = target;
  actors::Engine engine(std::move(parts), c.scheduler.actor_threads);
  const auto& golden = test::golden_public()["cases"][0];
  const actors::Completion got = engine.generate(test::greedy_request(test::ids(golden["prompt_ids"]), 32));
  EXPECT_EQ(got.reason, FinishReason::error);
  EXPECT_NE(got.error.find("test: block summaries failed"), std::string::npos) << got.error;
  EXPECT_GT(target->summaries, 0);
  EXPECT_EQ(target->negative_tokens, 0);
  const KvOccupancy kv = engine.kv_occupancy();
  EXPECT_EQ(kv.sequences, 0u);
  EXPECT_EQ(kv.free_blocks, kv.total_blocks);
}

}  // namespace
}  // namespace specpipe
