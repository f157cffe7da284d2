// Speculative sampling is lossless: what it emits follows the target's own sampling
// distribution. Chi-square goodness-of-fit at p = 0.001 with fixed seeds, 200k draws, on
//   (a) a context-independent toy pair over 12 tokens, drafts drawn from q, gamma 1..4;
//   (b) the demo target and draft on a golden prompt, top_k 8;
//   (c) deterministic proposals (q empty);
//   (d) two deliberately wrong corrections, which must fail the same test (its power).
// Every statistic is printed as a "[ chi2 ]" line.
//
// Built twice. The `unit` build (acceptance_test) runs a few seconds: four of the toy
// configurations, (c), (d), and the first token on the demo pair. The `slow` build
// (acceptance_stats_slow_test, SPECPIPE_ACCEPTANCE_STATS_SLOW) runs the whole toy matrix
// and the first two tokens on the demo pair with the target's real rows after each first
// token, which needs a few dozen rows of the models and a few-hundred-token vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/sampling.h"
#include "pipeline/acceptance.h"
#include "pipeline/draft_sampling.h"
#include "pipeline/prefill.h"
#include "tests/support/chi_square.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

constexpr double kAlpha = 1e-3;
constexpr int64_t kSamples = 200'000;

using Rows = std::vector<std::vector<float>>;
using Histogram = std::vector<int64_t>;
/// accept_sampling's signature, so that the wrong variants of (d) can stand in for it.
using Acceptor = std::function<Verdict(std::span<const int32_t>, const TargetRows&,
                                       std::span<const std::vector<float>>, const cpu::SamplingParams&, Rng&)>;

std::string describe(const cpu::SamplingParams& p) {
  return fmt::format("T={} top_k={} top_p={}", p.temperature, p.top_k, p.top_p);
}

std::vector<double> distribution(std::span<const float> logits, const cpu::SamplingParams& params) {
  std::vector<float> p;
  cpu::sampling_distribution(logits, params, p);
  return {p.begin(), p.end()};
}

/// p x p' flattened as [a * vocab + b].
std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> joint;
  joint.reserve(a.size() * b.size());
  for (double x : a)
    for (double y : b) joint.push_back(x * y);
  return joint;
}

/// Prints the statistic and returns the fit.
test::GoodnessOfFit fit(const std::string& what, const Histogram& observed, const std::vector<double>& expected) {
  const test::GoodnessOfFit f = test::chi_square_gof(observed, expected, kAlpha);
  std::printf("[ chi2 ] %-62s %s\n", what.c_str(), f.describe().c_str());
  return f;
}

void expect_fits(const std::string& what, const Histogram& observed, const std::vector<double>& expected) {
  const auto f = fit(what, observed, expected);
  EXPECT_TRUE(f.passes()) << what << ": " << f.describe();
}

void expect_misfits(const std::string& what, const Histogram& observed, const std::vector<double>& expected) {
  const auto f = fit(what, observed, expected);
  EXPECT_FALSE(f.passes()) << what << " should have been caught: " << f.describe();
}

// ---- (d) the wrong variants --------------------------------------------------------

enum class Mistake {
  resample_from_p,   ///< after a rejection, draw from p instead of the residual
  swapped_residual,  ///< norm(max(0, q - p)) instead of norm(max(0, p - q))
};

