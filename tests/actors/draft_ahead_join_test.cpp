// The draft-ahead event's way through a round (issue 18, host syncs per round): the work
// the drafter leaves running after a round's proposals (Drafter::after_propose) travels
// with that round (RoundBatch::draft_ahead) to the verifier, whose verify forward joins
// it (ForwardModel::join_next_forward) - so on a device the forward's one host sync
// covers the draft-ahead chain and the drafter collects it without a sync of its own.
// On the CPU events are complete; here a recording event stands in for a device one:
// each round's event must be joined once, by that round's verify forward and not by a
// prefill, in round order, never waited for on the host; the outputs stay golden.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/engine.h"
#include "actors/pipeline_builder.h"
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
  int32_t host_waits = 0;              // synchronize() on any recording event
  int32_t forwards = 0;
};

/// An event of a pretend device stream: complete, and telling the log who waited for it.
class RecordingEvent final : public EventImpl {
 public:
  RecordingEvent(JoinLog& log, int32_t id) : log_(log), id_(id) {}
  void wait_on(const Stream& /*waiter*/) const override {
    const std::lock_guard lock(log_.mutex);
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

TEST(DraftAheadJoin, EachRoundsEventIsJoinedByItsVerifyForward) {
  JoinLog log;
  actors::PipelineParts parts = actors::load_pipeline(test::demo_engine_config(4));
  parts.drafter = std::make_shared<EventDrafter>(parts.drafter, log);
  parts.target = std::make_shared<JoiningTarget>(parts.target, log);
  actors::Engine engine(std::move(parts), 1);
  const auto& c = test::golden_public()["cases"][1];
  test::Completions done;
  const RequestId id = engine.submit(test::greedy_request(test::ids(c["prompt_ids"]), 40), done.sink());
  const actors::Completion out = done.wait(1).at(id);
  ASSERT_EQ(out.reason, FinishReason::length) << out.error;
  const std::vector<int32_t> want = test::expected_greedy(c);
  EXPECT_EQ(out.tokens, std::vector<int32_t>(want.begin(), want.begin() + 40));

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

}  // namespace
}  // namespace specpipe
