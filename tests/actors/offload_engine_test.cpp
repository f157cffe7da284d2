// Offload through the whole pipeline (issue 16 item 6): with a target pool too small for
// the requests, the KV-router moves the oldest blocks of the longest sequences to the
// host tier and every forward streams them back through the layer ring. The outputs
// (and, for the draft model, every round's acceptance) equal the golden data for plain
// decoding and each speculative strategy; both tiers are empty afterwards; the error
// cases are one clear error each and the engine keeps serving.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "pipeline/pipeline_config.h"
#include "tests/support/engine.h"
#include "tests/support/forwarding_model.h"
#include "tests/support/golden.h"
#include "tests/actors/offload_support.h"

namespace specpipe {
namespace {

using test::offload_config;
using test::Strategy;
using test::expect_drained_after_offload;

bool on_gpu() {
  const char* device = std::getenv("SPECPIPE_TEST_DEVICE");
  return device && std::string(device).rfind("cuda", 0) == 0;
}


class OffloadGolden : public ::testing::TestWithParam<Strategy> {};

TEST_P(OffloadGolden, PublicCasesThroughATinyPoolEqualTheGoldenOutput) {
  const Strategy s = GetParam();
  actors::Engine engine(offload_config(s));
  int index = 0;
  for (const auto& c : test::golden_public()["cases"]) {
    const actors::Completion got = engine.generate(test::greedy_request(test::ids(c["prompt_ids"]), 96));
    ASSERT_EQ(got.reason, FinishReason::length) << got.error;
    EXPECT_EQ(got.tokens, test::expected_greedy(c)) << "case " << index;
    // The draft model's rounds are the reference's: where the K/V lives changes no bit.
    // On a GPU (tools/gpu/engine_check.sh) the reference's rounds are the CPU's, which a
    // BF16 near-tie of the draft may move (speculative_golden_test): tokens only there;
    // offload == all-on-GPU bit for bit is tools/gpu/offload_check.cpp's.
    if (s.drafter == DrafterKind::model && !s.scv && !on_gpu()) {
      EXPECT_EQ(got.stats.accepted_per_round, c["spec"]["4"]["accepted_per_round"].get<std::vector<int32_t>>())
          << "case " << index;
    }
    ++index;
  }
  expect_drained_after_offload(engine);
}

INSTANTIATE_TEST_SUITE_P(Strategies, OffloadGolden,
                         ::testing::Values(Strategy{"plain", DrafterKind::none, false, false},
                                           Strategy{"draft_model", DrafterKind::model, false, false},
                                           Strategy{"ngram", DrafterKind::ngram, false, false},
                                           Strategy{"nwor", DrafterKind::model, true, false},
                                           Strategy{"scv", DrafterKind::model, false, true},
                                           Strategy{"nwor_scv", DrafterKind::model, true, true}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// Eight requests at once through a 384-token pool: one admission batch prefills them
// chunk by chunk (an item waits a pass while the pool cannot serve it yet), rounds batch
// sequences with host blocks beside ones without, and the policy picks among them.
TEST(OffloadConcurrent, BatchedRequestsEqualTheGoldenOutput) {
  PipelineConfig config = offload_config({"draft_model", DrafterKind::model, false, false});
  config.kv.tokens = 384;
  config.offload.host_bytes = int64_t{32} << 20;
  config.scheduler.max_batch = 8;
  config.scheduler.prefill_chunk = 64;
  actors::Engine engine(config);
  test::Completions done;
  const auto& cases = test::golden_public()["cases"];
  for (size_t i = 0; i < cases.size(); ++i) {
    actors::RequestSpec spec = test::greedy_request(test::ids(cases[i]["prompt_ids"]), 96);
    engine.submit(std::move(spec), done.sink());
  }
  const auto got = done.wait(cases.size());
  size_t i = 0;
  for (const auto& [id, completion] : got) {
    ASSERT_EQ(completion.reason, FinishReason::length) << completion.error;
    EXPECT_EQ(completion.tokens, test::expected_greedy(cases[i])) << "case " << i;
    ++i;
  }
  expect_drained_after_offload(engine);
}

// offload.overlap false: the moves copy in line inside the offload actor (the seed's
// synchronous way, no copy thread), the ring's loads too; the outputs are the same.
TEST(OffloadSynchronous, PublicCasesEqualTheGoldenOutputWithoutOverlap) {
  PipelineConfig config = offload_config({"ngram", DrafterKind::ngram, false, false});
  config.offload.overlap = false;
  actors::Engine engine(config);
  const auto& cases = test::golden_public()["cases"];
  for (size_t i : {0u, 5u, 10u}) {
    const actors::Completion got = engine.generate(test::greedy_request(test::ids(cases[i]["prompt_ids"]), 96));
    ASSERT_EQ(got.reason, FinishReason::length) << got.error;
    EXPECT_EQ(got.tokens, test::expected_greedy(cases[i])) << "case " << i;
  }
  expect_drained_after_offload(engine);
  EXPECT_FALSE(engine.strategy_metrics()["offload"]["actor"]["async_copies"].get<bool>());
}

// Requests cancelled while the offload actor moves blocks under load (six requests through
// a 256-token pool, two cancelled as soon as they are submitted, one after its first
// tokens): the others still give the golden tokens, the cancelled ones a prefix of theirs,
// and both tiers drain (no block lost to a move whose sequence went away).
TEST(OffloadConcurrent, CancelledRequestsLeaveTheOthersExactAndTheTiersDrained) {
  PipelineConfig config = offload_config({"ngram", DrafterKind::ngram, false, false});
  config.scheduler.max_batch = 6;
  config.scheduler.prefill_chunk = 64;
  actors::Engine engine(config);
  const auto& cases = test::golden_public()["cases"];
  test::Completions done;
  std::vector<RequestId> ids;
  for (size_t i = 0; i < 6; ++i) {
    ids.push_back(engine.submit(test::greedy_request(test::ids(cases[i]["prompt_ids"]), 96), done.sink()));
    if (i == 1 || i == 4) engine.cancel(ids.back());
  }
  for (int spin = 0; spin < 5000; ++spin) {  // until the offload is under way (at most ~5 s)
    const KvOccupancy kv = engine.kv_occupancy();
    if (kv.host_free_blocks < kv.host_total_blocks) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  engine.cancel(ids[2]);
  const auto got = done.wait(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const actors::Completion& c = got.at(ids[i]);
    const std::vector<int32_t> want = test::expected_greedy(cases[i]);
    if (i == 1 || i == 2 || i == 4) {
      ASSERT_TRUE(c.reason == FinishReason::cancelled || c.reason == FinishReason::length) << c.error;
      ASSERT_LE(c.tokens.size(), want.size());
      EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), want.begin())) << "case " << i;
    } else {
      ASSERT_EQ(c.reason, FinishReason::length) << c.error;
      EXPECT_EQ(c.tokens, want) << "case " << i;
    }
  }
  expect_drained_after_offload(engine);
}

// Sampling (lossless rejection sampling with the draft model): the logits are the same
// bits with offload, so a seeded request samples the same tokens as without it.
TEST(OffloadSampling, SeededRequestsSampleTheSameTokensAsWithoutOffload) {
  PipelineConfig with = offload_config({"draft_model", DrafterKind::model, false, false});
  PipelineConfig without = test::demo_engine_config(4);
  without.drafter.max_gamma = 8;
  actors::Engine offloaded(with), reference(without);
  const auto& cases = test::golden_public()["cases"];
  for (size_t i : {0u, 3u, 10u}) {
    actors::RequestSpec spec = test::greedy_request(test::ids(cases[i]["prompt_ids"]), 96);
    spec.params.sampling.temperature = 0.8f;
    spec.params.sampling.top_p = 0.95f;
    spec.params.seed = 1234 + i;
    const actors::Completion got = offloaded.generate(spec);
    const actors::Completion want = reference.generate(spec);
    ASSERT_EQ(got.reason, FinishReason::length) << got.error;
    EXPECT_EQ(got.tokens, want.tokens) << "case " << i;
    EXPECT_EQ(got.stats.accepted_per_round, want.stats.accepted_per_round) << "case " << i;
  }
  expect_drained_after_offload(offloaded);
}

Error engine_error(const PipelineConfig& config) {
  try {
    actors::Engine engine(config);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::internal, "none");
}

TEST(OffloadErrors, HostBytesTooSmallIsRefusedAtLoad) {
  PipelineConfig config = offload_config({"plain", DrafterKind::none, false, false});
  config.offload.host_bytes = 1000;
  const Error e = engine_error(config);
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("host_bytes: 1000 bytes hold no KV block"), std::string::npos) << e.what();
}

TEST(OffloadErrors, RingSlotsBelowTwoAreAConfigError) {
  try {
    parse_pipeline_config("offload: {enable: true, ring_slots: 1}", "x.yaml");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("offload.ring_slots: 1 is out of range [2, 64]"), std::string::npos)
        << e.what();
  }
}

