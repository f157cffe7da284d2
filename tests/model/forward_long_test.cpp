// Long prompts (3,000 and 7,000 tokens), prefilled in chunks, must continue exactly as
// the reference did.
#include <gtest/gtest.h>

#include "pipeline/plain_generator.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

TEST(ForwardLong, ChunkedPrefillReproducesGreedy64) {
  Transformer& m = test::model("demo-target");
  for (const auto& c : test::golden_long()["cases"]) {
    const auto prompt = test::ids(c["prompt_ids"]);
    const auto want = test::ids(c["target_greedy_64"]);
    KvStore kv(m.kv_config(static_cast<int32_t>((prompt.size() + want.size()) / 16 + 2)));
    PlainGenerator gen(m, kv, 512);
    GenerationParams params;
    params.max_tokens = static_cast<int32_t>(want.size());
    params.stop_at_eos = false;
    EXPECT_EQ(gen.generate(prompt, params).tokens, want) << prompt.size() << "-token prompt";
    EXPECT_EQ(kv.free_blocks(), kv.total_blocks());
  }
}

}  // namespace
}  // namespace specpipe
