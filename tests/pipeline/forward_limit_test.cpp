// A device model takes a bounded number of tokens per forward
// (ForwardModel::max_forward_tokens). Prefill and the model drafter must split their work
// to stay within it, and, the forward being batch invariant, the split must not change a
// single logit or draft. A wrapper around the real demo models enforces a small limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.h"
#include "pipeline/model_drafter.h"
#include "pipeline/prefill.h"
#include "tests/support/limited_model.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

using test::LimitedModel;

std::vector<int32_t> prompt(int32_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back((i * 37 + salt * 101 + 5) % 8000 + 10);
  return p;
}

std::vector<std::vector<float>> prefill_last_logits(ForwardModel& m, const std::vector<std::vector<int32_t>>& prompts) {
  KvStore kv(m.kv_config(64, 16));
  std::vector<PrefillItem> items;
  for (const auto& p : prompts) {
    const SeqId seq = kv.add_sequence({});
    kv.reserve(seq, static_cast<int32_t>(p.size()));
    items.push_back({seq, p});
  }
  DirectKvWriter writer(kv);
  Logits logits;
  prefill_windows(m, kv, writer, items, /*chunk=*/256, logits);
  std::vector<std::vector<float>> rows;
  for (size_t w = 0; w < logits.windows(); ++w) {
    const auto r = logits.row(w);
    rows.emplace_back(r.begin(), r.end());
  }
  return rows;
}

TEST(ForwardLimit, PrefillSplitsWorkToTheModelsLimitWithIdenticalLogits) {
  Transformer& target = test::model("demo-target");
  const std::vector<std::vector<int32_t>> prompts{prompt(20, 1), prompt(5, 2), prompt(13, 3)};
  LimitedModel unlimited(target, 1 << 20), limited(target, 7);
  const auto expected = prefill_last_logits(unlimited, prompts);
  const auto got = prefill_last_logits(limited, prompts);
  EXPECT_EQ(unlimited.forwards, 1);  // every chunk fits one forward
  EXPECT_EQ(limited.largest, 7u);
  EXPECT_EQ(limited.forwards, 6);    // 38 tokens, 7 a forward
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "prompt " << i;
}

/// Two drafting rounds of four sequences; `largest` receives the largest forward.
std::vector<Proposal> draft_rounds(Transformer& draft, int32_t limit, size_t& largest) {
  auto model = std::make_unique<LimitedModel>(draft, limit);
  LimitedModel& probe = *model;
  ModelDrafter drafter(std::move(model), 64, 16, /*prefill_chunk=*/256);
  std::vector<std::vector<int32_t>> contexts{prompt(30, 4), prompt(9, 5), prompt(41, 6), prompt(2, 7)};
  std::vector<Rng> rngs(contexts.size(), Rng(1));
  std::vector<DraftItem> items;
  for (size_t i = 0; i < contexts.size(); ++i) {
    drafter.start(static_cast<RequestId>(i), contexts[i]);
    items.push_back({static_cast<RequestId>(i), {}, 4, {}, &rngs[i]});
  }
  std::vector<Proposal> first, second;
  drafter.propose(items, first);
  // A second round: each sequence accepted its first two drafts, then a target token.
  std::vector<std::vector<int32_t>> appended;
  for (size_t i = 0; i < contexts.size(); ++i) appended.push_back({first[i].tokens[0], first[i].tokens[1], 77});
  for (size_t i = 0; i < contexts.size(); ++i) items[i].appended = appended[i];
  drafter.propose(items, second);
  first.insert(first.end(), second.begin(), second.end());
  largest = probe.largest;
  return first;
}

TEST(ForwardLimit, ModelDrafterStaysWithinTheLimitWithIdenticalDrafts) {
  Transformer& draft = test::model("demo-draft");
  size_t largest_unlimited = 0, largest = 0;
  const auto expected = draft_rounds(draft, 1 << 20, largest_unlimited);
  const auto got = draft_rounds(draft, 8, largest);
  EXPECT_GT(largest_unlimited, 8u);  // without a limit the first catch-ups share a forward
  EXPECT_LE(largest, 8u);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << "proposal " << i;
    EXPECT_EQ(got[i].tokens.size(), 4u);
  }
}

}  // namespace
}  // namespace specpipe
