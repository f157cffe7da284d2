// ForwardModel::forward_greedy_chain: `steps` greedy tokens per window in one call must be
// exactly what `steps` forward() calls give, token for token and K/V row for K/V row
// (the device backend's chain is checked against its own forwards on the GPU by
// tools/gpu/gpu_generate). The model drafter takes the chain when every sequence drafts
// greedily with one gamma, the step loop otherwise: both must propose the same tokens.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "pipeline/model_drafter.h"
#include "pipeline/prefill.h"
#include "tests/support/limited_model.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

std::vector<int32_t> prompt(int32_t n, int32_t salt) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back((i * 53 + salt * 97 + 11) % 8000 + 10);
  return p;
}

struct Prepared {
  KvStore kv;
  std::vector<SeqId> seqs;
};

/// A store with each prompt but its last token prefilled and committed.
void prepare(Transformer& m, Prepared& p, const std::vector<std::vector<int32_t>>& prompts) {
  Logits logits;
  for (const auto& pr : prompts) {
    const SeqId seq = p.kv.add_sequence({});
    prefill(m, p.kv, seq, std::span<const int32_t>(pr).first(pr.size() - 1), 256, logits);
    p.seqs.push_back(seq);
  }
}

/// Every K/V float of positions [from, to) of `seq`, all layers.
std::vector<float> kv_rows(const KvStore& kv, SeqId seq, int32_t from, int32_t to) {
  const KvStoreConfig& c = kv.config();
  const int64_t ld = int64_t{c.num_kv_heads} * c.head_dim;
  std::vector<float> out;
  for (int32_t layer = 0; layer < c.num_layers; ++layer)
    for (int32_t p = from; p < to; ++p) {
      const int64_t slot = kv.slot(seq, p);
      const float* k = kv.tensors().k(layer) + slot * ld;
      const float* v = kv.tensors().v(layer) + slot * ld;
      out.insert(out.end(), k, k + ld);
      out.insert(out.end(), v, v + ld);
    }
  return out;
}

TEST(GreedyChain, EqualsOneForwardPerTokenInTokensAndKv) {
  Transformer& m = test::model("demo-draft");
  const std::vector<std::vector<int32_t>> prompts{prompt(23, 1), prompt(6, 2)};
  constexpr int32_t kSteps = 5;
  Prepared chained{KvStore(m.kv_config(64, 16)), {}}, stepped{KvStore(m.kv_config(64, 16)), {}};
  prepare(m, chained, prompts);
  prepare(m, stepped, prompts);

  // The chain: each window is the prompt's last token plus one token the catch-up
  // would add, so step 0 has windows of 2 tokens.
  std::vector<std::vector<int32_t>> feeds;
  for (const auto& pr : prompts) feeds.push_back({pr.back(), 42});
  std::vector<ForwardWindow> windows;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SeqId s = chained.seqs[i];
    chained.kv.reserve(s, chained.kv.length(s) + 2 + kSteps - 1);
    windows.push_back({s, feeds[i], LogitsMode::last, -1, true});
  }
  DirectKvWriter chain_writer(chained.kv);
  std::vector<int32_t> ids;
  m.forward_greedy_chain(windows, kSteps, chained.kv, chain_writer, ids);
  ASSERT_EQ(ids.size(), prompts.size() * kSteps);

  // One forward per token, committing as it goes.
  DirectKvWriter writer(stepped.kv);
  Logits logits;
  std::vector<std::vector<int32_t>> expected(prompts.size());
  std::vector<int32_t> fed(prompts.size());
  for (int32_t step = 0; step < kSteps; ++step) {
    std::vector<ForwardWindow> ws;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const SeqId s = stepped.seqs[i];
      const std::span<const int32_t> tokens = step == 0 ? std::span<const int32_t>(feeds[i]) : std::span(&fed[i], 1);
      stepped.kv.reserve(s, stepped.kv.length(s) + static_cast<int32_t>(tokens.size()));
      ws.push_back({s, tokens, LogitsMode::last});
    }
    m.forward(ws, stepped.kv, writer, logits);
    for (size_t i = 0; i < prompts.size(); ++i) {
      stepped.kv.commit(ws[i].seq, ws[i].tokens);
      fed[i] = logits.argmax(i);
      expected[i].push_back(fed[i]);
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int32_t step = 0; step < kSteps; ++step)
      EXPECT_EQ(ids[static_cast<size_t>(step) * prompts.size() + i], expected[i][static_cast<size_t>(step)])
          << "window " << i << " step " << step;
    // Positions of the feed and of the first kSteps - 1 drafts hold the same K/V.
    const auto from = static_cast<int32_t>(prompts[i].size()) - 1;
    const int32_t to = from + 2 + kSteps - 1;
    EXPECT_EQ(kv_rows(chained.kv, chained.seqs[i], from, to), kv_rows(stepped.kv, stepped.seqs[i], from, to))
        << "window " << i;
  }
  // The chain committed nothing: the caller commits what it keeps.
  EXPECT_EQ(chained.kv.length(chained.seqs[0]), static_cast<int32_t>(prompts[0].size()) - 1);
}

