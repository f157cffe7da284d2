// Property: speculative greedy output is identical to plain greedy output, whatever the
// gamma (1..8), the KV block size (1 and 16) and what else shares the batch (1, 4 or 16
// sequences of mixed lengths), for random prompts. Afterwards no KV block is held.
#include <gtest/gtest.h>

#include "tests/support/engine.h"
#include "tests/support/property_prompts.h"

namespace specpipe {
namespace {

class SpeculativeProperty : public ::testing::TestWithParam<int32_t> {};

TEST_P(SpeculativeProperty, GreedyEqualsPlainForEveryGammaAndBatch) {
  const int32_t block_size = GetParam();
  actors::Engine engine(test::demo_engine_config(4, block_size));
  test::expect_property_matrix_equals_plain(engine, "block size " + std::to_string(block_size));
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, SpeculativeProperty, ::testing::Values(1, 16));

}  // namespace
}  // namespace specpipe
