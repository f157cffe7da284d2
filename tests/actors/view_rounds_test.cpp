// SpecPV rounds in the scheduler (actors/view_rounds.h), as pure logic: a partial round
// holds its tokens back (exact) or streams them (approximate); the full round after them
// re-verifies the held tokens as drafts and either streams them all or rolls back to the
// first one the target disagrees with; and the reasons a partial view is not given.
#include <gtest/gtest.h>

#include "actors/view_rounds.h"

namespace specpipe::actors {
namespace {

RoundItem partial_round(int32_t pending, std::vector<int32_t> drafts, int32_t accepted, int32_t next, bool final) {
  RoundItem it;
  it.pending = pending;
  it.drafts = std::move(drafts);
  it.accepted = accepted;
  it.next_token = next;
  it.partial = true;
  it.final_verdicts = final;
  return it;
}

TEST(ViewRounds, ExactFullRoundConfirmsHeldTokens) {
  ViewState s;
  s.verified = 100;
  s.retrieval_ready = true;
  // Partial: pending 7 at 100, drafts 8 9 10 accepted 2, target token 11.
  ViewOutcome o = settle_round(s, partial_round(7, {8, 9, 10}, 2, 11, false), 100);
  EXPECT_TRUE(o.to_stream.empty());
  EXPECT_EQ(o.appended, (std::vector<int32_t>{8, 9, 11}));
  EXPECT_EQ(o.new_position, 103);
  EXPECT_EQ(s.since_full, (std::vector<int32_t>{7, 8, 9, 11}));
  EXPECT_EQ(s.provisional(), 3);
  // The full round: rewind to 100, window [7 | 8 9 11, drafts 12 13].
  RoundItem full;
  fill_full_round(s, full);
  EXPECT_EQ(full.rewind_to, 100);
  EXPECT_TRUE(full.recompute.empty());
  EXPECT_EQ(full.pending, 7);
  EXPECT_EQ(full.provisional, (std::vector<int32_t>{8, 9, 11}));
  full.drafts = {12, 13};
  full.accepted = 4;  // 8 9 11 12 agreed
  full.next_token = 14;
  o = settle_round(s, full, 103);
  EXPECT_EQ(o.to_stream, (std::vector<int32_t>{8, 9, 11, 12, 14}));
  EXPECT_EQ(o.appended, (std::vector<int32_t>{12, 14}));
  EXPECT_EQ(o.accepted, 1);
  EXPECT_EQ(o.rolled_back, 0);
  EXPECT_EQ(o.new_position, 105);
  EXPECT_EQ(s.verified, 105);
  EXPECT_TRUE(s.since_full.empty());
  EXPECT_EQ(s.draft_rewind, -1);
}

TEST(ViewRounds, ExactFullRoundRollsBackAtTheFirstDisagreement) {
  ViewState s;
  s.verified = 50;
  settle_round(s, partial_round(7, {8, 9}, 2, 10, false), 50);  // held: 8 9 10
  settle_round(s, partial_round(10, {20}, 0, 21, false), 53);   // held: 8 9 10 21
  RoundItem full;
  fill_full_round(s, full);
  EXPECT_EQ(full.provisional, (std::vector<int32_t>{8, 9, 10, 21}));
  full.drafts = {30, 31};
  full.accepted = 1;  // 8 agreed, 9 did not: the target says 99
  full.next_token = 99;
  const ViewOutcome o = settle_round(s, full, 54);
  EXPECT_EQ(o.to_stream, (std::vector<int32_t>{8, 99}));
  EXPECT_EQ(o.rolled_back, 3);
  EXPECT_EQ(o.accepted, 0);
  EXPECT_EQ(o.new_position, 52);
  // The drafter keeps its context up to the verified pending token (position 50).
  EXPECT_EQ(s.draft_rewind, 51);
  EXPECT_EQ(o.appended, (std::vector<int32_t>{8, 99}));
}

TEST(ViewRounds, ApproximateStreamsAndTheFullRoundOnlyRecomputes) {
  ViewState s;
  s.verified = 10;
  ViewOutcome o = settle_round(s, partial_round(7, {8, 9}, 1, 5, true), 10);
  EXPECT_EQ(o.to_stream, (std::vector<int32_t>{8, 5}));
  EXPECT_EQ(s.provisional(), 0);
  RoundItem full;
  fill_full_round(s, full);
  EXPECT_EQ(full.recompute, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(full.pending, 5);
  EXPECT_TRUE(full.provisional.empty());
  full.drafts = {6};
  full.accepted = 1;
  full.next_token = 4;
  o = settle_round(s, full, 12);
  EXPECT_EQ(o.to_stream, (std::vector<int32_t>{6, 4}));
  EXPECT_EQ(o.new_position, 14);
}

TEST(ViewRounds, RefusalReasons) {
  ViewState s;
  s.verified = 1000;
  ViewDecision d;
  d.partial = true;
  d.budget = {64, 4, 64, 128};
  ViewContext c{1000, 16, false, false, false, false};
  EXPECT_EQ(view_refusal(s, d, c), "no_retrieval");
  s.retrieval_ready = true;
  EXPECT_EQ(view_refusal(s, d, c), "");
  EXPECT_EQ(view_refusal(s, d, {1000, 16, true, false, false, false}), "sampled");
  EXPECT_EQ(view_refusal(s, d, {1000, 16, false, true, false, false}), "stop_pending");
  EXPECT_EQ(view_refusal(s, d, {1000, 16, false, false, true, false}), "context_end");
  EXPECT_EQ(view_refusal(s, d, {1000, 16, false, false, false, true}), "kv_redo");
  EXPECT_EQ(view_refusal(s, d, {1200, 16, false, false, false, false}), "buffer_full");
  EXPECT_EQ(view_refusal(s, d, {200, 16, false, false, false, false}), "covers_context");
  settle_round(s, partial_round(1, {2}, 1, 3, false), 1000);
  d.final_verdicts = true;
  EXPECT_EQ(view_refusal(s, d, c), "mode_switch");
}

}  // namespace
}  // namespace specpipe::actors
