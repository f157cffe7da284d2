// Sampled verdicts asked of the target (ForwardModel::computes_sampled_verdicts, the
// CUDA model's rejection_sample over its logits rows): the verifier sends each sampled
// window's drafts, draft distributions and the next drafts + 1 uniforms of its Rng, takes
// the verdict back and moves the Rng on by what the verdict used. A target that answers
// with accept_sampling's own arithmetic must then give the tokens of an engine that
// judges on the host, bit for bit, request by request. On a device
// (SPECPIPE_TEST_DEVICE) the engine it is compared with judges with rejection_sample:
// the same tokens then say the device's verdicts are the host's on these rounds.
// Drafts left on the target's device (the model drafter's sampled chain where both models
// share one, keep_sampled_drafts_on_device) are also checked on the CPU, on a pretend
// device: their verdicts are asked of the target, which must read their ids where the
// forward placed them (SampledVerdictRequest::drafts_placed; the host holds placeholders).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/pipeline_builder.h"
#include "kernels/cpu/sampling.h"
#include "model/device_rows_to_host.h"
#include "pipeline/acceptance.h"
#include "pipeline/drafter.h"
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

/// The drafts a verdict judges: the request's own, or where they were placed on the
/// device (drafts_placed: the host holds placeholders) the window's last drafts.size()
/// tokens as the forward read them.
std::vector<int32_t> judged_drafts(const SampledVerdictRequest& r, std::span<const int32_t> window_tokens) {
  if (!r.drafts_placed) return {r.drafts.begin(), r.drafts.end()};
  return {window_tokens.end() - static_cast<std::ptrdiff_t>(r.drafts.size()), window_tokens.end()};
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
        out.set_verdict(w, judge(*r, judged_drafts(*r, tokens), out, w, *inner_));
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

constexpr Device kPretendDevice{DeviceKind::cuda, 0};

/// The pipeline's drafter with its sampled drafts' ids and q rows moved to a pretend
/// device (kept here), as the model drafter hands them out where both models share a
/// device (keep_sampled_drafts_on_device): placeholders in the proposal's tokens.
class PretendDeviceDrafter final : public Drafter {
 public:
  explicit PretendDeviceDrafter(std::shared_ptr<Drafter> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  void start(RequestId request, std::span<const int32_t> context) override { inner_->start(request, context); }
  void propose(std::span<const DraftItem> items, std::vector<Proposal>& out) override {
    inner_->propose(items, out);
    for (Proposal& p : out) {
      if (p.q.empty()) continue;  // greedy, or no drafts
      std::vector<int32_t>& ids = ids_.emplace_back(p.tokens);
      std::vector<float>& q = q_.emplace_back();
      for (const std::vector<float>& row : p.q) q.insert(q.end(), row.begin(), row.end());
      p.on_device = {ids.data(), 1, kPretendDevice, Event{}};
      p.q_on_device = {q.data(), static_cast<int64_t>(p.q.front().size()), kPretendDevice, Event{}};
      std::fill(p.tokens.begin(), p.tokens.end(), 0);
      p.q.clear();
      ++moved;
    }
    while (ids_.size() > 8) {  // a few rounds back is enough
      ids_.pop_front();
      q_.pop_front();
    }
  }
  void finish(RequestId request) override { inner_->finish(request); }
  std::optional<KvOccupancy> kv_occupancy() const override { return inner_->kv_occupancy(); }
  Event after_propose() override { return inner_->after_propose(); }
  double take_prefill_ms() override { return inner_->take_prefill_ms(); }
  std::atomic<int> moved{0};

 private:
  std::shared_ptr<Drafter> inner_;
  std::deque<std::vector<int32_t>> ids_;
  std::deque<std::vector<float>> q_;
};

/// The pipeline's target on the pretend device, judging sampled verdicts as a device
/// model does: placed drafts read where they are, the verdict's ids from the window's
/// tokens as the forward read them (SampledVerdictRequest::drafts_placed), q rows from
/// the pretend device memory.
class PretendDeviceTarget final : public test::ForwardingModel {
 public:
  using ForwardingModel::ForwardingModel;
  Device device() const override { return kPretendDevice; }
  bool computes_sampled_verdicts() const override { return true; }
  void place_next_tokens(std::span<const PlacedToken> placed, std::span<const Event> /*ready*/) override {
    placed_.assign(placed.begin(), placed.end());
  }
  std::span<const int32_t> placed_tokens() const override { return values_; }
  void read_device_rows(const DeviceRows& rows, int32_t count, int32_t cols, float* out) const override {
    for (int32_t i = 0; i < count; ++i)
      std::copy(rows.data + i * rows.stride, rows.data + i * rows.stride + cols, out + int64_t{i} * cols);
  }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink, Logits& out) override {
    std::vector<std::vector<int32_t>> tokens(windows.size());
    for (size_t w = 0; w < windows.size(); ++w) tokens[w].assign(windows[w].tokens.begin(), windows[w].tokens.end());
    values_.clear();
    for (const PlacedToken& p : std::exchange(placed_, {})) {
      tokens.at(static_cast<size_t>(p.window)).at(static_cast<size_t>(p.offset)) = *p.at;
      values_.push_back(*p.at);
    }
    std::vector<ForwardWindow> own(windows.begin(), windows.end());
    for (size_t w = 0; w < own.size(); ++w) {
      own[w].tokens = tokens[w];
      own[w].verdict = nullptr;
    }
    inner_->forward(own, kv, sink, out);
    for (size_t w = 0; w < windows.size(); ++w)
      if (const SampledVerdictRequest* r = windows[w].verdict) {
        out.set_verdict(w, judge(*r, judged_drafts(*r, tokens[w]), out, w, *this));
        if (r->drafts_placed) ++placed_verdicts;
      }
  }
  std::atomic<int> placed_verdicts{0};

 private:
  std::vector<PlacedToken> placed_;
  std::vector<int32_t> values_;
};

TEST(SampledVerdicts, DraftsLeftOnTheTargetsDeviceAreJudgedThereWithTheirPlacedIds) {
  // On the CPU, a pretend device: the sampled drafts' ids and q rows reach the verifier
  // on the target's device (RoundItem::device_drafts, q_device); it asks the target's
  // verdict with drafts_placed, places the ids into the window, and the verdict must read
  // them there (the host's copies are placeholders). The same tokens as judging on the
  // host, request by request. (On a real device the first test covers this path.)
  const char* real = std::getenv("SPECPIPE_TEST_DEVICE");
  if (real && *real && std::string_view(real) != "cpu") GTEST_SKIP() << "a pretend device on the CPU only";
  const auto prompt = test::ids(test::golden_public()["cases"][11]["prompt_ids"]);
  PipelineConfig config = test::demo_engine_config(4);
  config.kv.tokens = 2048;
  actors::Engine host(config);
  actors::PipelineParts parts = actors::load_pipeline(config);
  auto drafter = std::make_shared<PretendDeviceDrafter>(parts.drafter);
  auto target = std::make_shared<PretendDeviceTarget>(parts.target);
  parts.drafter = drafter;
  parts.target = target;
  actors::Engine device(std::move(parts), 1);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    actors::RequestSpec r = test::greedy_request(prompt, 24, 4);
    r.params.sampling = {0.8f, 0, 1.0f};
    r.params.seed = seed;
    const actors::Completion want = host.generate(r);
    const actors::Completion got = device.generate(r);
    ASSERT_EQ(want.tokens.size(), 24u) << want.error;
    EXPECT_EQ(got.tokens, want.tokens) << "seed " << seed << " " << got.error;
  }
  EXPECT_GT(drafter->moved.load(), 0);
  EXPECT_EQ(target->placed_verdicts.load(), drafter->moved.load())
      << "a round's device drafts were not judged on the target";
}

}  // namespace
}  // namespace specpipe
