// Acceptance on hand-built windows: greedy verdicts, the draft side, the exact use of the
// RNG stream, the residual after a rejection, and input validation. The statistical
// exactness of speculative sampling is in acceptance_stats_test.cpp.
#include "pipeline/acceptance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/sampling.h"
#include "model/forward_model.h"
#include "pipeline/draft_sampling.h"

namespace specpipe {
namespace {

using Rows = std::vector<std::vector<float>>;

/// A window's rows served from memory; remembers the highest row asked for.
struct Window {
  Rows rows;
  int32_t highest = -1;
  TargetRows fn() {
    return [this](int32_t i) {
      highest = std::max(highest, i);
      return std::span<const float>(rows.at(static_cast<size_t>(i)));
    };
  }
};

/// A row of `vocab` logits whose unique argmax is `best`.
std::vector<float> peaked(int32_t vocab, int32_t best) {
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int32_t t = 0; t < vocab; ++t) row[static_cast<size_t>(t)] = 0.1f * static_cast<float>(t % 3);
  row[static_cast<size_t>(best)] = 5.0f;
  return row;
}

std::vector<float> random_logits(Rng& rng, int32_t vocab) {
  std::vector<float> row(static_cast<size_t>(vocab));
  for (float& l : row) l = static_cast<float>(4.0 * rng.uniform() - 2.0);
  return row;
}

/// Runs `body` and checks it throws Error(invalid_argument) with `needle` in its message.
template <typename Body>
void expect_invalid(Body body, const std::string& needle) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// ---- greedy -------------------------------------------------------------------------

TEST(AcceptGreedy, AllAcceptedTakesTheBonusFromTheLastRow) {
  const std::vector<int32_t> drafts{3, 1, 4};
  Window w{{peaked(8, 3), peaked(8, 1), peaked(8, 4), peaked(8, 6)}};
  const Verdict v = accept_greedy(drafts, w.fn());
  EXPECT_EQ(v.accepted, 3);
  EXPECT_EQ(v.next_token, 6);
}

TEST(AcceptGreedy, RejectionAtIGivesTheArgmaxOfRowIAndReadsNoFurther) {
  const std::vector<int32_t> drafts{3, 1, 4, 1};
  for (int32_t reject = 0; reject < 4; ++reject) {
    Window w;
    for (int32_t i = 0; i <= 4; ++i) {
      const int32_t best = i < 4 ? drafts[static_cast<size_t>(i)] : 7;
      w.rows.push_back(peaked(8, i == reject ? 5 : best));
    }
    const Verdict v = accept_greedy(drafts, w.fn());
    EXPECT_EQ(v.accepted, reject);
    EXPECT_EQ(v.next_token, 5);
    EXPECT_EQ(w.highest, reject) << "rows after the rejection are never needed";
  }
}

TEST(AcceptGreedy, NoDraftsIsOnePlainDecodingStep) {
  Window w{{peaked(8, 2)}};
  const Verdict v = accept_greedy({}, w.fn());
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.next_token, 2);
  EXPECT_EQ(w.highest, 0);
}

TEST(AcceptGreedy, TiesGoToTheLowestIdAsInPlainDecoding) {
  const std::vector<float> tie{0.0f, 1.0f, 3.0f, 0.5f, 3.0f, 3.0f};
  Window w{{tie, tie}};
  EXPECT_EQ(accept_greedy(std::vector<int32_t>{4}, w.fn()).accepted, 0);
  EXPECT_EQ(accept_greedy(std::vector<int32_t>{4}, w.fn()).next_token, 2);
  const Verdict v = accept_greedy(std::vector<int32_t>{2}, w.fn());
  EXPECT_EQ(v.accepted, 1);
  EXPECT_EQ(v.next_token, 2);
}

