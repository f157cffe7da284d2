// ngram_propose: exact proposals on hand-made sequences, config checks, agreement with
// a naive reference on random sequences, and (as a printed sanity figure) how many of
// the demo target's greedy tokens prompt lookup would have drafted correctly.
#include "pipeline/ngram_drafter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "core/error.h"
#include "tests/support/golden.h"

namespace specpipe {
namespace {

using Tokens = std::vector<int32_t>;

Tokens propose(const Tokens& context, int32_t gamma = 8, NgramConfig config = {}) {
  return ngram_propose(context, gamma, config);
}

NgramConfig config(int32_t max_ngram, int32_t min_ngram, int32_t max_proposals) {
  return NgramConfig{max_ngram, min_ngram, max_proposals};
}

TEST(NgramDrafter, LongestMatchingSuffixWinsOverAMoreRecentShorterOne) {
  //                 0  1  2  3  4  5  6  7  8  9
  const Tokens ctx = {7, 8, 9, 1, 2, 5, 9, 3, 8, 9};
  // Suffix "8 9" occurs at 1..2 (followed by 1 2 5); "9" alone last occurs at 6.
  EXPECT_EQ(propose(ctx, 3, config(3, 1, 4)), (Tokens{1, 2, 5}));
  // Limited to unigrams, the most recent "9" wins.
  EXPECT_EQ(propose(ctx, 3, config(1, 1, 4)), (Tokens{3, 8, 9}));
  // Requiring trigrams: "7 8 9" != "3 8 9", so nothing.
  EXPECT_EQ(propose(ctx, 3, config(3, 3, 4)), Tokens{});
}

TEST(NgramDrafter, MostRecentOccurrenceWins) {
  const Tokens ctx = {1, 2, 10, 11, 1, 2, 20, 21, 1, 2};
  EXPECT_EQ(propose(ctx, 2), (Tokens{20, 21}));
}

TEST(NgramDrafter, GammaAndMaxProposalsCap) {
  const Tokens ctx = {1, 2, 3, 4, 5, 6, 7, 8, 1, 2};
  EXPECT_EQ(propose(ctx, 8, config(3, 1, 4)), (Tokens{3, 4, 5, 6}));
  EXPECT_EQ(propose(ctx, 2, config(3, 1, 4)), (Tokens{3, 4}));
  EXPECT_EQ(propose(ctx, 8, config(3, 1, 1)), (Tokens{3}));
  EXPECT_EQ(propose(ctx, 0, config(3, 1, 4)), Tokens{});
  // Proposals stop at the end of the context.
  EXPECT_EQ(propose({1, 2, 3, 1}, 8, config(3, 1, 8)), (Tokens{2, 3, 1}));
}

TEST(NgramDrafter, NoMatchIsEmpty) {
  EXPECT_EQ(propose({}), Tokens{});
  EXPECT_EQ(propose({5}), Tokens{});
  EXPECT_EQ(propose({1, 2, 3, 4}), Tokens{});
  // The suffix itself is not an occurrence.
  EXPECT_EQ(propose({4, 5, 6}, 4, config(3, 3, 4)), Tokens{});
}

TEST(NgramDrafter, RepeatingPatternMayOverlapTheSuffix) {
  // a b a b a: the trigram "a b a" occurs at 0..2, followed by "b a".
  EXPECT_EQ(propose({1, 2, 1, 2, 1}, 4), (Tokens{2, 1}));
  // a a a a: "a a a" occurs at 0..2 (overlapping the suffix 1..3), followed by "a".
  EXPECT_EQ(propose({1, 1, 1, 1}, 4), (Tokens{1}));
  EXPECT_EQ(propose({1, 1}, 4), (Tokens{1}));
}

TEST(NgramDrafter, BadConfigIsRefused) {
  const Tokens ctx = {1, 2, 1};
  const auto code_of = [&](int32_t gamma, NgramConfig bad) {
    try {
      ngram_propose(ctx, gamma, bad);
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::internal;  // nothing thrown
  };
  EXPECT_EQ(code_of(4, config(3, 0, 4)), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of(4, config(1, 2, 4)), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of(4, config(3, 1, 0)), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of(-1, config(3, 1, 4)), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of(4, config(2, 2, 4)), ErrorCode::internal);  // valid: min == max
}

/// The definition, written as plainly as possible: n from longest to shortest, then
/// occurrences from the most recent.
Tokens reference_propose(const Tokens& ctx, int32_t gamma, const NgramConfig& cfg) {
  const auto size = static_cast<int64_t>(ctx.size());
  const int64_t budget = std::min(gamma, cfg.max_proposals);
  for (int64_t n = cfg.max_ngram; n >= cfg.min_ngram; --n) {
    if (n >= size) continue;
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(ctx.begin() + start, ctx.begin() + start + n, ctx.end() - n)) continue;
      const int64_t first = start + n;
      return Tokens(ctx.begin() + first, ctx.begin() + std::min(size, first + budget));
    }
  }
  return {};
}

TEST(NgramDrafter, MatchesTheNaiveReferenceOnRandomSequences) {
  std::mt19937 engine(99);
  for (int round = 0; round < 5000; ++round) {
    Tokens ctx(engine() % 40);
    const uint32_t alphabet = 2 + engine() % 6;  // small alphabets repeat a lot
    for (int32_t& t : ctx) t = static_cast<int32_t>(engine() % alphabet);
    const auto min_ngram = static_cast<int32_t>(1 + engine() % 3);
    const NgramConfig cfg = config(min_ngram + static_cast<int32_t>(engine() % 4), min_ngram,
                                   static_cast<int32_t>(1 + engine() % 6));
    const auto gamma = static_cast<int32_t>(engine() % 8);
    ASSERT_EQ(ngram_propose(ctx, gamma, cfg), reference_propose(ctx, gamma, cfg)) << "round " << round;
  }
}

TEST(NgramDrafter, LongContextStaysCheap) {
  // Worst case for the scan: 8K tokens that never match, plus a repetitive one.
  Tokens distinct(8192);
  for (size_t i = 0; i < distinct.size(); ++i) distinct[i] = static_cast<int32_t>(i);
  Tokens repetitive(8192, 7);
  repetitive.back() = 8;
  repetitive[100] = 8;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(ngram_propose(distinct, 4, {}).empty());
    EXPECT_EQ(ngram_propose(repetitive, 4, {}), (Tokens{7, 7, 7, 7}));
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ngram] 8K-token contexts: %.1f us per call\n", us / 200);
}

