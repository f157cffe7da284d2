// Start-up warm-up (pipeline/warm_start.h, models.warm_graphs): which shapes a server
// runs before it answers, so that a device model captures their CUDA graphs at start.
// The draft chains must be the ones ModelDrafter's rounds run at each gamma (one rule,
// draft_round_chains), the target's windows those of one sequence's verify rounds, and
// the warm-up must leave both KV stores as it found them and the drafts unchanged.
#include <gtest/gtest.h>

#include <memory>
#include <tuple>
#include <vector>

#include "model/transformer.h"
#include "pipeline/model_drafter.h"
#include "pipeline/warm_start.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

/// A CPU model that records every forward and chain call (kind, window tokens, logits
/// rows, steps, early steps) and runs them with ForwardModel's step-by-step defaults.
class RecordingModel final : public ForwardModel {
 public:
  enum Kind { forward_call, chain_call, launch_call, launch_early_call, sampled_call };
  using Call = std::tuple<Kind, int32_t /*tokens*/, int32_t /*logits rows*/, int32_t /*steps*/, int32_t /*early*/>;
  explicit RecordingModel(Transformer& inner, std::vector<Call>* calls) : inner_(inner), calls_(calls) {}
  const ModelConfig& config() const override { return inner_.config(); }
  Device device() const override { return inner_.device(); }
  KvStoreConfig kv_config(int32_t blocks, int32_t block_size) const override {
    return inner_.kv_config(blocks, block_size);
  }
  int32_t max_chain_steps() const override { return 16; }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink, Logits& out) override {
    record(forward_call, windows, 1, 0);
    inner_.forward(windows, kv, sink, out);
  }
  void forward_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                            KvWriteSink& sink, std::vector<int32_t>& ids) override {
    record(chain_call, windows, steps, 0);
    chained([&] { ForwardModel::forward_greedy_chain(windows, steps, kv, sink, ids); });
  }
  void forward_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps, const ChainSampling& sampling,
                             const KvStore& kv, KvWriteSink& sink, std::vector<int32_t>& ids,
                             std::vector<float>& q) override {
    record(sampled_call, windows, steps, 0);
    chained([&] { ForwardModel::forward_sampled_chain(windows, steps, sampling, kv, sink, ids, q); });
  }
  Event launch_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                            KvWriteSink& sink) override {
    record(launch_call, windows, steps, 0);
    Event e;
    chained([&] { e = ForwardModel::launch_greedy_chain(windows, steps, kv, sink); });
    return launched(e);
  }
  Event launch_greedy_chain_early(std::span<const ForwardWindow> windows, int32_t steps, int32_t early,
                                  const KvStore& kv, KvWriteSink& sink, DeviceIds& early_ids, int32_t slot) override {
    record(launch_early_call, windows, steps, early);
    Event e;
    chained([&] { e = ForwardModel::launch_greedy_chain_early(windows, steps, early, kv, sink, early_ids, slot); });
    return launched(e);
  }
  void collect_greedy_chain(std::vector<int32_t>& ids) override {
    if (waited_ && running_) waited_->push_back(running_->waited);
    running_.reset();
    ForwardModel::collect_greedy_chain(ids);
  }
  /// Device-like chain events: a launched chain's event is complete only once the host
  /// waited for it (synchronize), as a chain still running on a device; each collect
  /// appends to `waited` whether its chain's event had been waited for.
  void device_like_events(std::vector<bool>* waited) { waited_ = waited; }

 private:
  // Only the outermost call: ForwardModel's defaults call one another and forward().
  void record(Kind kind, std::span<const ForwardWindow> windows, int32_t steps, int32_t early) {
    if (in_chain_) return;
    ASSERT_EQ(windows.size(), 1u);  // batch 1
    calls_->emplace_back(kind, static_cast<int32_t>(windows[0].tokens.size()), logit_rows(windows[0]), steps, early);
  }
  template <typename F>
  void chained(F&& f) {
    in_chain_ = true;
    f();
    in_chain_ = false;
  }
  struct RunningChain final : EventImpl {
    mutable bool waited = false;
    void wait_on(const Stream&) const override {}
    void synchronize() const override { waited = true; }
    bool query() const override { return waited; }
  };
  Event launched(const Event& done) {
    if (!waited_) return done;
    running_ = std::make_shared<RunningChain>();
    return Event(running_);
  }
  Transformer& inner_;
  std::vector<Call>* calls_;
  bool in_chain_ = false;
  std::vector<bool>* waited_ = nullptr;
  std::shared_ptr<RunningChain> running_;
};

using Call = RecordingModel::Call;

TEST(WarmStart, DraftRoundChainsFollowTheDrafterRules) {
  struct Case {
    int32_t gamma;
    bool ahead, on_device;
    int32_t max_chain_steps, launched, chain, ahead_steps;
  };
  const Case cases[] = {
      {6, true, true, 16, 13, 0, 7},   // drafts on the device, draft-ahead: 2 gamma + 1 launched, gamma + 1 ahead
      {8, true, true, 16, 0, 8, 9},    // 17 steps: past the device chain, drafted on the host; ahead still runs
      {4, false, true, 16, 4, 0, 0},   // no draft-ahead: gamma steps launched, nothing ahead
      {4, true, false, 16, 0, 4, 5},   // drafts read on the host: a chain waited for
      {3, true, true, 6, 0, 3, 4},     // a model with a shorter chain limit
      {16, true, true, 16, 0, 16, 0},  // an ahead chain of 17 steps is not launched
      {0, true, true, 16, 0, 0, 0},    // gamma 0 drafts nothing
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.gamma);
    const DraftRoundChains r = draft_round_chains(c.gamma, c.ahead, c.on_device, c.max_chain_steps);
    EXPECT_EQ(r.launched, c.launched);
    EXPECT_EQ(r.chain, c.chain);
    EXPECT_EQ(r.ahead, c.ahead_steps);
  }
}

