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
#include <initializer_list>
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

/// Four golden sequences, started in every drafter given.
std::vector<Driven> start_four(std::initializer_list<ModelDrafter*> drafters) {
  std::vector<Driven> seqs;
  const auto& cases = test::golden_public()["cases"];
  for (size_t i = 0; i < 4; ++i) {
    Driven d{test::ids(cases[i]["prompt_ids"]), test::ids(cases[i]["target_greedy_96"]), 0, {}};
    d.appended = {d.prompt.back()};
    const std::span<const int32_t> context(d.prompt.data(), d.prompt.size() - 1);
    for (ModelDrafter* drafter : drafters) drafter->start(static_cast<RequestId>(i), context);
    seqs.push_back(std::move(d));
  }
  return seqs;
}

/// Greedy verification against the target: the drafts that match it, then its token,
/// are what the next round appends.
void verify(Driven& d, const std::vector<int32_t>& drafts) {
  size_t a = 0;
  while (a < drafts.size() && drafts[a] == d.target[d.emitted + a]) ++a;
  d.appended.assign(drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(a));
  d.appended.push_back(d.target[d.emitted + a]);
  d.emitted += a + 1;
}

std::unique_ptr<ModelDrafter> make_drafter(bool ahead) {
  return std::make_unique<ModelDrafter>(std::make_unique<test::LimitedModel>(test::model("demo-draft")), 256, 16,
                                        /*prefill_chunk=*/64, ahead);
}

