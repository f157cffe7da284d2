// Offload through the pipeline with the long golden prompts (slow: minutes on 2 cores).
#include <gtest/gtest.h>

#include "tests/actors/offload_support.h"
#include "tests/support/golden.h"

namespace specpipe {
namespace {

// The long golden prompts (3,000 and 7,000 tokens) through a 1,024-token pool: prefilled
// chunk by chunk with the oldest blocks moving to the host tier, then decoded with every
// round streaming them back through the ring.
TEST(OffloadGoldenLong, LongPromptsGamma4) {
  for (const auto& c : test::golden_long()["cases"]) {
    const auto prompt = test::ids(c["prompt_ids"]);
    PipelineConfig config = test::offload_config({"draft_model", DrafterKind::model, false, false});
    config.kv.tokens = 1024;
    config.offload.host_bytes = int64_t{64} << 20;  // 512 blocks: 8,192 tokens
    actors::Engine engine(config);
    const actors::Completion got = engine.generate(test::greedy_request(prompt, 64));
    EXPECT_EQ(got.tokens, test::ids(c["target_greedy_64"])) << prompt.size() << " " << got.error;
    EXPECT_EQ(got.stats.accepted_per_round, c["spec"]["4"]["accepted_per_round"].get<std::vector<int32_t>>());
    test::expect_drained_after_offload(engine);
  }
}

}  // namespace
}  // namespace specpipe
