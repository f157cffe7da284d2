// Plain decoding: stop conditions, sampling reproducibility, capacity errors, and that
// the KV pool is whole again afterwards, however generation ended.
#include "pipeline/plain_generator.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

std::vector<int32_t> prompt(int i) { return test::ids(test::golden_public()["cases"][i]["prompt_ids"]); }

TEST(PlainGenerator, StopsAtEosOnlyWhenAsked) {
  Transformer& m = test::model("demo-target");
  KvStore kv(m.kv_config(64));
  PlainGenerator gen(m, kv);
  GenerationParams params;
  params.max_tokens = 12;
  const auto greedy = gen.generate(prompt(3), params).tokens;
  ASSERT_EQ(greedy.size(), 12u);
  // Pretend the 5th greedy token is EOS: generation must end right after emitting it.
  params.eos_ids = {greedy[4]};
  const auto stopped = gen.generate(prompt(3), params);
  EXPECT_EQ(stopped.finish, FinishReason::eos);
  ASSERT_GE(stopped.tokens.size(), 1u);
  EXPECT_EQ(stopped.tokens.back(), greedy[4]);
  EXPECT_LE(stopped.tokens.size(), 5u);
  params.stop_at_eos = false;
  EXPECT_EQ(gen.generate(prompt(3), params).tokens, greedy);
  EXPECT_EQ(kv.free_blocks(), kv.total_blocks());
}

TEST(PlainGenerator, SamplingIsReproducibleBySeedAndVariesAcrossSeeds) {
  Transformer& m = test::model("demo-draft");
  KvStore kv(m.kv_config(64));
  PlainGenerator gen(m, kv);
  GenerationParams params;
  params.max_tokens = 40;
  params.stop_at_eos = false;
  params.sampling = {1.0f, 0, 1.0f};
  params.seed = 7;
  const auto a = gen.generate(prompt(0), params).tokens;
  EXPECT_EQ(gen.generate(prompt(0), params).tokens, a);
  params.seed = 8;
  EXPECT_NE(gen.generate(prompt(0), params).tokens, a);
  params.sampling = {0.7f, 20, 0.9f};
  const auto b = gen.generate(prompt(0), params).tokens;
  EXPECT_EQ(gen.generate(prompt(0), params).tokens, b);
}

TEST(PlainGenerator, PromptOverKvCapacityIsAClearErrorAndLosesNothing) {
  Transformer& m = test::model("demo-draft");
  KvStore kv(m.kv_config(4));  // 64 tokens
  PlainGenerator gen(m, kv);
  GenerationParams params;
  try {
    gen.generate(prompt(0), params);  // 217 tokens
    FAIL() << "expected an out_of_capacity error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_capacity);
    EXPECT_NE(std::string(e.what()).find("exceeds the KV capacity"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kv.free_blocks(), kv.total_blocks());
  EXPECT_EQ(kv.num_sequences(), 0u);
}

TEST(PlainGenerator, RunningOutOfBlocksMidDecodeReleasesTheSequence) {
  Transformer& m = test::model("demo-draft");
  KvStore kv(m.kv_config(4));  // 64 tokens: the 44-token prompt fits, 96 more do not
  PlainGenerator gen(m, kv);
  GenerationParams params;
  params.max_tokens = 96;
  params.stop_at_eos = false;
  EXPECT_THROW(gen.generate(prompt(1), params), Error);
  EXPECT_EQ(kv.free_blocks(), kv.total_blocks());
  EXPECT_EQ(kv.num_sequences(), 0u);
}

TEST(PlainGenerator, PrefixCacheHitGivesTheSameTokens) {
  Transformer& m = test::model("demo-target");
  KvStore kv(m.kv_config(64));
  PlainGenerator gen(m, kv);
  GenerationParams params;
  params.max_tokens = 16;
  params.stop_at_eos = false;
  const auto first = gen.generate(prompt(2), params);
  const auto second = gen.generate(prompt(2), params);
  EXPECT_EQ(first.cached_prompt_tokens, 0);
  EXPECT_GT(second.cached_prompt_tokens, 0);
  EXPECT_EQ(first.tokens, second.tokens);
}

TEST(PlainGenerator, RejectsEmptyPromptAndBadLimits) {
  Transformer& m = test::model("demo-draft");
  KvStore kv(m.kv_config(8));
  PlainGenerator gen(m, kv);
  GenerationParams params;
  EXPECT_THROW(gen.generate({}, params), Error);
  params.max_tokens = -1;
  EXPECT_THROW(gen.generate(prompt(1), params), Error);
  params.max_tokens = 4;
  params.sampling.temperature = -1.0f;
  EXPECT_THROW(gen.generate(prompt(1), params), Error);
  EXPECT_EQ(kv.free_blocks(), kv.total_blocks());
}

}  // namespace
}  // namespace specpipe