TEST(DraftAhead, ProposesTheSameDraftsAsDraftingOnDemand) {
  auto plain = make_drafter(false), ahead = make_drafter(true);
  std::vector<Driven> seqs = start_four({plain.get(), ahead.get()});
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
      verify(seqs[i], want[i].tokens);
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

// Sampled drafts at a pure temperature come from one chain (ForwardModel::
// forward_sampled_chain; on a GPU drawn on the device) instead of a forward, a host copy
// and a draw per step. The chain must propose what the step-by-step path proposes: the
// same tokens and q rows, bit for bit on the CPU, from the same uniforms (each rng's next
// draw equal after every round). Drafter `step` gets a fifth sequence with top-k, which
// keeps its whole batch on the step-by-step path; drafter `chain` gets it greedy. The
// first four mix greedy and sampled rows with gammas that differ within and between
// rounds (0 included), and two of them share an rng (the draws' order matters).
TEST(DraftAhead, SampledChainProposesAsTheStepByStepPath) {
  auto step_model = std::make_unique<test::LimitedModel>(test::model("demo-draft"));
  auto chain_model = std::make_unique<test::LimitedModel>(test::model("demo-draft"));
  test::LimitedModel* step_counts = step_model.get();
  test::LimitedModel* chain_counts = chain_model.get();
  ModelDrafter step(std::move(step_model), 256, 16, /*prefill_chunk=*/64, /*draft_ahead=*/false);
  ModelDrafter chain(std::move(chain_model), 256, 16, /*prefill_chunk=*/64, /*draft_ahead=*/false);
  std::vector<Driven> seqs = start_four({&step, &chain});
  // The fifth sequence (the first case's prompt again), driven by each drafter's own drafts.
  std::vector<Driven> fifth;
  for (ModelDrafter* drafter : {&step, &chain}) {
    const auto& c = test::golden_public()["cases"][0];
    Driven d{test::ids(c["prompt_ids"]), test::ids(c["target_greedy_96"]), 0, {}};
    d.appended = {d.prompt.back()};
    drafter->start(4, std::span<const int32_t>(d.prompt.data(), d.prompt.size() - 1));
    fifth.push_back(std::move(d));
  }
  // rng 0 serves sequences 0 and 2, rng 1 sequence 3, rng 2 the fifth.
  std::vector<Rng> rng_step{Rng(11), Rng(12), Rng(13)}, rng_chain{Rng(11), Rng(12), Rng(13)};
  const size_t rng_of[] = {0, 0, 0, 1, 2};
  const float temperature[] = {0.8f, 0.0f, 1.0f, 0.5f};
  const int32_t gammas[4][4] = {{4, 3, 1, 4}, {2, 3, 4, 4}, {5, 2, 0, 3}, {3, 1, 6, 2}};
  int rounds = 0;
  for (int round = 0;; ++round) {
    const int32_t* gamma = gammas[round % 4];
    bool room = true;
    for (size_t i = 0; i < seqs.size(); ++i)
      room = room && seqs[i].emitted + static_cast<size_t>(gamma[i]) + 1 <= seqs[i].target.size();
    for (const Driven& d : fifth) room = room && d.emitted + 5 <= d.target.size();
    if (!room) break;
    std::vector<DraftItem> items_step, items_chain;
    for (size_t i = 0; i < 4; ++i) {
      cpu::SamplingParams sampling;
      sampling.temperature = temperature[(i + static_cast<size_t>(round)) % 4];  // rows change roles
      const auto r = static_cast<RequestId>(i);
      items_step.push_back({r, seqs[i].appended, gamma[i], sampling, &rng_step[rng_of[i]]});
      items_chain.push_back({r, seqs[i].appended, gamma[i], sampling, &rng_chain[rng_of[i]]});
    }
    cpu::SamplingParams top_k;
    top_k.temperature = 0.8f;
    top_k.top_k = 5;
    items_step.push_back({4, fifth[0].appended, 4, top_k, &rng_step[2]});
    items_chain.push_back({4, fifth[1].appended, 4, {}, &rng_chain[2]});
    std::vector<Proposal> want, got;
    step.propose(items_step, want);
    chain.propose(items_chain, got);
    for (size_t i = 0; i < 4; ++i) {
      ASSERT_EQ(got[i].tokens, want[i].tokens) << "round " << round << ", sequence " << i;
      ASSERT_EQ(got[i].q.size(), want[i].q.size()) << "round " << round << ", sequence " << i;
      ASSERT_EQ(got[i].q, want[i].q) << "round " << round << ", sequence " << i;  // bit for bit
      EXPECT_EQ(got[i].q.size(), items_chain[i].sampling.temperature > 0 ? got[i].tokens.size() : 0u);
    }
    for (size_t r = 0; r < 2; ++r)  // the same uniforms consumed: the same state, the next draws agree
      ASSERT_TRUE(rng_chain[r] == rng_step[r]) << "round " << round << ", rng " << r;
    for (size_t i = 0; i < seqs.size(); ++i) verify(seqs[i], want[i].tokens);
    verify(fifth[0], want[4].tokens);
    verify(fifth[1], got[4].tokens);
    ASSERT_NO_THROW(chain.kv().check_invariants()) << "round " << round;
    ++rounds;
  }
  EXPECT_GE(rounds, 8);
  EXPECT_EQ(step_counts->sampled_chains, 0);  // top-k keeps the step-by-step path
  EXPECT_EQ(chain_counts->sampled_chains, rounds);
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(rng_chain[r].uniform(), rng_step[r].uniform());
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

// prefill_when_idle: a sequence started while no other runs is prefilled at start (beside
// the target's prefill, off its first token's path); one started beside others stays lazy.
// Neither moves a draft: the same proposals as a lazy drafter's, round after round.
TEST(DraftAhead, PrefillsAtStartOnlyWhenIdleAndProposesTheSame) {
  auto lazy = make_drafter(true), eager = make_drafter(true);
  eager->prefill_when_idle(true);
  const auto& cases = test::golden_public()["cases"];
  std::vector<Driven> seqs;
  for (size_t i = 0; i < 2; ++i) {
    Driven d{test::ids(cases[i]["prompt_ids"]), test::ids(cases[i]["target_greedy_96"]), 0, {}};
    d.appended = {d.prompt.back()};
    const std::span<const int32_t> context(d.prompt.data(), d.prompt.size() - 1);
    const int32_t free_before = eager->kv().occupancy().free_blocks;
    lazy->start(static_cast<RequestId>(i), context);
    eager->start(static_cast<RequestId>(i), context);
    EXPECT_EQ(lazy->take_prefill_ms(), 0.0);
    if (i == 0) {  // alone: prefilled now, its context committed
      EXPECT_GT(eager->take_prefill_ms(), 0.0);
      EXPECT_LT(eager->kv().occupancy().free_blocks, free_before);
    } else {  // beside the first: lazy
      EXPECT_EQ(eager->take_prefill_ms(), 0.0);
      EXPECT_EQ(eager->kv().occupancy().free_blocks, free_before);
    }
    seqs.push_back(std::move(d));
  }
  ASSERT_NO_THROW(eager->kv().check_invariants());
  Rng rng(5);
  for (int round = 0; round < 12; ++round) {
    const int32_t gamma = 2 + round % 4;
    if (std::any_of(seqs.begin(), seqs.end(), [&](const Driven& d) { return d.emitted + gamma + 1 > d.target.size(); }))
      break;
    std::vector<DraftItem> items;
    for (size_t i = 0; i < seqs.size(); ++i)
      items.push_back({static_cast<RequestId>(i), seqs[i].appended, gamma, cpu::SamplingParams{}, &rng});
    std::vector<Proposal> want, got;
    lazy->propose(items, want);
    eager->propose(items, got);
    lazy->after_propose();
    eager->after_propose();
    ASSERT_NO_THROW(eager->kv().check_invariants()) << "round " << round;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ASSERT_EQ(got[i].tokens, want[i].tokens) << "round " << round << ", sequence " << i;
      verify(seqs[i], want[i].tokens);
    }
  }
  for (RequestId r : {0, 1}) {
    lazy->finish(r);
    eager->finish(r);
  }
  EXPECT_EQ(eager->kv().occupancy().free_blocks, eager->kv().occupancy().total_blocks);
}

// prefill_when_idle is for a server that serves one request at a time. Under load,
// requests of equal length finish in the same round and their successors arrive one by
// one: the first of them is alone in the drafter for a moment, but the last round ran a
// batch, so it stays lazy (SCV's plain rounds at 8-32 clients paid that prefill on the
// H100, each new batch waiting for it: docs/BENCHMARKS.md section 8). After a round of one
// sequence, a sequence alone is prefilled again.
TEST(DraftAhead, PrefillsAtStartOnlyAfterARoundOfOneSequence) {
  auto drafter = make_drafter(true);
  drafter->prefill_when_idle(true);
  const auto& cases = test::golden_public()["cases"];
  const auto prompt = [&](size_t i) { return test::ids(cases[i]["prompt_ids"]); };
  // One plain round (gamma 0) for the requests `running`, each appending its prompt's
  // last token; requests are numbered by their golden case.
  Rng rng(9);
  const auto run_round = [&](std::initializer_list<size_t> running) {
    std::vector<std::vector<int32_t>> appended;
    std::vector<DraftItem> items;
    for (size_t r : running) appended.push_back({prompt(r).back()});
    size_t k = 0;
    for (size_t r : running) items.push_back({static_cast<RequestId>(r), appended[k++], 0, cpu::SamplingParams{}, &rng});
    std::vector<Proposal> out;
    drafter->propose(items, out);
    drafter->after_propose();
  };
  // Starts request r with its prompt but the last token; returns what it prefilled (ms).
  const auto start = [&](size_t r) {
    const auto p = prompt(r);
    drafter->start(static_cast<RequestId>(r), std::span<const int32_t>(p.data(), p.size() - 1));
    return drafter->take_prefill_ms();
  };
  // A batch of two runs a round and both finish in it.
  EXPECT_GT(start(0), 0.0);  // alone on an idle server: prefilled
  EXPECT_EQ(start(1), 0.0);  // beside it: lazy
  run_round({0, 1});
  drafter->finish(0);
  drafter->finish(1);
  // The next request arrives first, alone in the drafter, after a round of two: lazy.
  const int32_t free_before = drafter->kv().occupancy().free_blocks;
  EXPECT_EQ(start(2), 0.0);
  EXPECT_EQ(drafter->kv().occupancy().free_blocks, free_before);
  // It runs alone and finishes; the next one alone after a round of one: prefilled.
  run_round({2});
  drafter->finish(2);
  EXPECT_GT(start(3), 0.0);
  EXPECT_LT(drafter->kv().occupancy().free_blocks, drafter->kv().occupancy().total_blocks);
  drafter->finish(3);
  ASSERT_NO_THROW(drafter->kv().check_invariants());
  EXPECT_EQ(drafter->kv().occupancy().free_blocks, drafter->kv().occupancy().total_blocks);
}

TEST(DraftGammas, EachSequenceKeepsItsOwnGammaAndGammaZeroCostsNothing) {
  // A verify_plan strategy (SCV) gives each sequence its own gamma, 0 for some. The
  // drafter runs one chain of the longest gamma for all drafting sequences: each must
  // get exactly its gamma's drafts, the same tokens as drafting alone; a round at gamma 0
  // for all runs no draft forward; a sequence back from gamma 0 catches up with the
  // others in one batched prefill. With draft-ahead on, so that its chains meet gammas
  // that change from round to round.
  auto mixed_model = std::make_unique<test::LimitedModel>(test::model("demo-draft"));
  test::LimitedModel* counted = mixed_model.get();
  ModelDrafter mixed(std::move(mixed_model), 256, 16, /*prefill_chunk=*/64, /*draft_ahead=*/true);
  std::vector<std::unique_ptr<ModelDrafter>> alone;  // one per sequence, no draft-ahead
  std::vector<Driven> seqs = start_four({&mixed});
  for (size_t i = 0; i < seqs.size(); ++i) {
    alone.push_back(make_drafter(false));
    const Driven& d = seqs[i];
    alone.back()->start(static_cast<RequestId>(i), std::span<const int32_t>(d.prompt.data(), d.prompt.size() - 1));
  }
  const int32_t plan[][4] = {{0, 0, 0, 0}, {2, 5, 0, 3}, {2, 5, 0, 3}, {0, 4, 4, 1}, {0, 0, 0, 0},
                             {6, 0, 2, 2}, {3, 3, 3, 3}, {1, 0, 6, 0}, {0, 0, 0, 0}, {4, 4, 0, 4}};
  Rng rng(1);
  int rounds = 0, off_rounds = 0;
  for (int round = 0;; ++round) {
    const int32_t* gamma = plan[round % 10];
    bool fits = true;
    for (size_t i = 0; i < seqs.size(); ++i) fits = fits && seqs[i].emitted + gamma[i] + 1 <= seqs[i].target.size();
    if (!fits) break;
    std::vector<DraftItem> items;
    for (size_t i = 0; i < seqs.size(); ++i)
      items.push_back({static_cast<RequestId>(i), seqs[i].appended, gamma[i], cpu::SamplingParams{}, &rng});
    const int forwards_before = counted->forwards;
    std::vector<Proposal> got;
    mixed.propose(items, got);
    const bool all_off = std::all_of(gamma, gamma + 4, [](int32_t g) { return g == 0; });
    if (all_off) {
      EXPECT_EQ(counted->forwards, forwards_before) << "round " << round << ": speculation off ran the draft model";
      ++off_rounds;
    }
    if (round == 1) {
      // The first drafts after an all-off round 0: each drafting sequence's catch-up is
      // its prompt and round 0's token; those longer than a chain window (64 tokens here)
      // are prefilled together, one forward per 64-token chunk, then the 5-step chain.
      int passes = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        const auto feed = static_cast<int>(seqs[i].prompt.size()) + 1;
        if (gamma[i] > 0 && feed > 64) passes = std::max(passes, (feed - 1 + 63) / 64);
      }
      EXPECT_EQ(counted->forwards - forwards_before, passes + 5);
    }
    mixed.after_propose();
    ASSERT_NO_THROW(mixed.kv().check_invariants()) << "round " << round;
    for (size_t i = 0; i < seqs.size(); ++i) {
      std::vector<Proposal> want;
      alone[i]->propose(std::span(&items[i], 1), want);
      ASSERT_EQ(got[i].tokens.size(), static_cast<size_t>(gamma[i])) << "round " << round << ", sequence " << i;
      ASSERT_EQ(got[i].tokens, want[0].tokens) << "round " << round << ", sequence " << i;
      verify(seqs[i], got[i].tokens);
    }
    ++rounds;
  }
  EXPECT_GE(rounds, 20);
  EXPECT_GE(off_rounds, 3);
  for (size_t i = 0; i < seqs.size(); ++i) mixed.finish(static_cast<RequestId>(i));
  const KvOccupancy kv = mixed.kv().occupancy();
  EXPECT_EQ(kv.free_blocks, kv.total_blocks);
}

}  // namespace
}  // namespace specpipe