/// Speculative sampling written out again, right except for the correction after a
/// rejection; it uses the RNG exactly as accept_sampling does.
Verdict accept_with(Mistake mistake, std::span<const int32_t> drafts, const TargetRows& target_row,
                    std::span<const std::vector<float>> q, const cpu::SamplingParams& params, Rng& rng) {
  std::vector<float> p, correction;
  for (size_t i = 0; i <= drafts.size(); ++i) {
    cpu::sampling_distribution(target_row(static_cast<int32_t>(i)), params, p);
    if (i == drafts.size()) return {static_cast<int32_t>(i), cpu::sample_from(p, rng.uniform())};
    const auto d = static_cast<size_t>(drafts[i]);
    std::vector<float> qi = q[i];
    if (qi.empty()) {
      qi.assign(p.size(), 0.0f);
      qi[d] = 1.0f;
    }
    if (rng.uniform() * qi[d] < p[d]) continue;
    correction = p;
    if (mistake == Mistake::swapped_residual)
      for (size_t t = 0; t < p.size(); ++t) correction[t] = std::max(0.0f, qi[t] - p[t]);
    return {static_cast<int32_t>(i), cpu::sample_from(correction, rng.uniform())};
  }
  return {};  // unreachable: the loop returns at i == drafts.size()
}

Acceptor wrong(Mistake mistake) {
  return [mistake](std::span<const int32_t> drafts, const TargetRows& rows, std::span<const std::vector<float>> q,
                   const cpu::SamplingParams& params, Rng& rng) { return accept_with(mistake, drafts, rows, q, params, rng); };
}

const Acceptor kRight = accept_sampling;

// ---- (a), (c), (d): a context-independent toy pair --------------------------------------

/// How the toy drafter proposes.
enum class Proposal {
  sampled,  ///< draft_sample with the request's parameters: q is a real distribution
  greedy,   ///< argmax of the draft logits, q empty
  fixed,    ///< token (3 * position + 1) mod vocab, q empty: often outside top_k's support
};

/// A target and a draft whose logits depend on the position only. Plain sampling from
/// such a target emits independent tokens t_j ~ p_j, so speculation must too. The draft
/// is the target plus noise, like a real draft: the supports overlap but the
/// probabilities differ, so acceptances, rejections and residual draws all happen.
class ToyPair {
 public:
  ToyPair(int32_t vocab, int32_t positions, uint64_t seed) : vocab_(vocab) {
    Rng rng(seed);
    auto uniform = [&](double half_width) { return static_cast<float>(half_width * (2.0 * rng.uniform() - 1.0)); };
    for (int32_t i = 0; i < positions; ++i) {
      std::vector<float> target(static_cast<size_t>(vocab)), draft(static_cast<size_t>(vocab));
      for (size_t t = 0; t < target.size(); ++t) {
        target[t] = uniform(2.5);
        draft[t] = target[t] + uniform(1.5);
      }
      target_.push_back(std::move(target));
      draft_.push_back(std::move(draft));
    }
  }
  int32_t vocab() const { return vocab_; }
  /// Accepted / proposed drafts over every speculate() so far.
  double acceptance_rate() const { return proposed_ ? static_cast<double>(accepted_) / static_cast<double>(proposed_) : 0.0; }
  std::span<const float> target(size_t pos) const { return target_.at(pos); }

  /// Speculative decoding from position 0 until at least `need` tokens are out.
  void speculate(int32_t gamma, const cpu::SamplingParams& params, Proposal proposal, const Acceptor& accept,
                 size_t need, Rng& rng, std::vector<int32_t>& out) {
    out.clear();
    q_.resize(static_cast<size_t>(gamma));
    while (out.size() < need) {
      const size_t start = out.size();
      drafts_.clear();
      for (size_t i = 0; i < static_cast<size_t>(gamma); ++i) {
        const size_t pos = start + i;
        switch (proposal) {
          case Proposal::sampled: drafts_.push_back(draft_sample(draft_.at(pos), params, rng, q_[i])); break;
          case Proposal::greedy: drafts_.push_back(cpu::argmax(draft_.at(pos))); break;
          case Proposal::fixed: drafts_.push_back(static_cast<int32_t>((3 * pos + 1) % static_cast<size_t>(vocab_))); break;
        }
        if (proposal != Proposal::sampled) q_[i].clear();
      }
      const Verdict v = accept(drafts_, [&](int32_t i) { return target(start + static_cast<size_t>(i)); }, q_, params, rng);
      proposed_ += gamma;
      accepted_ += v.accepted;
      out.insert(out.end(), drafts_.begin(), drafts_.begin() + v.accepted);
      out.push_back(v.next_token);
    }
  }

