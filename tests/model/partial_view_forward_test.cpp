// SpecPV's partial view in the CPU forward (ForwardWindow::view): a view of every block
// gives the full forward's logits bit for bit (attention gathers the same keys in the
// same order from the pool); a strict view (sink, one retrieved block, the recent ones)
// gives other, finite logits; the query tap sees every layer's queries of the window.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kvstore/kv_write_sink.h"
#include "pipeline/prefill.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

struct CountingTap final : QueryTap {
  std::vector<int32_t> layers;
  void on_queries(int32_t layer, const float*, int32_t n, int64_t) override {
    layers.push_back(layer);
    EXPECT_EQ(n, 5);
  }
};

std::vector<float> window_logits(Transformer& m, KvStore& kv, SeqId seq, std::span<const int32_t> window,
                                 const PrefixView* view, QueryTap* tap = nullptr) {
  DirectKvWriter writer(kv);
  Logits logits;
  kv.reserve(seq, kv.length(seq) + static_cast<int32_t>(window.size()));
  ForwardWindow w{seq, window, LogitsMode::all};
  w.view = view;
  w.query_tap = tap;
  m.forward(std::span<const ForwardWindow>(&w, 1), kv, writer, logits);
  kv.truncate(seq, kv.length(seq));  // nothing committed: the next call sees the same prefix
  std::vector<float> rows;
  for (int32_t i = 0; i < logits.rows(0); ++i) rows.insert(rows.end(), logits.row(0, i).begin(), logits.row(0, i).end());
  return rows;
}

TEST(PartialViewForward, WholeViewIsBitIdenticalAndAStrictViewIsNot) {
  Transformer& m = test::model("demo-target");
  const auto prompt = test::ids(test::golden_long()["cases"][0]["prompt_ids"]);
  const std::vector<int32_t> context(prompt.begin(), prompt.begin() + 200);  // 12.5 blocks of 16
  const std::vector<int32_t> window(prompt.begin() + 200, prompt.begin() + 205);
  KvStore kv(m.kv_config(64));
  const SeqId seq = kv.add_sequence({});
  Logits scratch;
  prefill(m, kv, seq, context, 64, scratch);
  const int32_t layers = m.config().num_layers;
  const std::span<const int32_t> table = kv.block_table(seq);

  CountingTap tap;
  const std::vector<float> full = window_logits(m, kv, seq, window, nullptr, &tap);
  EXPECT_EQ(tap.layers.size(), static_cast<size_t>(layers));

  PrefixView all;
  all.pool_blocks.assign(static_cast<size_t>(layers), std::vector<int32_t>(table.begin(), table.begin() + 13));
  all.lengths.assign(static_cast<size_t>(layers), 200);
  EXPECT_EQ(window_logits(m, kv, seq, window, &all), full);

  // Sink block 0, block 5, and the recent blocks 11-12 (the last one partial).
  PrefixView some;
  for (int32_t l = 0; l < layers; ++l) some.pool_blocks.push_back({table[0], table[5], table[11], table[12]});
  some.lengths.assign(static_cast<size_t>(layers), 3 * 16 + 8);
  const std::vector<float> partial = window_logits(m, kv, seq, window, &some);
  ASSERT_EQ(partial.size(), full.size());
  EXPECT_NE(partial, full);
  // Still a sensible distribution over the same vocabulary: finite everywhere.
  for (float x : partial) ASSERT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace specpipe