TEST(OffloadErrors, PrefillIsLayerwiseOrChunked) {
  EXPECT_EQ(parse_pipeline_config("offload: {enable: true}", "x.yaml").offload.prefill, "layerwise");
  EXPECT_EQ(parse_pipeline_config("offload: {enable: true, prefill: chunked}", "x.yaml").offload.prefill, "chunked");
  try {
    parse_pipeline_config("offload: {enable: true, prefill: rows}", "x.yaml");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("offload.prefill"), std::string::npos) << e.what();
  }
}

// A CUDA device streams host-tier K/V too: offload is no reason to refuse it. Where the
// device cannot run (no CUDA build, no GPU), the error is the device's own.
TEST(OffloadErrors, ADeviceIsNotRefusedForOffload) {
  if (on_gpu()) GTEST_SKIP() << "on a GPU every test of this suite runs there with offload";
  PipelineConfig config = offload_config({"plain", DrafterKind::none, false, false});
  config.device = "cuda:0";
  try {
    actors::Engine engine(config);  // a GPU: it serves
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("offload"), std::string::npos) << e.what();
  }
}

/// The first `n` tokens of the first long golden prompt from `from` on, and what an
/// engine whose pool holds everything gives for such prompts (plain decoding).
std::vector<int32_t> long_prompt(size_t n, size_t from = 0) {
  const auto ids = test::ids(test::golden_long()["cases"][0]["prompt_ids"]);
  return {ids.begin() + static_cast<std::ptrdiff_t>(from), ids.begin() + static_cast<std::ptrdiff_t>(from + n)};
}
PipelineConfig all_in_pool_config() {
  PipelineConfig c = test::demo_engine_config(4);
  c.drafter.type = DrafterKind::none;
  return c;
}