 private:
  int32_t vocab_;
  Rows target_, draft_;
  std::vector<int32_t> drafts_;
  std::vector<std::vector<float>> q_;
  int64_t proposed_ = 0, accepted_ = 0;
};

/// What a toy run emitted: the first token, the first two jointly, and token `gamma`
/// (the bonus position of the first round).
struct ToyHistograms {
  Histogram first, pair, at_gamma;
};

ToyHistograms run_toy(ToyPair& toy, int32_t gamma, const cpu::SamplingParams& params, Proposal proposal,
                      const Acceptor& accept, int64_t samples, uint64_t seed) {
  const auto v = static_cast<size_t>(toy.vocab());
  ToyHistograms h{Histogram(v), Histogram(v * v), Histogram(v)};
  Rng rng(seed);
  std::vector<int32_t> out;
  for (int64_t s = 0; s < samples; ++s) {
    toy.speculate(gamma, params, proposal, accept, static_cast<size_t>(gamma) + 1, rng, out);
    ++h.first[static_cast<size_t>(out[0])];
    ++h.pair[static_cast<size_t>(out[0]) * v + static_cast<size_t>(out[1])];
    ++h.at_gamma[static_cast<size_t>(out[static_cast<size_t>(gamma)])];
  }
  return h;
}

constexpr int32_t kToyVocab = 12;
constexpr uint64_t kToySeed = 2024;

struct ToyCase {
  cpu::SamplingParams params;
  int32_t gamma;
};

std::string name_of(const ToyCase& c) {
  return fmt::format("{} gamma={}", describe(c.params), c.gamma);
}

