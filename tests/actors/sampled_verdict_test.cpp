// Sampled verdicts asked of the target (ForwardModel::computes_sampled_verdicts, the
// CUDA model's rejection_sample over its logits rows): the verifier sends each sampled
// window's drafts, draft distributions and the next drafts + 1 uniforms of its Rng, takes
// the verdict back and moves the Rng on by what the verdict used. A target that answers
// with accept_sampling's own arithmetic must then give the tokens of an engine that
// judges on the host, bit for bit, request by request. On a device
// (SPECPIPE_TEST_DEVICE) the engine it is compared with judges with rejection_sample:
// the same tokens then say the device's verdicts are the host's on these rounds.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/pipeline_builder.h"
#include "kernels/cpu/sampling.h"
#include "model/device_rows_to_host.h"
#include "pipeline/acceptance.h"
#include "tests/support/engine.h"
#include "tests/support/forwarding_model.h"
#include "tests/support/golden.h"

namespace specpipe {
namespace {

/// The host's verdict (accept_sampling_from) on the target's rows from the uniforms the
/// verifier sent, as a device model answers it. q rows the draft model left on the
/// device (SampledVerdictRequest::q_device) are read back from there; drafts placed on
/// the device (drafts_placed) come in `drafts`, read from the forward's input ids.
SampledVerdict judge(const SampledVerdictRequest& r, std::span<const int32_t> drafts, const Logits& out, size_t w,
                     const ForwardModel& model) {
  const auto V = static_cast<size_t>(out.vocab());
  std::vector<std::vector<float>> q(drafts.size());  // empty rows: point masses
  if (r.q)
    for (size_t i = 0; i < q.size(); ++i) q[i].assign(r.q + i * V, r.q + (i + 1) * V);
  if (r.q_device.data) device_rows_to_host(model, r.q_device, q.size(), static_cast<int32_t>(V), q);
  size_t next = 0;
  const Verdict v = accept_sampling_from(
      drafts, [&](int32_t i) { return out.row(w, r.first_row + i); }, q, cpu::SamplingParams{r.temperature, 0, 1.0f},
      [&] { return r.u[next++]; });
  return {v.accepted, v.next_token};
}

/// The pipeline's target answering sampled verdicts itself, as a device model does.
class JudgingTarget final : public test::ForwardingModel {
 public:
  using ForwardingModel::ForwardingModel;
  bool computes_sampled_verdicts() const override { return true; }
  void place_next_tokens(std::span<const PlacedToken> placed, std::span<const Event> ready) override {
    placed_.assign(placed.begin(), placed.end());
    inner_->place_next_tokens(placed, ready);
  }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink, Logits& out) override {
    // The rows of the windows asked to judge come back (a device model would judge them
    // itself: under SPECPIPE_TEST_DEVICE the test compares its verdicts with these).
    std::vector<ForwardWindow> plain(windows.begin(), windows.end());
    for (ForwardWindow& w : plain) w.verdict = nullptr;
    const std::vector<PlacedToken> placed = std::exchange(placed_, {});
    inner_->forward(plain, kv, sink, out);
    // The window's tokens as the forward read them: placed ones from its results (their
    // placeholders are 0, which a wrong read of the drafts would judge).
    const std::span<const int32_t> values = inner_->placed_tokens();
    ASSERT_EQ(values.size(), placed.size());
    for (size_t w = 0; w < windows.size(); ++w)
      if (const SampledVerdictRequest* r = windows[w].verdict) {
        std::vector<int32_t> tokens(windows[w].tokens.begin(), windows[w].tokens.end());
        for (size_t k = 0; k < placed.size(); ++k)
          if (static_cast<size_t>(placed[k].window) == w) tokens[static_cast<size_t>(placed[k].offset)] = values[k];
        std::vector<int32_t> drafts(r->drafts.begin(), r->drafts.end());
        if (r->drafts_placed) drafts.assign(tokens.end() - static_cast<std::ptrdiff_t>(drafts.size()), tokens.end());
        out.set_verdict(w, judge(*r, drafts, out, w, *inner_));
        ++verdicts;
        if (r->q_device.data) ++device_q;
        if (r->drafts_placed) ++device_drafts;
      }
  }
  std::atomic<int> verdicts{0};
  std::atomic<int> device_q{0};       ///< verdicts whose q rows came on the device
  std::atomic<int> device_drafts{0};  ///< verdicts whose drafts came on the device

