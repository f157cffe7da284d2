// The draft-ahead event's way through a round (issue 18, host syncs per round): the work
// the drafter leaves running after a round's proposals (Drafter::after_propose) travels
// with that round (RoundBatch::draft_ahead) to the verifier, whose verify forward joins
// it (ForwardModel::join_next_forward) - so on a device the forward's one host sync
// covers the draft-ahead chain and the drafter collects it without a sync of its own.
// On the CPU events are complete; here a recording event stands in for a device one:
// each round's event must be joined once, by that round's verify forward and not by a
// prefill, in round order, never waited for on the host; the outputs stay golden.
//
// Drafts kept on the device (the same issue): a chain round whose drafts the draft-ahead
// did not make hands them out still on the drafter's device (Proposal::on_device); the
// round carries them (RoundItem::device_drafts) to the verifier, whose forward reads them
// there behind their event (ForwardModel::place_next_tokens) and returns their values
// with its results. The CPU drafter's ids are host memory; here a drafter moves them to a
// pretend device with a recording event, and a target reads them there as a device model
// does: each such round's drafts placed into that round's verify forward, their event
// waited for once by that forward's stream (never on the host), the rounds' accepted
// counts those of host drafts, the outputs golden.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/engine.h"
#include "actors/pipeline_builder.h"
#include "pipeline/model_drafter.h"
#include "tests/support/engine.h"
#include "tests/support/golden.h"

namespace specpipe {
namespace {

/// What the recording events saw, shared by the drafter and target below.
struct JoinLog {
  std::mutex mutex;
  int32_t issued = 0;                  // events handed out by after_propose
  std::vector<int32_t> joined;         // event ids, in the order forwards joined them
  std::vector<int32_t> joined_at;      // the target's forward count at each join
  std::vector<int32_t> verify_forwards;  // forward indices that ran speculative windows
  int32_t host_waits = 0;              // synchronize() on any recording event, or a host wait_on
  int32_t forwards = 0;
  int32_t made_ahead = 0;              // proposals the draft-ahead made (host drafts)
  std::vector<int32_t> placing_forwards;  // forward indices that read placed tokens
  int32_t bad_placeholders = 0;        // placed tokens whose window did not hold 0
};

/// An event of a pretend device stream: complete, and telling the log who waited for it.
class RecordingEvent final : public EventImpl {
 public:
  RecordingEvent(JoinLog& log, int32_t id) : log_(log), id_(id) {}
  void wait_on(const Stream& waiter) const override {
    const std::lock_guard lock(log_.mutex);
    if (waiter.device.kind != DeviceKind::cuda) {
      ++log_.host_waits;
      return;
    }
    log_.joined.push_back(id_);
    log_.joined_at.push_back(log_.forwards);
  }
  void synchronize() const override {
    const std::lock_guard lock(log_.mutex);
    ++log_.host_waits;
  }
  bool query() const override { return true; }

 private:
  JoinLog& log_;
  int32_t id_;
};

/// The pipeline's drafter, whose after_propose hands out a recording event each round.
class EventDrafter final : public Drafter {
 public:
  EventDrafter(std::shared_ptr<Drafter> inner, JoinLog& log) : inner_(std::move(inner)), log_(log) {}
  std::string name() const override { return inner_->name(); }
  void start(RequestId request, std::span<const int32_t> context) override { inner_->start(request, context); }
  void propose(std::span<const DraftItem> items, std::vector<Proposal>& out) override { inner_->propose(items, out); }
  void finish(RequestId request) override { inner_->finish(request); }
  std::optional<KvOccupancy> kv_occupancy() const override { return inner_->kv_occupancy(); }
  Event after_propose() override {
    inner_->after_propose();
    const std::lock_guard lock(log_.mutex);
    return Event(std::make_shared<const RecordingEvent>(log_, ++log_.issued));
  }

 private:
  std::shared_ptr<Drafter> inner_;
  JoinLog& log_;
};

/// The pipeline's target, joining events as a device model does (its stream waits).
class JoiningTarget final : public ForwardModel {
 public:
  JoiningTarget(std::shared_ptr<ForwardModel> inner, JoinLog& log) : inner_(std::move(inner)), log_(log) {}
  const ModelConfig& config() const override { return inner_->config(); }
  Device device() const override { return inner_->device(); }
  KvStoreConfig kv_config(int32_t blocks, int32_t block_size) const override {
    return inner_->kv_config(blocks, block_size);
  }
  void join_next_forward(const Event& e) override { e.wait_on(Stream{{DeviceKind::cuda, 0}, this}); }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink, Logits& out) override {
    bool speculative = false;  // a verify window holds its drafts after the pending token
    for (const ForwardWindow& w : windows) speculative = speculative || (w.logits == LogitsMode::all && w.tokens.size() > 1);
    {
      const std::lock_guard lock(log_.mutex);
      if (speculative) log_.verify_forwards.push_back(log_.forwards);
      ++log_.forwards;
    }
    inner_->forward(windows, kv, sink, out);
  }