std::string toy_case_name(const ::testing::TestParamInfo<ToyCase>& param_info) {
  std::string name = name_of(param_info.param);
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

class ToyExactness : public ::testing::TestWithParam<ToyCase> {};

// (a) drafts drawn from q: t_0 ~ p_0, (t_0, t_1) ~ p_0 x p_1, t_gamma ~ p_gamma.
TEST_P(ToyExactness, EmittedTokensFollowTheTarget) {
  const ToyCase& c = GetParam();
  ToyPair toy(kToyVocab, 2 * c.gamma + 2, kToySeed);
  const auto h = run_toy(toy, c.gamma, c.params, Proposal::sampled, kRight, kSamples, 1000 + static_cast<uint64_t>(c.gamma));
  const auto p0 = distribution(toy.target(0), c.params);
  const auto p1 = distribution(toy.target(1), c.params);
  const std::string what = "toy " + name_of(c);
  // Both branches of the test must be exercised for the fit to mean anything.
  std::printf("[ chi2 ] %s: acceptance rate %.3f\n", what.c_str(), toy.acceptance_rate());
  EXPECT_GT(toy.acceptance_rate(), 0.2);
  EXPECT_LT(toy.acceptance_rate(), 0.9);
  expect_fits(what + " first", h.first, p0);
  expect_fits(what + " (first, second)", h.pair, product(p0, p1));
  if (c.gamma >= 2) expect_fits(what + " token gamma", h.at_gamma, distribution(toy.target(static_cast<size_t>(c.gamma)), c.params));
}

#ifndef SPECPIPE_ACCEPTANCE_STATS_SLOW
// Each temperature, each filter and gamma 1..4, in four configurations.
const ToyCase kQuickToyCases[] = {{{0.7f, 0, 1.0f}, 1}, {{1.0f, 0, 1.0f}, 4}, {{0.7f, 0, 0.9f}, 3}, {{1.0f, 5, 1.0f}, 2}};
INSTANTIATE_TEST_SUITE_P(Acceptance, ToyExactness, ::testing::ValuesIn(kQuickToyCases), toy_case_name);

// (c) deterministic proposals (q empty), inside and outside the target's support.
TEST(AcceptanceStats, DeterministicProposalsFollowTheTarget) {
  for (const Proposal proposal : {Proposal::greedy, Proposal::fixed})
    for (const cpu::SamplingParams params : {cpu::SamplingParams{1.0f, 0, 1.0f}, cpu::SamplingParams{0.7f, 5, 1.0f}})
      for (const int32_t gamma : {1, 3}) {
        ToyPair toy(kToyVocab, 2 * gamma + 2, kToySeed);
        const auto h = run_toy(toy, gamma, params, proposal, kRight, kSamples, 77);
        const auto p0 = distribution(toy.target(0), params);
        const std::string what = fmt::format("{} proposal {} gamma={}", proposal == Proposal::greedy ? "greedy" : "fixed",
                                             describe(params), gamma);
        expect_fits(what + " first", h.first, p0);
        expect_fits(what + " (first, second)", h.pair, product(p0, distribution(toy.target(1), params)));
      }
}

// (d) the same test catches a wrong correction: it has power.
TEST(AcceptanceStats, WrongCorrectionsFailTheSameTest) {
  for (const Mistake mistake : {Mistake::resample_from_p, Mistake::swapped_residual})
    for (const cpu::SamplingParams params : {cpu::SamplingParams{1.0f, 0, 1.0f}, cpu::SamplingParams{0.7f, 5, 0.9f}}) {
      const char* name = mistake == Mistake::resample_from_p ? "resample from p" : "swapped residual";
      ToyPair toy(kToyVocab, 4, kToySeed);
      const auto sampled = run_toy(toy, 1, params, Proposal::sampled, wrong(mistake), kSamples, 1001);
      expect_misfits(fmt::format("WRONG {}: {} first", name, describe(params)), sampled.first,
                     distribution(toy.target(0), params));
      const auto greedy = run_toy(toy, 1, params, Proposal::greedy, wrong(mistake), kSamples, 77);
      expect_misfits(fmt::format("WRONG {}: greedy proposal {} first", name, describe(params)), greedy.first,
                     distribution(toy.target(0), params));
    }
}

#else
std::vector<ToyCase> all_toy_cases() {
  std::vector<ToyCase> cases;
  for (const float t : {0.7f, 1.0f})
    for (const auto& [k, p] : {std::pair{0, 1.0f}, std::pair{0, 0.9f}, std::pair{5, 1.0f}})
      for (int32_t gamma = 1; gamma <= 4; ++gamma) cases.push_back({{t, k, p}, gamma});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(AcceptanceFull, ToyExactness, ::testing::ValuesIn(all_toy_cases()), toy_case_name);
#endif

// ---- (b) the demo pair -------------------------------------------------------------

std::vector<float> last_logits(Transformer& m, const std::vector<int32_t>& context) {
  KvStore kv(m.kv_config(static_cast<int32_t>(context.size() / 16 + 2)));
  const SeqId seq = kv.add_sequence(context);
  Logits logits;
  prefill(m, kv, seq, context, 64, logits);
  const auto row = logits.row(0);
  return {row.begin(), row.end()};
}

/// Golden case 11 ends where both models are unsure (top token about 0.3) and disagree
/// (sum of min(p, q) about 0.35): many tokens in play and many rejections, where most
/// golden prompts end in a near-certain token that would test nothing.
constexpr int kDemoCase = 11;
const cpu::SamplingParams kDemoParams[] = {{0.7f, 8, 1.0f}, {0.7f, 8, 0.9f}, {1.0f, 8, 1.0f}, {1.0f, 8, 0.9f}};

/// Tokens of positive probability in `logits` under any of kDemoParams.
void add_support(std::span<const float> logits, std::vector<int32_t>& ids) {
  for (const auto& params : kDemoParams) {
    std::vector<float> p;
    cpu::sampling_distribution(logits, params, p);
    for (size_t t = 0; t < p.size(); ++t)
      if (p[t] > 0) ids.push_back(static_cast<int32_t>(t));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}

/// The demo target's and draft's logits after a golden prompt (and, for the joint test,
/// after the prompt plus each token either can sample there), restricted to the tokens
/// any of these rows can sample under top_k 8. The restriction changes no probability
/// (top-k keeps the same tokens in the same order and renormalises over them; checked
/// for every row) and turns an 8192-wide softmax into a small one, so 200k draws are cheap.
struct DemoRows {
  std::vector<int32_t> vocab;        ///< restricted id -> model token id
  std::vector<float> target, draft;  ///< after the prompt
  std::map<int32_t, std::vector<float>> target_after, draft_after;  ///< after prompt + x (restricted x)

  explicit DemoRows(bool with_next) {
    Transformer& target_model = test::model("demo-target");
    Transformer& draft_model = test::model("demo-draft");
    const auto prompt = test::ids(test::golden_public()["cases"][kDemoCase]["prompt_ids"]);
    const auto target_full = last_logits(target_model, prompt);
    const auto draft_full = last_logits(draft_model, prompt);
    std::vector<int32_t> next;
    add_support(target_full, next);
    add_support(draft_full, next);
    vocab = next;
    std::map<int32_t, std::pair<std::vector<float>, std::vector<float>>> after_full;
    for (int32_t x : with_next ? next : std::vector<int32_t>{}) {
      auto context = prompt;
      context.push_back(x);
      auto& [t, d] = after_full[x];
      t = last_logits(target_model, context);
      d = last_logits(draft_model, context);
      add_support(t, vocab);
      add_support(d, vocab);
    }
    target = restrict(target_full);
    draft = restrict(draft_full);
    for (const auto& [x, rows] : after_full) {
      const auto local = static_cast<int32_t>(std::lower_bound(vocab.begin(), vocab.end(), x) - vocab.begin());
      target_after[local] = restrict(rows.first);
      draft_after[local] = restrict(rows.second);
    }
  }

  std::vector<float> restrict(const std::vector<float>& row) const {
    std::vector<float> small;
    for (int32_t t : vocab) small.push_back(row[static_cast<size_t>(t)]);
    for (const auto& params : kDemoParams) {
      std::vector<float> p_full, p_small;
      cpu::sampling_distribution(row, params, p_full);
      cpu::sampling_distribution(small, params, p_small);
      for (size_t j = 0; j < vocab.size(); ++j)
        EXPECT_EQ(p_small[j], p_full[static_cast<size_t>(vocab[j])]) << "token " << vocab[j] << ", " << describe(params);
    }
    return small;
  }
};

using PairCounts = std::map<std::pair<int32_t, int32_t>, int64_t>;

/// Speculation with gamma 1 on the demo pair, kSamples times: the histogram of the first
/// token and, with real rows after each first token, the counts of the first two.
void run_demo(const DemoRows& demo, const cpu::SamplingParams& params, const Acceptor& accept, Histogram& first,
              PairCounts* pairs) {
  Rng rng(4242);
  std::vector<std::vector<float>> q(1);
  std::vector<int32_t> d(1);
  first.assign(demo.vocab.size(), 0);
  for (int64_t s = 0; s < kSamples; ++s) {
    d[0] = draft_sample(demo.draft, params, rng, q[0]);
    // Without the rows after the prompt + d, row 1 (read only to draw the bonus token,
    // which is not looked at then) is stood in for by row 0.
    const Verdict round1 = accept(d, [&](int32_t i) {
      return std::span<const float>(i == 0 || !pairs ? demo.target : demo.target_after.at(d[0]));
    }, q, params, rng);
    const int32_t t0 = round1.accepted == 1 ? d[0] : round1.next_token;
    ++first[static_cast<size_t>(t0)];
    if (!pairs) continue;
    int32_t t1 = round1.next_token;
    if (round1.accepted == 0) {
      // A new round after prompt + t0; only its first token is used, so its row 1 is
      // stood in for by its row 0 as above.
      d[0] = draft_sample(demo.draft_after.at(t0), params, rng, q[0]);
      const auto& row = demo.target_after.at(t0);
      const Verdict round2 = accept(d, [&](int32_t) { return std::span<const float>(row); }, q, params, rng);
      t1 = round2.accepted == 1 ? d[0] : round2.next_token;
    }
    ++(*pairs)[{t0, t1}];
  }
}

#ifndef SPECPIPE_ACCEPTANCE_STATS_SLOW
class DemoFirstToken : public ::testing::TestWithParam<cpu::SamplingParams> {};

// (b) gamma 1 on the demo pair with drafts from the draft model's q: the first token
// follows the target's p after the prompt, and resampling from p after a rejection is
// caught on these distributions.
TEST_P(DemoFirstToken, FollowsTheTarget) {
  static const DemoRows demo(false);
  const cpu::SamplingParams params = GetParam();
  const auto p0 = distribution(demo.target, params);
  Histogram first;
  run_demo(demo, params, kRight, first, nullptr);
  expect_fits("demo pair " + describe(params) + " first", first, p0);
  run_demo(demo, params, wrong(Mistake::resample_from_p), first, nullptr);
  expect_misfits("WRONG resample from p: demo pair " + describe(params) + " first", first, p0);
}
#else
class DemoFirstTwoTokens : public ::testing::TestWithParam<cpu::SamplingParams> {};

// (b) as in the unit build, and the first two tokens jointly follow p(x) p(y | prompt + x):
// the second comes from the bonus row after an acceptance and from a fresh round after a
// rejection, each with the target's real logits after the first token. Resampling from p
// after a rejection fails both.
TEST_P(DemoFirstTwoTokens, FollowTheTarget) {
  static const DemoRows demo(true);
  const cpu::SamplingParams params = GetParam();
  const auto p0 = distribution(demo.target, params);
  auto check = [&](const Acceptor& accept, const std::string& what, bool right) {
    Histogram first;
    PairCounts pairs;
    run_demo(demo, params, accept, first, &pairs);
    // One bin per (x, y) of positive probability, then one per pair seen outside those.
    Histogram pair_counts;
    std::vector<double> pair_probs;
    for (size_t x = 0; x < p0.size(); ++x) {
      if (p0[x] <= 0) continue;
      const auto p1 = distribution(demo.target_after.at(static_cast<int32_t>(x)), params);
      for (size_t y = 0; y < p1.size(); ++y) {
        if (p1[y] <= 0) continue;
        const auto seen = pairs.extract({static_cast<int32_t>(x), static_cast<int32_t>(y)});
        pair_counts.push_back(seen ? seen.mapped() : 0);
        pair_probs.push_back(p0[x] * p1[y]);
      }
    }
    for (const auto& [xy, n] : pairs) {
      pair_counts.push_back(n);
      pair_probs.push_back(0.0);
    }
    (right ? expect_fits : expect_misfits)(what + " first", first, p0);
    (right ? expect_fits : expect_misfits)(what + " (first, second)", pair_counts, pair_probs);
  };
  check(kRight, "demo pair " + describe(params), true);
  check(wrong(Mistake::resample_from_p), "WRONG resample from p: demo pair " + describe(params), false);
}
#endif

std::string demo_case_name(const ::testing::TestParamInfo<cpu::SamplingParams>& param_info) {
  return fmt::format("T{}_topp{}", static_cast<int>(param_info.param.temperature * 10),
                     static_cast<int>(param_info.param.top_p * 10));
}

#ifndef SPECPIPE_ACCEPTANCE_STATS_SLOW
INSTANTIATE_TEST_SUITE_P(Acceptance, DemoFirstToken, ::testing::ValuesIn(kDemoParams), demo_case_name);
#else
INSTANTIATE_TEST_SUITE_P(AcceptanceFull, DemoFirstTwoTokens, ::testing::ValuesIn(kDemoParams), demo_case_name);
#endif

}  // namespace
}  // namespace specpipe