// A context beyond pool + host tier gets one out_of_capacity error naming both; the
// next requests are served as if nothing happened, a prompt longer than the pool too
// (prefilled chunk by chunk, its oldest blocks moving to the host in between), with the
// tokens of an engine whose pool holds everything.
TEST(OffloadErrors, AContextBeyondEveryTierIsOneErrorAndTheEngineKeepsServing) {
  PipelineConfig config = offload_config({"draft_model", DrafterKind::model, false, false});
  config.offload.prefill = "chunked";  // OffloadLayerwisePrefill runs this prompt layer by layer
  actors::Engine engine(config);
  const auto& c = test::golden_public()["cases"][0];
  const actors::Completion beyond = engine.generate(test::greedy_request(test::ids(c["prompt_ids"]), 200000));
  EXPECT_EQ(beyond.reason, FinishReason::error);
  EXPECT_EQ(beyond.error_code, "out_of_capacity") << beyond.error;
  EXPECT_NE(beyond.error.find("on the host tier"), std::string::npos) << beyond.error;
  const std::vector<int32_t> prompt = long_prompt(700);  // the pool holds 256
  const actors::Completion longer = engine.generate(test::greedy_request(prompt, 24));
  ASSERT_EQ(longer.reason, FinishReason::length) << longer.error;
  PipelineConfig all_in_pool = test::demo_engine_config(4);
  all_in_pool.drafter.max_gamma = 8;
  actors::Engine reference(all_in_pool);
  const actors::Completion want = reference.generate(test::greedy_request(prompt, 24));
  EXPECT_EQ(longer.tokens, want.tokens);
  EXPECT_EQ(longer.stats.accepted_per_round, want.stats.accepted_per_round);
  const actors::Completion fine = engine.generate(test::greedy_request(test::ids(c["prompt_ids"]), 96));
  EXPECT_EQ(fine.tokens, test::expected_greedy(c));
  expect_drained_after_offload(engine);
}