TEST(WarmStart, VerifyWindowsOfEveryGammaTwiceAndTheStoreAsBefore) {
  std::vector<Call> calls;
  RecordingModel model(test::model("demo-target"), &calls);
  KvStore kv(model.kv_config(64, 16));
  const KvOccupancy before = kv.occupancy();
  // max_gamma 6: windows of 1..8 tokens (a recomputed token, the pending one, 6 drafts).
  EXPECT_EQ(warm_verify_windows(model, kv, 8), 16);
  std::vector<Call> want;
  for (int32_t n = 1; n <= 8; ++n)
    for (int rep = 0; rep < 2; ++rep) want.emplace_back(RecordingModel::forward_call, n, n, 1, 0);
  EXPECT_EQ(calls, want);
  EXPECT_EQ(kv.occupancy(), before);
}

std::unique_ptr<ModelDrafter> make_drafter(std::vector<Call>* calls) {
  auto drafter = std::make_unique<ModelDrafter>(std::make_unique<RecordingModel>(test::model("demo-draft"), calls),
                                                256, 16, /*prefill_chunk=*/64, /*draft_ahead=*/true);
  drafter->keep_drafts_on_device(true);
  return drafter;
}

TEST(WarmStart, DraftChainsOfEveryGammaAsTheRoundsRunThem) {
  std::vector<Call> calls;
  auto drafter = make_drafter(&calls);
  const KvOccupancy before = drafter->kv().occupancy();
  const int32_t chains = drafter->warm_graphs(3);
  // The scratch context's prefill; the sampled chains of gammas 3, 2, 1 (the longest
  // first) for catch-ups of 1 and 2 tokens; then per gamma the launched chain for
  // catch-ups of 1 and 2 tokens and the ahead chain; each twice.
  std::vector<Call> want{{RecordingModel::forward_call, 4, 1, 1, 0}};
  for (int32_t g = 3; g >= 1; --g)
    for (int32_t feed = 1; feed <= 2; ++feed)
      for (int rep = 0; rep < 2; ++rep) want.emplace_back(RecordingModel::sampled_call, feed, 1, g, 0);
  for (int32_t g = 1; g <= 3; ++g) {
    for (int32_t feed = 1; feed <= 2; ++feed)
      for (int rep = 0; rep < 2; ++rep) want.emplace_back(RecordingModel::launch_early_call, feed, 1, 2 * g + 1, g);
    for (int rep = 0; rep < 2; ++rep) want.emplace_back(RecordingModel::launch_call, 1, 1, g + 1, 0);
  }
  EXPECT_EQ(calls, want);
  EXPECT_EQ(chains, 30);
  EXPECT_EQ(drafter->kv().occupancy(), before);
  EXPECT_NO_THROW(drafter->kv().check_invariants());

  // A round at gamma 2 then launches the chain the warm-up ran (2 gamma + 1 steps, one
  // token fed: the prompt was prefilled at start), with the same drafts as a drafter
  // that was never warmed.
  std::vector<Call> cold_calls;
  auto cold = make_drafter(&cold_calls);
  cold->prefill_when_idle(true);
  drafter->prefill_when_idle(true);
  const auto prompt = test::ids(test::golden_public()["cases"][0]["prompt_ids"]);
  const std::span<const int32_t> context(prompt.data(), prompt.size() - 1);
  const std::vector<int32_t> pending{prompt.back()};
  std::vector<std::vector<int32_t>> drafts;
  for (ModelDrafter* d : {drafter.get(), cold.get()}) {
    d->start(1, context);
    std::vector<DraftItem> items{{1, pending, 2, {}, nullptr}};
    std::vector<Proposal> out;
    d->propose(items, out);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_NE(out[0].on_device.ids, nullptr);  // host memory on the CPU, read before the next chain
    drafts.push_back({out[0].on_device.ids[0], out[0].on_device.ids[out[0].on_device.stride]});
    d->after_propose();
  }
  EXPECT_EQ(drafts[0], drafts[1]);
  EXPECT_EQ(calls.back(), Call(RecordingModel::launch_early_call, 1, 1, 5, 2));
  EXPECT_EQ(cold_calls.back(), calls.back());
  drafter->finish(1);
  cold->finish(1);
  EXPECT_EQ(drafter->kv().occupancy(), before);
}

TEST(WarmStart, EveryChainIsWaitedForBeforeItIsCollected) {
  // On a device, collect syncs the host only when its event query finds the chain still
  // running: at start that is a race, and the start-up's synchronising calls moved from
  // process to process (serve_load.sh's syncs per round subtract two servers' counts).
  // The warm-up waits for each chain's event first: one host sync per chain, always.
  std::vector<Call> calls;
  std::vector<bool> waited;
  auto model = std::make_unique<RecordingModel>(test::model("demo-draft"), &calls);
  model->device_like_events(&waited);
  ModelDrafter drafter(std::move(model), 256, 16, /*prefill_chunk=*/64, /*draft_ahead=*/true);
  drafter.keep_drafts_on_device(true);
  EXPECT_EQ(drafter.warm_graphs(3), 30);  // 12 sampled chains (synchronous), 18 launched
  EXPECT_EQ(waited, std::vector<bool>(18, true));  // every launched chain, then collected
}

}  // namespace
}  // namespace specpipe
