// The message protocol of the actor pipeline, step by step under CAF's deterministic
// test coordinator: every message of an admission and of a round, in order, between the
// right actors; the KV-router is the only actor that commits; one speculative round of a
// golden case accepts what the reference says.
#define CAF_SUITE round_protocol
#include <caf/all.hpp>
#include <caf/test/dsl.hpp>
#include <caf/test/unit_test_impl.hpp>

#include "actors/pipeline_builder.h"
#include "actors/response_sink.h"
#include "tests/support/golden.h"
#include "tests/support/test_paths.h"

using namespace specpipe;
using namespace specpipe::actors;

namespace {

struct Recorder final : ResponseSink {
  std::vector<TokenDelta> deltas;
  std::vector<Completion> completions;
  void on_delta(const TokenDelta& d) override { deltas.push_back(d); }
  void on_complete(const Completion& c) override { completions.push_back(c); }
};

struct Fixture : test_coordinator_fixture<> {
  PipelineParts parts;
  std::shared_ptr<const Peers> peers;

  Fixture() : parts(load_pipeline(config())) { peers = spawn_pipeline(sys, parts); }

  // The actors hold each other's handles (Peers), so they live until told to exit.
  ~Fixture() override {
    self->send_exit(peers->scheduler, caf::exit_reason::user_shutdown);
    self->send_exit(peers->draft, caf::exit_reason::user_shutdown);
    self->send_exit(peers->kv_router, caf::exit_reason::user_shutdown);
    self->send_exit(peers->verifier, caf::exit_reason::user_shutdown);
    run();
  }

  static PipelineConfig config() {
    PipelineConfig c;
    c.models.target = specpipe::test::model_dir("demo-target").string();
    c.models.draft = specpipe::test::model_dir("demo-draft").string();
    c.drafter.gamma = 4;
    c.kv.tokens = 4096;
    return c;
  }
};

}  // namespace

CAF_TEST_FIXTURE_SCOPE(round_protocol_tests, Fixture)

CAF_TEST(admission and one round follow the documented message order) {
  const auto& c = specpipe::test::golden_public()["cases"][1];
  auto sink = std::make_shared<Recorder>();
  SubmitRequest r;
  r.id = 7;
  r.prompt = specpipe::test::ids(c["prompt_ids"]);
  r.params.max_tokens = 96;
  r.params.stop_at_eos = false;
  r.sink = sink;
  self->send(peers->scheduler, r);
  expect((SubmitRequest), from(self).to(peers->scheduler));
  // Admission: the draft learns the prompt; the router registers and reserves it, the
  // verifier prefills, the router commits, the scheduler is told.
  expect((DraftStart), from(peers->scheduler).to(peers->draft));
  expect((AdmitWork), from(peers->scheduler).to(peers->kv_router));
  expect((PrefillWork), from(peers->kv_router).to(peers->verifier));
  expect((PrefillDone), from(peers->verifier).to(peers->kv_router));
  expect((AdmitDone), from(peers->kv_router).to(peers->scheduler));
  // Round 1: draft -> router (reserve) -> verifier -> router (commit) -> scheduler.
  expect((DraftWork), from(peers->scheduler).to(peers->draft));
  expect((ReserveWork), from(peers->draft).to(peers->kv_router));
  expect((VerifyWork), from(peers->kv_router).to(peers->verifier));
  expect((VerifyDone), from(peers->verifier).to(peers->kv_router));
  expect((RoundDone), from(peers->kv_router).to(peers->scheduler));
  // The first round's tokens were streamed: k accepted drafts + the target's token.
  const auto want = c["spec"]["4"]["accepted_per_round"].get<std::vector<int32_t>>();
  CAF_REQUIRE_EQUAL(sink->deltas.size(), 1u);
  CAF_CHECK_EQUAL(static_cast<int32_t>(sink->deltas[0].tokens.size()), want[0] + 1);
  // The next round starts right away.
  expect((DraftWork), from(peers->scheduler).to(peers->draft));
  // Let everything else run: the request completes and releases its KV.
  run();
  CAF_REQUIRE_EQUAL(sink->completions.size(), 1u);
  CAF_CHECK_EQUAL(sink->completions[0].tokens, specpipe::test::ids(c["target_greedy_96"]));
  CAF_CHECK_EQUAL(sink->completions[0].stats.accepted_per_round, want);
  CAF_CHECK_EQUAL(parts.kv->free_blocks(), parts.kv->total_blocks());
  CAF_CHECK_EQUAL(parts.kv->num_sequences(), 0u);
}

CAF_TEST(a refused request never reaches the other actors) {
  auto sink = std::make_shared<Recorder>();
  SubmitRequest r;
  r.id = 1;  // empty prompt
  r.sink = sink;
  self->send(peers->scheduler, r);
  expect((SubmitRequest), from(self).to(peers->scheduler));
  disallow((AdmitWork), from(peers->scheduler).to(peers->kv_router));
  CAF_REQUIRE_EQUAL(sink->completions.size(), 1u);
  CAF_CHECK_EQUAL(sink->completions[0].reason, FinishReason::error);
}

CAF_TEST(cancel during a round ends the request at the round boundary) {
  const auto& c = specpipe::test::golden_public()["cases"][2];
  auto sink = std::make_shared<Recorder>();
  SubmitRequest r;
  r.id = 9;
  r.prompt = specpipe::test::ids(c["prompt_ids"]);
  r.params.max_tokens = 96;
  r.sink = sink;
  self->send(peers->scheduler, r);
  expect((SubmitRequest), from(self).to(peers->scheduler));
  expect((DraftStart), from(peers->scheduler).to(peers->draft));
  expect((AdmitWork), from(peers->scheduler).to(peers->kv_router));
  expect((PrefillWork), from(peers->kv_router).to(peers->verifier));
  expect((PrefillDone), from(peers->verifier).to(peers->kv_router));
  expect((AdmitDone), from(peers->kv_router).to(peers->scheduler));
  expect((DraftWork), from(peers->scheduler).to(peers->draft));
  self->send(peers->scheduler, CancelRequest{9});
  // The cancel arrives while the round is in flight; the round completes, then the
  // scheduler releases the KV instead of starting another round.
  expect((CancelRequest), from(self).to(peers->scheduler));
  expect((ReserveWork), from(peers->draft).to(peers->kv_router));
  expect((VerifyWork), from(peers->kv_router).to(peers->verifier));
  expect((VerifyDone), from(peers->verifier).to(peers->kv_router));
  expect((RoundDone), from(peers->kv_router).to(peers->scheduler));
  expect((ReleaseWork), from(peers->scheduler).to(peers->kv_router));
  run();
  CAF_REQUIRE_EQUAL(sink->completions.size(), 1u);
  CAF_CHECK_EQUAL(sink->completions[0].reason, FinishReason::cancelled);
  CAF_CHECK_EQUAL(parts.kv->free_blocks(), parts.kv->total_blocks());
}

CAF_TEST_FIXTURE_SCOPE_END()