 private:
  std::shared_ptr<ForwardModel> inner_;
  JoinLog& log_;
};

/// Golden case 1, 40 tokens, through an engine of `parts`: the output must be golden.
actors::Completion generate_case(actors::PipelineParts parts) {
  actors::Engine engine(std::move(parts), 1);
  const auto& c = test::golden_public()["cases"][1];
  test::Completions done;
  const RequestId id = engine.submit(test::greedy_request(test::ids(c["prompt_ids"]), 40), done.sink());
  actors::Completion out = done.wait(1).at(id);
  const std::vector<int32_t> want = test::expected_greedy(c);
  EXPECT_EQ(out.tokens, std::vector<int32_t>(want.begin(), want.begin() + 40));
  return out;
}

TEST(DraftAheadJoin, EachRoundsEventIsJoinedByItsVerifyForward) {
  JoinLog log;
  actors::PipelineParts parts = actors::load_pipeline(test::demo_engine_config(4));
  parts.drafter = std::make_shared<EventDrafter>(parts.drafter, log);
  parts.target = std::make_shared<JoiningTarget>(parts.target, log);
  const actors::Completion out = generate_case(std::move(parts));
  ASSERT_EQ(out.reason, FinishReason::length) << out.error;

  const std::lock_guard lock(log.mutex);
  const auto rounds = static_cast<int32_t>(out.stats.accepted_per_round.size());
  ASSERT_GT(rounds, 3);
  EXPECT_EQ(log.issued, rounds);
  // Joined once each, in round order; each join is followed by a verify forward (the
  // next forward of the target), never by a prefill.
  std::vector<int32_t> in_order;
  for (int32_t i = 1; i <= rounds; ++i) in_order.push_back(i);
  EXPECT_EQ(log.joined, in_order);
  ASSERT_EQ(log.joined_at.size(), log.joined.size());
  for (size_t r = 0; r < log.joined_at.size(); ++r)
    EXPECT_NE(std::find(log.verify_forwards.begin(), log.verify_forwards.end(), log.joined_at[r]),
              log.verify_forwards.end())
        << "round " << r + 1 << "'s event was joined by forward " << log.joined_at[r] << ", not a verify forward";
  EXPECT_EQ(log.host_waits, 0) << "the draft-ahead event was waited for on the host";
}

constexpr Device kPretendDevice{DeviceKind::cuda, 0};

/// The pipeline's drafter, its drafts' ids copied to "device memory" (kept here).
class DeviceDrafter final : public Drafter {
 public:
  DeviceDrafter(std::shared_ptr<Drafter> inner, JoinLog& log) : inner_(std::move(inner)), log_(log) {}
  std::string name() const override { return inner_->name(); }
  void start(RequestId request, std::span<const int32_t> context) override { inner_->start(request, context); }
  void propose(std::span<const DraftItem> items, std::vector<Proposal>& out) override {
    inner_->propose(items, out);
    const std::lock_guard lock(log_.mutex);
    Event ready;  // one for the round's drafts
    bool issued = false;
    for (Proposal& p : out) {
      log_.made_ahead += p.made_ahead ? 1 : 0;
      if (!p.on_device.ids) continue;
      EXPECT_EQ(p.on_device.device.kind, DeviceKind::cpu);  // the CPU model's host ids
      std::vector<int32_t>& ids = memory_.emplace_back();
      const auto stride = static_cast<size_t>(p.on_device.stride);
      for (size_t k = 0; k < p.tokens.size(); ++k) ids.push_back(p.on_device.ids[k * stride]);
      if (!issued) ready = Event(std::make_shared<const RecordingEvent>(log_, ++log_.issued));
      issued = true;
      p.on_device = {ids.data(), 1, kPretendDevice, ready};
    }
    while (memory_.size() > 64) memory_.pop_front();  // a few rounds back is enough
  }
  void finish(RequestId request) override { inner_->finish(request); }
  std::optional<KvOccupancy> kv_occupancy() const override { return inner_->kv_occupancy(); }
  Event after_propose() override { return inner_->after_propose(); }