// Speculating over a context-independent toy target emits exactly the tokens of plain
// greedy decoding, whatever the drafts are.
TEST(AcceptGreedy, EmitsThePlainGreedySequenceForAnyDrafts) {
  Rng rng(11);
  const int32_t vocab = 10, length = 200;
  Rows target;
  for (int32_t pos = 0; pos < length + 8; ++pos) target.push_back(random_logits(rng, vocab));
  std::vector<int32_t> plain;
  for (int32_t pos = 0; pos < length; ++pos) plain.push_back(cpu::argmax(target[static_cast<size_t>(pos)]));
  for (int32_t gamma = 0; gamma <= 5; ++gamma) {
    std::vector<int32_t> out;
    while (static_cast<int32_t>(out.size()) < length) {
      const size_t start = out.size();
      std::vector<int32_t> drafts;
      for (int32_t i = 0; i < gamma; ++i) {  // right about 70% of the time
        const int32_t right = plain.size() > start + static_cast<size_t>(i) ? plain[start + static_cast<size_t>(i)] : 0;
        drafts.push_back(rng.uniform() < 0.7 ? right : static_cast<int32_t>(rng.uniform() * vocab));
      }
      const Verdict v = accept_greedy(drafts, [&](int32_t i) {
        return std::span<const float>(target[start + static_cast<size_t>(i)]);
      });
      out.insert(out.end(), drafts.begin(), drafts.begin() + v.accepted);
      out.push_back(v.next_token);
    }
    out.resize(static_cast<size_t>(length));
    EXPECT_EQ(out, plain) << "gamma " << gamma;
  }
}

// ---- the draft side -----------------------------------------------------------------

TEST(DraftSample, GreedyIsTheArgmaxWithNoDistributionAndNoDraw) {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f};
  std::vector<float> q{1.0f, 2.0f};
  Rng rng(5), fresh(5);
  EXPECT_EQ(draft_sample(logits, {0.0f, 0, 1.0f}, rng, q), 1);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(rng.next(), fresh.next()) << "greedy drafting must not consume the RNG stream";
}

TEST(DraftSample, SampledDraftKeepsItsDistributionAndUsesOneUniform) {
  Rng logits_rng(3);
  const auto logits = random_logits(logits_rng, 12);
  const cpu::SamplingParams params{0.8f, 6, 0.9f};
  std::vector<float> want;
  cpu::sampling_distribution(logits, params, want);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Rng rng(seed), ref(seed);
    std::vector<float> q;
    const int32_t token = draft_sample(logits, params, rng, q);
    EXPECT_EQ(q, want);
    EXPECT_EQ(token, cpu::sample_from(want, ref.uniform()));
    EXPECT_GT(q[static_cast<size_t>(token)], 0.0f);
    EXPECT_EQ(rng.next(), ref.next());
  }
}

TEST(DraftSample, RejectsBadInput) {
  Rng rng(1);
  std::vector<float> q;
  expect_invalid([&] { draft_sample({}, {1.0f, 0, 1.0f}, rng, q); }, "empty");
  const std::vector<float> logits{1.0f, 2.0f};
  expect_invalid([&] { draft_sample(logits, {-1.0f, 0, 1.0f}, rng, q); }, "temperature");
}

// ---- sampling: the RNG stream and the residual ---------------------------------------

// One uniform per accept test, then one for the correction or the bonus, nothing else:
// the contract that makes a seed reproduce a request across implementations.
TEST(AcceptSampling, UsesOneUniformPerTestAndOneForTheFinalDraw) {
  const int32_t vocab = 9;
  const cpu::SamplingParams params{1.0f, 0, 1.0f};
  Rng setup(21);
  int outcomes[5] = {};
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const int32_t gamma = static_cast<int32_t>(seed % 5);
    Rows rows;
    for (int32_t i = 0; i <= gamma; ++i) rows.push_back(random_logits(setup, vocab));
    std::vector<int32_t> drafts;
    std::vector<std::vector<float>> q(static_cast<size_t>(gamma));
    for (int32_t i = 0; i < gamma; ++i) {
      const auto draft_logits = random_logits(setup, vocab);
      // Every third window proposes deterministically (empty q rows).
      drafts.push_back(seed % 3 == 0 ? cpu::argmax(draft_logits)
                                     : draft_sample(draft_logits, params, setup, q[static_cast<size_t>(i)]));
    }
    Window w{rows};
    Rng rng(seed), ref(seed);
    const Verdict v = accept_sampling(drafts, w.fn(), q, params, rng);
    ASSERT_GE(v.accepted, 0);
    ASSERT_LE(v.accepted, gamma);
    ++outcomes[v.accepted];
    const int32_t draws = v.accepted < gamma ? v.accepted + 2 : gamma + 1;
    for (int32_t i = 0; i < draws; ++i) ref.uniform();
    EXPECT_EQ(rng.next(), ref.next()) << "seed " << seed << ", " << v.accepted << " of " << gamma;
    EXPECT_EQ(w.highest, v.accepted);
  }
  EXPECT_GT(outcomes[0], 0);
  EXPECT_GT(outcomes[2], 0);
}

