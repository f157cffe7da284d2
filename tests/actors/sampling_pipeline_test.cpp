// Lossless speculative sampling through the real pipeline: the scheduler, the draft
// actor (the draft model samples its drafts and ships their distributions q), the
// verifier (rejection sampling against the target's p) and the per-request RNG streams.
// acceptance_stats_test.cpp checks accept_sampling alone with 200k draws; this checks the
// plumbing around it (q rows matched to their drafts, RNG streams, the bonus and
// correction tokens reaching the client) with fewer draws, in a chi-square test of the
// first two generated tokens against the target's own distribution:
// P(t0, t1) = p(t0 | prompt) * p(t1 | prompt, t0). Gamma 2: the first token is a draft
// or a correction, the second a draft, a correction or the bonus. The first tokens must
// also fail to fit the draft's own distribution (the test can tell the two apart).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "kernels/cpu/sampling.h"
#include "pipeline/prefill.h"
#include "tests/support/chi_square.h"
#include "tests/support/engine.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

/// Golden case 11 ends where both models are unsure and disagree (acceptance_stats_test.cpp):
/// many tokens in play and many rejections.
constexpr int kCase = 11;
constexpr int64_t kRequests = 1500;

std::vector<float> distribution(const char* model, const std::vector<int32_t>& context,
                                const cpu::SamplingParams& params) {
  Transformer& m = test::model(model);
  KvStore kv(m.kv_config(static_cast<int32_t>(context.size() / 16 + 2)));
  const SeqId seq = kv.add_sequence(context);
  Logits logits;
  prefill(m, kv, seq, context, 64, logits);
  std::vector<float> p;
  cpu::sampling_distribution(logits.row(0), params, p);
  return p;
}

TEST(SamplingPipeline, FirstTwoTokensFollowTheTargetDistribution) {
  const cpu::SamplingParams params{1.0f, 8, 1.0f};
  const auto prompt = test::ids(test::golden_public()["cases"][kCase]["prompt_ids"]);
  // The exact joint distribution of the first two tokens under the target alone.
  std::map<std::pair<int32_t, int32_t>, double> want;
  const auto p0 = distribution("demo-target", prompt, params);
  for (size_t t0 = 0; t0 < p0.size(); ++t0) {
    if (p0[t0] <= 0) continue;
    auto context = prompt;
    context.push_back(static_cast<int32_t>(t0));
    const auto p1 = distribution("demo-target", context, params);
    for (size_t t1 = 0; t1 < p1.size(); ++t1)
      if (p1[t1] > 0) want[{static_cast<int32_t>(t0), static_cast<int32_t>(t1)}] = double{p0[t0]} * p1[t1];
  }

  actors::Engine engine(test::demo_engine_config(2));
  std::map<std::pair<int32_t, int32_t>, int64_t> seen;
  constexpr int64_t kWave = 256;  // within the scheduler's queue
  for (int64_t first = 0; first < kRequests; first += kWave) {
    test::Completions done;
    for (int64_t i = first; i < std::min(kRequests, first + kWave); ++i) {
      actors::RequestSpec r = test::greedy_request(prompt, 2, 2);
      r.params.sampling = params;
      r.params.seed = static_cast<uint64_t>(7000 + i);
      engine.submit(std::move(r), done.sink());
    }
    for (const auto& [id, c] : done.wait(static_cast<size_t>(std::min(kWave, kRequests - first)))) {
      ASSERT_EQ(c.tokens.size(), 2u) << c.error;
      ++seen[{c.tokens[0], c.tokens[1]}];
    }
  }
  const SpecStats st = engine.stats();
  EXPECT_GT(st.accepted, 0);
  EXPECT_LT(st.accepted, st.proposed) << "no rejection: the corrections were never tested";

  std::vector<int64_t> observed;
  std::vector<double> probs;
  int64_t outside = 0;
  for (const auto& [pair, p] : want) {
    probs.push_back(p);
    observed.push_back(seen.count(pair) ? seen.at(pair) : 0);
  }
  for (const auto& [pair, n] : seen)
    if (!want.count(pair)) outside += n;
  EXPECT_EQ(outside, 0) << "pairs the target cannot produce under top_k 8";
  const test::GoodnessOfFit fit = test::chi_square_gof(observed, probs);
  EXPECT_TRUE(fit.passes()) << fit.describe() << " over " << want.size() << " pairs, acceptance "
                            << st.acceptance_rate();

  // The test has the power to tell: the first tokens fit the target's p, not the draft's q
  // (the two disagree here), which is what a pipeline passing drafts through unjudged
  // would produce.
  std::vector<int64_t> first(p0.size(), 0);
  for (const auto& [pair, n] : seen) first[static_cast<size_t>(pair.first)] += n;
  const auto q0 = distribution("demo-draft", prompt, params);
  const std::vector<double> p0d(p0.begin(), p0.end()), q0d(q0.begin(), q0.end());
  const test::GoodnessOfFit target_fit = test::chi_square_gof(first, p0d);
  const test::GoodnessOfFit draft_fit = test::chi_square_gof(first, q0d);
  std::printf("pairs vs the target: %s (%zu pairs); first token vs the target: %s; vs the draft: %s; "
              "acceptance %.3f\n",
              fit.describe().c_str(), want.size(), target_fit.describe().c_str(), draft_fit.describe().c_str(),
              st.acceptance_rate());
  EXPECT_TRUE(target_fit.passes()) << "first token vs the target: " << target_fit.describe();
  EXPECT_FALSE(draft_fit.passes()) << "first token vs the draft: " << draft_fit.describe();
}

}  // namespace
}  // namespace specpipe