 private:
  std::vector<PlacedToken> placed_;
};

TEST(SampledVerdicts, TheTargetsVerdictsGiveTheTokensOfTheHostsAcceptance) {
  const auto prompt = test::ids(test::golden_public()["cases"][11]["prompt_ids"]);
  auto request = [&](uint64_t seed, int32_t top_k) {
    actors::RequestSpec r = test::greedy_request(prompt, 24, 4);
    r.params.sampling = {0.8f, top_k, 1.0f};
    r.params.seed = seed;
    return r;
  };
  PipelineConfig config = test::demo_engine_config(4);
  config.kv.tokens = 2048;  // one request at a time: a small store is quick to make
  actors::Engine host(config);
  actors::PipelineParts parts = actors::load_pipeline(config);
  auto target = std::make_shared<JudgingTarget>(parts.target);
  parts.target = target;
  actors::Engine judged(std::move(parts), 1);
  // The draft q rows through the host (as on a CPU, or with the models on two devices):
  // on a device the verdicts then read the same floats from the host's copy, so the same
  // tokens say the rows left on the device are the drafts' own, row for row.
  ::setenv("SPECPIPE_SAMPLED_Q_ON_DEVICE", "0", 1);
  actors::Engine host_q(config);
  ::unsetenv("SPECPIPE_SAMPLED_Q_ON_DEVICE");
  // The draft ids through the host (the chain waited for, the ids sent up with the
  // window), the q rows still on the device: the same tokens say the ids the device
  // verdicts read where the drafts were placed are the drafts' own.
  ::setenv("SPECPIPE_SAMPLED_DRAFTS_ON_DEVICE", "0", 1);
  actors::Engine host_ids(config);
  ::unsetenv("SPECPIPE_SAMPLED_DRAFTS_ON_DEVICE");
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const actors::Completion want = host.generate(request(seed, 0));
    const actors::Completion got = judged.generate(request(seed, 0));
    ASSERT_EQ(want.tokens.size(), 24u) << want.error;
    EXPECT_EQ(got.tokens, want.tokens) << "seed " << seed << " " << got.error;
    EXPECT_EQ(host_q.generate(request(seed, 0)).tokens, want.tokens) << "seed " << seed << ", q through the host";
    EXPECT_EQ(host_ids.generate(request(seed, 0)).tokens, want.tokens) << "seed " << seed << ", ids through the host";
  }
  const int asked = target->verdicts.load();
  EXPECT_GT(asked, 0) << "no verdict was asked of the target";
  // Both models on one device: the draft chain's q rows and ids stay there for the
  // verdict (ModelDrafter::keep_q_on_device, keep_sampled_drafts_on_device); on the CPU
  // they travel through the host as before. The same tokens as `host` (whose device
  // verdicts read them there too) above.
  const char* device = std::getenv("SPECPIPE_TEST_DEVICE");
  const bool on_device = device && *device && std::string_view(device) != "cpu";
  if (on_device) {
    EXPECT_GT(target->device_q.load(), 0) << "the q rows went through the host";
    EXPECT_GT(target->device_drafts.load(), 0) << "the draft ids went through the host";
  } else {
    EXPECT_EQ(target->device_q.load(), 0);
    EXPECT_EQ(target->device_drafts.load(), 0);
  }
  // top-k needs the host's sort: judged there, the target is not asked.
  const actors::Completion want = host.generate(request(9, 8));
  const actors::Completion got = judged.generate(request(9, 8));
  EXPECT_EQ(got.tokens, want.tokens) << got.error;
  EXPECT_EQ(target->verdicts.load(), asked);
  const SpecStats st = judged.stats();
  EXPECT_LT(st.accepted, st.proposed) << "no rejection: the corrections were never judged";
}

}  // namespace
}  // namespace specpipe