// p = (.5, .5, 0, 0) and a draft of token 0 with q(0) = 1: accepted half the time, and
// after a rejection the residual max(0, p - q) = (0, .5, 0, 0) leaves only token 1.
TEST(AcceptSampling, CorrectionComesFromTheResidualOnly) {
  const std::vector<float> logits{0.0f, 0.0f, -3.0f, -3.0f};
  const cpu::SamplingParams params{1.0f, 2, 1.0f};
  const std::vector<int32_t> drafts{0};
  for (const bool point_mass : {false, true}) {
    const std::vector<std::vector<float>> q{point_mass ? std::vector<float>{} : std::vector<float>{1, 0, 0, 0}};
    int accepted = 0;
    for (uint64_t seed = 0; seed < 2000; ++seed) {
      Window w{{logits, logits}};
      Rng rng(seed);
      const Verdict v = accept_sampling(drafts, w.fn(), q, params, rng);
      if (v.accepted == 1) {
        ++accepted;
        EXPECT_TRUE(v.next_token == 0 || v.next_token == 1);
      } else {
        EXPECT_EQ(v.next_token, 1) << "point mass " << point_mass;
      }
    }
    EXPECT_NEAR(accepted / 2000.0, 0.5, 0.05);
  }
}

TEST(AcceptSampling, DraftAtLeastAsLikelyUnderTheTargetIsAlwaysAccepted) {
  Rng setup(8);
  const cpu::SamplingParams params{0.7f, 0, 1.0f};
  Rows rows;
  for (int i = 0; i < 4; ++i) rows.push_back(random_logits(setup, 7));
  std::vector<std::vector<float>> q(3);
  for (size_t i = 0; i < 3; ++i) cpu::sampling_distribution(rows[i], params, q[i]);  // q == p
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::vector<int32_t> drafts;
    for (size_t i = 0; i < 3; ++i) drafts.push_back(cpu::sample_from(q[i], setup.uniform()));
    Window w{rows};
    Rng rng(seed);
    EXPECT_EQ(accept_sampling(drafts, w.fn(), q, params, rng).accepted, 3);
  }
}

TEST(AcceptSampling, DraftOutsideTheTargetSupportIsAlwaysRejected) {
  const std::vector<float> logits{3.0f, 2.0f, 1.0f, 0.0f, -1.0f};
  const cpu::SamplingParams params{1.0f, 2, 1.0f};  // support {0, 1}
  const std::vector<int32_t> drafts{4};
  const std::vector<std::vector<float>> point{{}};
  const std::vector<std::vector<float>> uniform{{0.2f, 0.2f, 0.2f, 0.2f, 0.2f}};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    for (const auto* q : {&point, &uniform}) {
      Window w{{logits, logits}};
      Rng rng(seed);
      const Verdict v = accept_sampling(drafts, w.fn(), *q, params, rng);
      EXPECT_EQ(v.accepted, 0);
      EXPECT_TRUE(v.next_token == 0 || v.next_token == 1) << v.next_token;
    }
  }
}

TEST(AcceptSampling, SameSeedSameVerdictsDifferentSeedDifferentVerdicts) {
  const int32_t vocab = 16, gamma = 4;
  const cpu::SamplingParams params{0.9f, 10, 0.95f};
  Rng setup(99);
  Rows target, draft;
  for (int i = 0; i < 64; ++i) {
    target.push_back(random_logits(setup, vocab));
    draft.push_back(random_logits(setup, vocab));
  }
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> trace;
    std::vector<std::vector<float>> q(gamma);
    for (int round = 0; round < 40; ++round) {
      const size_t start = static_cast<size_t>(round) % 32;
      std::vector<int32_t> drafts;
      for (size_t i = 0; i < gamma; ++i) drafts.push_back(draft_sample(draft[start + i], params, rng, q[i]));
      const Verdict v = accept_sampling(drafts, [&](int32_t i) {
        return std::span<const float>(target[start + static_cast<size_t>(i)]);
      }, q, params, rng);
      trace.push_back(v.accepted);
      trace.push_back(v.next_token);
    }
    return trace;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
}

// ---- validation ---------------------------------------------------------------------