TEST(GreedyChain, RefusesAChainPastTheReservation) {
  Transformer& m = test::model("demo-draft");
  Prepared p{KvStore(m.kv_config(64, 16)), {}};
  const auto pr = prompt(10, 3);
  prepare(m, p, {pr});
  const SeqId s = p.seqs[0];
  p.kv.reserve(s, p.kv.length(s) + 3);  // the window and 2 more steps, not 3
  const std::vector<int32_t> feed{pr.back()};
  const ForwardWindow w{s, feed, LogitsMode::last};
  DirectKvWriter writer(p.kv);
  std::vector<int32_t> ids;
  try {
    m.forward_greedy_chain({&w, 1}, 4, p.kv, writer, ids);
    FAIL() << "a chain past the reservation ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("reserved"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(m.forward_greedy_chain({&w, 1}, 3, p.kv, writer, ids));
  EXPECT_EQ(ids.size(), 3u);
}

/// Two rounds of the drafter for two sequences with the given gammas.
std::vector<Proposal> draft_two_rounds(std::vector<int32_t> gammas) {
  Transformer& draft = test::model("demo-draft");
  ModelDrafter drafter(std::make_unique<test::LimitedModel>(draft), 64, 16, /*prefill_chunk=*/256);
  const std::vector<std::vector<int32_t>> contexts{prompt(31, 4), prompt(12, 5)};
  std::vector<Rng> rngs(contexts.size(), Rng(1));
  std::vector<DraftItem> items;
  for (size_t i = 0; i < contexts.size(); ++i) {
    drafter.start(static_cast<RequestId>(i), contexts[i]);
    items.push_back({static_cast<RequestId>(i), {}, gammas[i], {}, &rngs[i]});
  }
  std::vector<Proposal> first, second;
  drafter.propose(items, first);
  // Round two: sequence 0 accepted everything, sequence 1 its first draft only.
  std::vector<std::vector<int32_t>> appended{first[0].tokens, {first[1].tokens[0], 99}};
  appended[0].push_back(7);
  for (size_t i = 0; i < items.size(); ++i) items[i].appended = appended[i];
  drafter.propose(items, second);
  first.insert(first.end(), second.begin(), second.end());
  return first;
}

TEST(GreedyChain, ModelDrafterChainProposesWhatTheStepLoopProposes) {
  const auto chained = draft_two_rounds({4, 4});  // one gamma, greedy: the chain
  const auto looped = draft_two_rounds({4, 5});   // gammas differ: the step loop
  ASSERT_EQ(chained.size(), looped.size());
  for (size_t i = 0; i < chained.size(); ++i) {
    ASSERT_EQ(chained[i].tokens.size(), 4u);
    const std::vector<int32_t> head(looped[i].tokens.begin(), looped[i].tokens.begin() + 4);
    EXPECT_EQ(chained[i].tokens, head) << "proposal " << i;
  }
}

}  // namespace
}  // namespace specpipe