// Offload's layer-wise prefill (offload.prefill: layerwise, the default): a 300-token
// prompt through a 256-token pool books its first blocks on the host tier and runs the
// whole prompt one layer at a time (counted), for plain decoding and the draft model,
// and with offload.overlap off (its copies in line); the tokens equal an engine whose
// pool holds everything. On a GPU this is CudaTransformer::prefill_layerwise, its
// buffers released after each prefill.
TEST(OffloadLayerwisePrefill, ALongPromptRunsLayerByLayerWithTheTokensOfAnAllInPoolEngine) {
  const std::vector<int32_t> prompt = long_prompt(300);
  const actors::Completion want = actors::Engine(all_in_pool_config()).generate(test::greedy_request(prompt, 12));
  ASSERT_EQ(want.reason, FinishReason::length) << want.error;
  for (const auto& [s, overlap] : {std::pair{Strategy{"plain", DrafterKind::none, false, false}, true},
                                   std::pair{Strategy{"draft_model", DrafterKind::model, false, false}, true},
                                   std::pair{Strategy{"plain", DrafterKind::none, false, false}, false}}) {
    PipelineConfig config = offload_config(s);
    config.offload.overlap = overlap;
    actors::Engine engine(config);
    const actors::Completion got = engine.generate(test::greedy_request(prompt, 12));
    ASSERT_EQ(got.reason, FinishReason::length) << got.error;
    EXPECT_EQ(got.tokens, want.tokens) << s.name << ", overlap " << overlap;
    const nlohmann::json m = engine.strategy_metrics();
    EXPECT_EQ(m["offload"]["layerwise_prefills"].get<int64_t>(), 1) << m.dump();
    EXPECT_EQ(m["offload"]["layerwise_fallbacks"].get<int64_t>(), 0) << m.dump();
    EXPECT_EQ(m["offload"]["layerwise_host_blocks"].get<int64_t>(), 3) << m.dump();  // 48 of 300 tokens
    const KvOccupancy kv = engine.kv_occupancy();
    EXPECT_EQ(kv.free_blocks, kv.total_blocks);
    EXPECT_EQ(kv.host_free_blocks, kv.host_total_blocks);
  }
}

/// The pipeline's target refusing every layer-wise prefill as a device model does when
/// the prompt's layer slots do not fit (out_of_capacity, nothing written); everything
/// else is the real model's.
class RefusingLayerwise final : public test::ForwardingModel {
 public:
  using ForwardingModel::ForwardingModel;
  void prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& /*kv*/, Logits& /*out*/) override {
    ++refusals;
    fail(ErrorCode::out_of_capacity, "layer-wise prefill: the {} slots of sequence {} do not fit (test)",
         prompt.size(), seq);
  }
  std::atomic<int> refusals{0};
};