TEST(Acceptance, RejectsMalformedWindows) {
  const std::vector<float> row{0.0f, 1.0f, 2.0f};
  const std::vector<float> short_row{0.0f, 1.0f};
  const cpu::SamplingParams params{1.0f, 0, 1.0f};
  Rng rng(1);
  auto rows = [&](int32_t) { return std::span<const float>(row); };
  auto uneven = [&](int32_t i) { return std::span<const float>(i == 0 ? row : short_row); };
  auto empty = [](int32_t) { return std::span<const float>(); };
  const std::vector<std::vector<float>> q1{{0.2f, 0.3f, 0.5f}};
  const std::vector<int32_t> d1{2};

  expect_invalid([&] { accept_greedy(std::vector<int32_t>{3}, rows); }, "outside the vocabulary");
  expect_invalid([&] { accept_greedy(std::vector<int32_t>{-1}, rows); }, "outside the vocabulary");
  expect_invalid([&] { accept_greedy({}, empty); }, "row 0 is empty");
  expect_invalid([&] { accept_greedy(d1, uneven); }, "target row 1 has 2 logits");

  expect_invalid([&] { accept_sampling(d1, rows, {}, params, rng); }, "1 drafts but 0 draft distributions");
  expect_invalid([&] { accept_sampling(std::vector<int32_t>{7}, rows, q1, params, rng); }, "outside the vocabulary");
  const std::vector<std::vector<float>> wrong_size{{0.5f, 0.5f}};
  expect_invalid([&] { accept_sampling(d1, rows, wrong_size, params, rng); }, "has 2 entries");
  const std::vector<std::vector<float>> never{{0.5f, 0.5f, 0.0f}};
  expect_invalid([&] { accept_sampling(d1, rows, never, params, rng); }, "cannot have been drawn");
  for (const float t : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    expect_invalid([&] { accept_sampling(d1, rows, q1, {t, 0, 1.0f}, rng); }, "temperature");
  expect_invalid([&] { accept_sampling({}, empty, {}, params, rng); }, "row 0 is empty");
  // top_k 1 makes p a point mass on the draft, so row 1 is always read.
  expect_invalid([&] { accept_sampling(d1, uneven, q1, {1.0f, 1, 1.0f}, rng); }, "target row 1 has 2 logits");
}

// Ids-only forwards (a device returns each row's argmax alone): the verdict from the ids
// equals the verdict from the rows, for every way a window of drafts can end.
TEST(AcceptGreedyIds, SameVerdictAsFromTheRows) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> logit(-2.0f, 2.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t vocab = 5, n = trial % 5;
    std::vector<std::vector<float>> rows(static_cast<size_t>(n) + 1, std::vector<float>(vocab));
    for (auto& r : rows)
      for (float& x : r) x = trial % 7 == 0 ? 0.5f : logit(gen);  // some rows all tied
    std::vector<int32_t> drafts;
    for (int32_t i = 0; i < n; ++i)  // mostly the argmax, sometimes not
      drafts.push_back(gen() % 3 == 0 ? static_cast<int32_t>(gen() % vocab) : cpu::argmax(rows[static_cast<size_t>(i)]));
    Logits logits;
    logits.assign(rows);  // one row per "window": window i is row i here
    const Verdict from_rows = accept_greedy(drafts, [&](int32_t i) { return logits.row(static_cast<size_t>(i)); });
    const Verdict from_ids =
        accept_greedy_ids(drafts, [&](int32_t i) { return logits.argmax(static_cast<size_t>(i)); }, vocab);
    EXPECT_EQ(from_ids.accepted, from_rows.accepted);
    EXPECT_EQ(from_ids.next_token, from_rows.next_token);
  }
  expect_invalid([] { accept_greedy_ids(std::vector<int32_t>{7}, [](int32_t) { return 0; }, 5); },
                 "outside the vocabulary [0, 5)");
}

TEST(LogitsIds, AnIdsOnlyForwardAnswersArgmaxAndRefusesRows) {
  Logits logits;
  const std::vector<int32_t> rows_per_window{2, 0, 1};
  const std::span<int32_t> ids = logits.prepare_ids(8, rows_per_window);
  ASSERT_EQ(ids.size(), 3u);
  ids[0] = 4, ids[1] = 7, ids[2] = 1;
  EXPECT_FALSE(logits.has_rows());
  EXPECT_EQ(logits.argmax(0, 1), 7);
  EXPECT_EQ(logits.argmax(2, 0), 1);
  expect_invalid([&] { logits.row(0, 0); }, "ids-only forward");
  expect_invalid([&] { logits.argmax(1, 0); }, "was not computed");
  // Rows again: argmax comes from the row.
  const std::span<float> data = logits.prepare(2, std::vector<int32_t>{1});
  data[0] = 0.5f, data[1] = 0.75f;
  EXPECT_TRUE(logits.has_rows());
  EXPECT_EQ(logits.argmax(0), 1);
}

}  // namespace
}  // namespace specpipe