TEST(NgramDrafter, GoldenPromptsSanityFigure) {
  // Greedy speculative decoding with prompt lookup as the drafter: each round proposes
  // up to gamma tokens, accepts the prefix that equals the target's greedy tokens, and
  // then takes one target token. Prints the acceptance; asserts only that lookup is
  // useful somewhere.
  const int32_t gamma = 4;
  int64_t best_case_accepted = 0;
  int64_t total_accepted = 0;
  int64_t total_proposed = 0;
  int64_t total_rounds = 0;
  int64_t total_tokens = 0;
  const auto& cases = test::golden_public()["cases"];
  for (size_t c = 0; c < cases.size(); ++c) {
    Tokens context = test::ids(cases[c]["prompt_ids"]);
    const Tokens target = test::ids(cases[c]["target_greedy_96"]);
    int64_t accepted = 0;
    int64_t proposed = 0;
    int64_t rounds = 0;
    for (size_t pos = 0; pos < target.size(); ++rounds) {
      const Tokens drafts = ngram_propose(context, gamma, {});
      proposed += static_cast<int64_t>(drafts.size());
      size_t k = 0;
      while (k < drafts.size() && pos + k < target.size() && drafts[k] == target[pos + k]) ++k;
      accepted += static_cast<int64_t>(k);
      const size_t take = std::min(k + 1, target.size() - pos);  // accepted + the target's token
      context.insert(context.end(), target.begin() + static_cast<std::ptrdiff_t>(pos),
                     target.begin() + static_cast<std::ptrdiff_t>(pos + take));
      pos += take;
    }
    std::printf("[ngram] case %2zu: %3zu prompt tokens, %2lld of %2lld drafts accepted, %2lld rounds for %zu tokens\n",
                c, test::ids(cases[c]["prompt_ids"]).size(), static_cast<long long>(accepted),
                static_cast<long long>(proposed), static_cast<long long>(rounds), target.size());
    best_case_accepted = std::max(best_case_accepted, accepted);
    total_accepted += accepted;
    total_proposed += proposed;
    total_rounds += rounds;
    total_tokens += static_cast<int64_t>(target.size());
  }
  std::printf("[ngram] all cases: %lld of %lld drafts accepted, %.2f tokens per round\n",
              static_cast<long long>(total_accepted), static_cast<long long>(total_proposed),
              static_cast<double>(total_tokens) / static_cast<double>(total_rounds));
  EXPECT_GE(best_case_accepted, 1);
}

}  // namespace
}  // namespace specpipe