 private:
  std::shared_ptr<Drafter> inner_;
  JoinLog& log_;
  std::deque<std::vector<int32_t>> memory_;
};

/// The pipeline's target on the pretend device: it reads placed tokens where they are.
class PlacingTarget final : public ForwardModel {
 public:
  PlacingTarget(std::shared_ptr<ForwardModel> inner, JoinLog& log) : inner_(std::move(inner)), log_(log) {}
  const ModelConfig& config() const override { return inner_->config(); }
  Device device() const override { return inner_->device(); }
  KvStoreConfig kv_config(int32_t blocks, int32_t block_size) const override {
    return inner_->kv_config(blocks, block_size);
  }
  void place_next_tokens(std::span<const PlacedToken> placed, std::span<const Event> ready) override {
    for (const Event& e : ready) e.wait_on(Stream{kPretendDevice, this});
    placed_.assign(placed.begin(), placed.end());
  }
  std::span<const int32_t> placed_tokens() const override { return values_; }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink, Logits& out) override {
    values_.clear();
    std::vector<ForwardWindow> own(windows.begin(), windows.end());
    std::vector<std::vector<int32_t>> tokens(windows.size());
    {
      const std::lock_guard lock(log_.mutex);
      if (!placed_.empty()) log_.placing_forwards.push_back(log_.forwards);
      ++log_.forwards;
      for (size_t w = 0; w < windows.size(); ++w) tokens[w].assign(windows[w].tokens.begin(), windows[w].tokens.end());
      for (const PlacedToken& p : placed_) {
        int32_t& t = tokens.at(static_cast<size_t>(p.window)).at(static_cast<size_t>(p.offset));
        log_.bad_placeholders += t != 0 ? 1 : 0;
        t = *p.at;
        values_.push_back(t);
      }
    }
    placed_.clear();
    for (size_t w = 0; w < own.size(); ++w) own[w].tokens = tokens[w];
    inner_->forward(own, kv, sink, out);
  }

 private:
  std::shared_ptr<ForwardModel> inner_;
  JoinLog& log_;
  std::vector<PlacedToken> placed_;
  std::vector<int32_t> values_;
};

TEST(DeviceDrafts, FreshDraftsArePlacedIntoTheirRoundsVerifyForward) {
  PipelineConfig config = test::demo_engine_config(4);
  // Draft-ahead on: rounds whose guess missed launch one chain (drafts, then the
  // draft-ahead part); the others take the drafts made ahead, on the host.
  config.drafter.draft_ahead = DraftAhead::on;
  JoinLog log;
  actors::PipelineParts parts = actors::load_pipeline(config);
  ASSERT_NE(dynamic_cast<ModelDrafter*>(parts.drafter.get()), nullptr);
  parts.drafter = std::make_shared<DeviceDrafter>(parts.drafter, log);
  parts.target = std::make_shared<PlacingTarget>(parts.target, log);
  const actors::Completion out = generate_case(std::move(parts));
  ASSERT_EQ(out.reason, FinishReason::length) << out.error;
  // The same drafts as drafting on the host: every round but the last (which the token
  // limit may cut) accepts what the reference's rounds accept.
  const auto want_rounds = test::golden_public()["cases"][1]["spec"]["4"]["accepted_per_round"].get<std::vector<int32_t>>();
  const std::vector<int32_t>& got_rounds = out.stats.accepted_per_round;
  ASSERT_GT(got_rounds.size(), 3u);
  ASSERT_LE(got_rounds.size(), want_rounds.size());
  EXPECT_EQ(std::vector<int32_t>(got_rounds.begin(), got_rounds.end() - 1),
            std::vector<int32_t>(want_rounds.begin(), want_rounds.begin() + (got_rounds.size() - 1)));

  const std::lock_guard lock(log.mutex);
  const auto rounds = static_cast<int32_t>(got_rounds.size());
  ASSERT_GT(log.issued, 0);
  ASSERT_GT(log.made_ahead, 0) << "no round took drafts made ahead: the test covers half of it";
  // A round's drafts are on the device or were made ahead, never both, never neither.
  EXPECT_EQ(log.issued + log.made_ahead, rounds);
  // Each event waited for once, in round order, by the forward that read its drafts.
  std::vector<int32_t> in_order;
  for (int32_t i = 1; i <= log.issued; ++i) in_order.push_back(i);
  EXPECT_EQ(log.joined, in_order);
  EXPECT_EQ(log.joined_at, log.placing_forwards);
  EXPECT_EQ(log.host_waits, 0) << "the drafts' event was waited for on the host";
  EXPECT_EQ(log.bad_placeholders, 0);
}

}  // namespace
}  // namespace specpipe