// The engine's fallback: the target refuses the layer-wise prefill the kv-router booked
// for a 300-token prompt through a 256-token pool; the booking goes back (host blocks
// too) and the prompt is prefilled chunk by chunk, its oldest blocks moving to the host
// as it goes. The tokens equal an all-in-pool engine's; counted as a fallback, not a
// layer-wise prefill; both tiers drain.
TEST(OffloadLayerwisePrefill, ARefusalFallsBackToChunksWithTheTokensOfAnAllInPoolEngine) {
  const std::vector<int32_t> prompt = long_prompt(300);
  const actors::Completion want = actors::Engine(all_in_pool_config()).generate(test::greedy_request(prompt, 12));
  ASSERT_EQ(want.reason, FinishReason::length) << want.error;
  actors::PipelineParts parts = actors::load_pipeline(offload_config({"plain", DrafterKind::none, false, false}));
  auto refusing = std::make_shared<RefusingLayerwise>(parts.target);
  parts.target = refusing;
  actors::Engine engine(std::move(parts), 1);
  const actors::Completion got = engine.generate(test::greedy_request(prompt, 12));
  ASSERT_EQ(got.reason, FinishReason::length) << got.error;
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(refusing->refusals.load(), 1);
  const nlohmann::json m = engine.strategy_metrics();
  EXPECT_EQ(m["offload"]["layerwise_prefills"].get<int64_t>(), 0) << m.dump();
  EXPECT_EQ(m["offload"]["layerwise_fallbacks"].get<int64_t>(), 1) << m.dump();
  EXPECT_EQ(m["offload"]["layerwise_host_blocks"].get<int64_t>(), 3) << m.dump();  // booked, given back
  expect_drained_after_offload(engine);  // the chunks' moves were the offload actor's
}

// A long prompt meeting a pool full of another sequence (issue 16 item 5): A, 300 tokens
// through the 256-token pool, is prefilled layer by layer and decodes plainly, its pool
// part always filling the pool; B, another 300 tokens submitted once A decodes, finds no
// free block, so the kv-router asks the offload actor for room for B's last block (A's
// oldest pool block moves to the host) and books B's first 18 blocks on the host: both
// prefilled layer by layer, with the tokens of an all-in-pool engine. A context beyond
// both tiers before them is one out_of_capacity error, nothing held after it.
TEST(OffloadLayerwisePrefill, AFullPoolAsksTheOffloadActorForRoomInsteadOfGoingChunkByChunk) {
  const std::vector<int32_t> a = long_prompt(300), b = long_prompt(300, 300);
  actors::Engine reference(all_in_pool_config());
  const actors::Completion want_a = reference.generate(test::greedy_request(a, 24));
  const actors::Completion want_b = reference.generate(test::greedy_request(b, 12));

  actors::Engine engine(offload_config({"plain", DrafterKind::none, false, false}));
  const actors::Completion beyond = engine.generate(test::greedy_request(a, 200000));
  EXPECT_EQ(beyond.error_code, "out_of_capacity") << beyond.error;
  EXPECT_NE(beyond.error.find("on the host tier"), std::string::npos) << beyond.error;
  const KvOccupancy idle = engine.kv_occupancy();
  EXPECT_EQ(idle.free_blocks, idle.total_blocks);
  EXPECT_EQ(idle.host_free_blocks, idle.host_total_blocks);

  test::Completions done;
  std::promise<void> decoding;
  bool first = true;
  auto a_sink = std::make_shared<actors::CallbackSink>(
      [&](const actors::TokenDelta&) {
        if (std::exchange(first, false)) decoding.set_value();
      },
      [sink = done.sink()](const actors::Completion& c) { sink->on_complete(c); });
  const RequestId id_a = engine.submit(test::greedy_request(a, 24), a_sink);
  decoding.get_future().wait();
  const RequestId id_b = engine.submit(test::greedy_request(b, 12), done.sink());
  const auto got = done.wait(2);
  ASSERT_EQ(got.at(id_a).reason, FinishReason::length) << got.at(id_a).error;
  ASSERT_EQ(got.at(id_b).reason, FinishReason::length) << got.at(id_b).error;
  EXPECT_EQ(got.at(id_a).tokens, want_a.tokens);
  EXPECT_EQ(got.at(id_b).tokens, want_b.tokens);
  const nlohmann::json m = engine.strategy_metrics();
  EXPECT_EQ(m["offload"]["layerwise_prefills"].get<int64_t>(), 2) << m.dump();
  EXPECT_EQ(m["offload"]["layerwise_fallbacks"].get<int64_t>(), 0) << m.dump();
  EXPECT_EQ(m["offload"]["layerwise_room_requests"].get<int64_t>(), 1) << m.dump();
  EXPECT_EQ(m["offload"]["layerwise_host_blocks"].get<int64_t>(), 3 + 18) << m.dump();
  expect_drained_after_offload(engine);
}

}  // namespace
}  // namespace specpipe
