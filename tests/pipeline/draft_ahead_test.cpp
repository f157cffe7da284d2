// Draft-ahead (pipeline/model_drafter.h) may only move WHEN drafts are computed, never
// what they are. Two model drafters on the real demo draft model, one drafting ahead and
// one not, go through the same rounds: four sequences in a batch, verified against the
// real target's greedy continuation (the golden data), with gamma changing between rounds
// and a sampled round now and then. Every round they must propose the same tokens; the
// draft-ahead chains must be used in some rounds and dropped in others (a batch with
// both), the draft KV store must stay consistent, and finishing a sequence while its
// chain is pending must free everything.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "pipeline/model_drafter.h"
#include "tests/support/golden.h"
#include "tests/support/limited_model.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

/// A sequence driven by the target's greedy continuation.
struct Driven {
  std::vector<int32_t> prompt, target;  // the golden prompt and greedy continuation
  size_t emitted = 0;                   // target tokens produced so far
  std::vector<int32_t> appended;        // what the next round appends
};

std::unique_ptr<ModelDrafter> make_drafter(bool ahead) {
  return std::make_unique<ModelDrafter>(std::make_unique<test::LimitedModel>(test::model("demo-draft")), 256, 16,
                                        /*prefill_chunk=*/64, ahead);
}

TEST(DraftAhead, ProposesTheSameDraftsAsDraftingOnDemand) {
  auto plain = make_drafter(false), ahead = make_drafter(true);
  std::vector<Driven> seqs;
  const auto& cases = test::golden_public()["cases"];
  for (size_t i = 0; i < 4; ++i) {
    Driven d{test::ids(cases[i]["prompt_ids"]), test::ids(cases[i]["target_greedy_96"]), 0, {}};
    d.appended = {d.prompt.back()};
    const std::span<const int32_t> context(d.prompt.data(), d.prompt.size() - 1);
    plain->start(static_cast<RequestId>(i), context);
    ahead->start(static_cast<RequestId>(i), context);
    seqs.push_back(std::move(d));
  }
  const int32_t gammas[] = {4, 4, 4, 2, 4, 5, 5, 3, 6, 4};
  std::vector<Rng> rng_plain(seqs.size(), Rng(7)), rng_ahead(seqs.size(), Rng(7));
  int rounds = 0;
  for (int round = 0;; ++round) {
    const int32_t gamma = gammas[round % 10];
    if (std::any_of(seqs.begin(), seqs.end(), [&](const Driven& d) { return d.emitted + gamma + 1 > d.target.size(); }))
      break;
    // Every seventh round samples its drafts (the drafter's step-by-step path).
    cpu::SamplingParams sampling;
    if (round % 7 == 6) sampling.temperature = 0.8f;
    std::vector<DraftItem> items_plain, items_ahead;
    for (size_t i = 0; i < seqs.size(); ++i) {
      items_plain.push_back({static_cast<RequestId>(i), seqs[i].appended, gamma, sampling, &rng_plain[i]});
      items_ahead.push_back({static_cast<RequestId>(i), seqs[i].appended, gamma, sampling, &rng_ahead[i]});
    }
    std::vector<Proposal> want, got;
    plain->propose(items_plain, want);
    ahead->propose(items_ahead, got);
    plain->after_propose();  // draft-ahead off: nothing to do
    ahead->after_propose();
    ASSERT_NO_THROW(ahead->kv().check_invariants()) << "round " << round;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ASSERT_EQ(got[i].tokens, want[i].tokens) << "round " << round << ", sequence " << i;
      // Greedy verification against the target: the drafts that match it, then its token.
      Driven& d = seqs[i];
      size_t a = 0;
      while (a < want[i].tokens.size() && want[i].tokens[a] == d.target[d.emitted + a]) ++a;
      d.appended.assign(want[i].tokens.begin(), want[i].tokens.begin() + static_cast<std::ptrdiff_t>(a));
      d.appended.push_back(d.target[d.emitted + a]);
      d.emitted += a + 1;
    }
    ++rounds;
  }
  EXPECT_GE(rounds, 20);
  const auto& stats = ahead->ahead_stats();
  EXPECT_GT(stats.used, 0) << "no round took its drafts from a draft-ahead chain";
  EXPECT_LT(stats.used, stats.launched) << "no draft-ahead chain was ever dropped";
  EXPECT_EQ(plain->ahead_stats().launched, 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    plain->finish(static_cast<RequestId>(i));
    ahead->finish(static_cast<RequestId>(i));  // the last round's chain is still pending
  }
  const KvOccupancy kv = ahead->kv().occupancy();
  EXPECT_EQ(kv.free_blocks, kv.total_blocks);
  EXPECT_EQ(kv.sequences, 0u);
}

TEST(DraftAhead, LaunchesNothingAfterASampledRound) {
  auto drafter = make_drafter(true);
  const auto prompt = test::ids(test::golden_public()["cases"][0]["prompt_ids"]);
  drafter->start(1, std::span<const int32_t>(prompt.data(), prompt.size() - 1));
  const std::vector<int32_t> pending{prompt.back()};
  Rng rng(3);
  cpu::SamplingParams sampling;
  sampling.temperature = 1.0f;
  std::vector<DraftItem> items{{1, pending, 4, sampling, &rng}};
  std::vector<Proposal> out;
  drafter->propose(items, out);
  drafter->after_propose();
  EXPECT_EQ(drafter->ahead_stats().launched, 0);  // sampled drafts have no greedy chain to extend
  drafter->finish(1);
  EXPECT_EQ(drafter->kv().occupancy().sequences, 0u);
}

// The prompt's catch-up at a sequence's first proposal is prefill, which the draft actor
// counts apart from drafting (Drafter::take_prefill_ms): reported once, and only when a
// catch-up was long enough to be prefilled on its own.
TEST(DraftAhead, ReportsTheCatchUpPrefillOnce) {
  auto drafter = make_drafter(true);
  const auto prompt = test::ids(test::golden_public()["cases"][0]["prompt_ids"]);
  ASSERT_GT(prompt.size(), 66u);  // longer than a catch-up window (prefill_chunk 64)
  drafter->start(1, std::span<const int32_t>(prompt.data(), prompt.size() - 1));
  EXPECT_EQ(drafter->take_prefill_ms(), 0.0);  // lazy: nothing prefilled at start
  Rng rng(3);
  std::vector<int32_t> appended{prompt.back()};
  std::vector<DraftItem> items{{1, appended, 4, {}, &rng}};
  std::vector<Proposal> out;
  drafter->propose(items, out);
  EXPECT_GT(drafter->take_prefill_ms(), 0.0);
  EXPECT_EQ(drafter->take_prefill_ms(), 0.0);  // taken
  appended = {out[0].tokens[0], 7};
  items[0].appended = appended;
  drafter->propose(items, out);
  EXPECT_EQ(drafter->take_prefill_ms(), 0.0);  // a short catch-up joins the drafting window
  drafter->finish(1);
}

}  // namespace
}  // namespace specpipe
