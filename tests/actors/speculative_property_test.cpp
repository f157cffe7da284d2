// Property: speculative greedy output is identical to plain greedy output, whatever the
// gamma (1..8), the KV block size (1 and 16) and what else shares the batch (1, 4 or 16
// sequences of mixed lengths), for random prompts. Afterwards no KV block is held.
#include <gtest/gtest.h>

#include <random>

#include "pipeline/plain_generator.h"
#include "tests/support/engine.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

constexpr int32_t kNewTokens = 24;

/// 16 prompts of 3 to 120 tokens: slices of the golden Python prompts (drafts are often
/// accepted) and uniformly random token ids (they rarely are).
std::vector<std::vector<int32_t>> random_prompts() {
  std::mt19937 rng(2026);
  std::vector<std::vector<int32_t>> prompts;
  const auto& cases = test::golden_public()["cases"];
  for (int i = 0; i < 16; ++i) {
    const int32_t length = 3 + static_cast<int32_t>(rng() % 118);
    std::vector<int32_t> p;
    if (i % 2 == 0) {
      const auto source = test::ids(cases[static_cast<size_t>(i)]["prompt_ids"]);
      const size_t start = rng() % (source.size() / 2);
      p.assign(source.begin() + static_cast<std::ptrdiff_t>(start),
               source.begin() + static_cast<std::ptrdiff_t>(std::min(source.size(), start + static_cast<size_t>(length))));
    } else {
      for (int32_t t = 0; t < length; ++t) p.push_back(1 + static_cast<int32_t>(rng() % 8191));
    }
    prompts.push_back(std::move(p));
  }
  return prompts;
}

std::vector<std::vector<int32_t>> plain_references(const std::vector<std::vector<int32_t>>& prompts) {
  Transformer& target = test::model("demo-target");
  KvStore kv(target.kv_config(64));
  PlainGenerator plain(target, kv);
  GenerationParams params;
  params.max_tokens = kNewTokens;
  params.stop_at_eos = false;
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) out.push_back(plain.generate(p, params).tokens);
  return out;
}

class SpeculativeProperty : public ::testing::TestWithParam<int32_t> {};

TEST_P(SpeculativeProperty, GreedyEqualsPlainForEveryGammaAndBatch) {
  const int32_t block_size = GetParam();
  static const auto prompts = random_prompts();
  static const auto want = plain_references(prompts);
  actors::Engine engine(test::demo_engine_config(4, block_size));
  size_t rotate = 0;
  for (int32_t gamma = 1; gamma <= 8; ++gamma)
    for (size_t batch : {1u, 4u, 16u}) {
      test::Completions done;
      std::map<RequestId, size_t> prompt_of;
      for (size_t i = 0; i < batch; ++i, ++rotate) {
        const size_t p = rotate % prompts.size();
        prompt_of[engine.submit(test::greedy_request(prompts[p], kNewTokens, gamma), done.sink())] = p;
      }
      for (const auto& [id, c] : done.wait(batch)) {
        ASSERT_EQ(c.reason, FinishReason::length) << c.error;
        EXPECT_EQ(c.tokens, want[prompt_of[id]])
            << "prompt " << prompt_of[id] << ", gamma " << gamma << ", batch " << batch << ", block size " << block_size;
      }
    }
  EXPECT_EQ(engine.kv_occupancy().free_blocks, engine.kv_occupancy().total_blocks);
  EXPECT_EQ(engine.kv_occupancy().sequences, 0u);
  EXPECT_EQ(engine.draft_kv_occupancy().free_blocks, engine.draft_kv_occupancy().total_blocks);
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, SpeculativeProperty, ::testing::Values(1, 16));

}  // namespace
}  // namespace specpipe
