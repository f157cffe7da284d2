// The host-side launch plan of cuda::attention (no GPU needed).
#include "kernels/cuda/attention_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace specpipe::cuda {
namespace {

TEST(AttentionPlan, ChunksDependOnKeyCountOnly) {
  EXPECT_EQ(attention_chunks(1), 1);
  EXPECT_EQ(attention_chunks(kAttentionChunkKeys), 1);
  EXPECT_EQ(attention_chunks(kAttentionChunkKeys + 1), 2);
  EXPECT_EQ(attention_chunks(32 * kAttentionChunkKeys), 32);
}

TEST(AttentionPlan, LaysWindowsOutInOrder) {
  const AttentionWindowSpec specs[] = {{0, 5, 0}, {300, 1, 1}, {1000, 9, 20}};
  const AttentionPlan plan = plan_attention(specs);
  ASSERT_EQ(plan.windows.size(), 3u);
  EXPECT_EQ(plan.total_tokens, 15);
  EXPECT_EQ(plan.windows[0].first_token, 0);
  EXPECT_EQ(plan.windows[1].first_token, 5);
  EXPECT_EQ(plan.windows[2].first_token, 6);
  EXPECT_EQ(plan.windows[2].prefix_len, 1000);
  EXPECT_EQ(plan.windows[2].block_table_offset, 20);
  const std::vector<int32_t> expected = {0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  EXPECT_EQ(plan.token_window, expected);
  // The last row of window 2 sees 1009 keys: 8 chunks of 128.
  EXPECT_EQ(plan.max_chunks, 8);
  EXPECT_EQ(plan.workspace_floats(32, 128), int64_t{15} * 32 * 8 * 130);
  // The shortest window: what decides whether the batch takes the prefill kernel.
  EXPECT_EQ(plan.min_window_rows(), 1);
  const AttentionWindowSpec prefill[] = {{0, 1024, 0}, {4096, 17, 64}};
  EXPECT_EQ(plan_attention(prefill).min_window_rows(), 17);
  EXPECT_EQ(plan_attention({}).min_window_rows(), 0);
}

TEST(AttentionPlan, RowChunkingIgnoresWindowSizeAndBatch) {
  // The token at position 300 alone (decode) and as row 2 of a verify window at 298.
  const AttentionWindowSpec decode[] = {{300, 1, 0}};
  const AttentionWindowSpec verify[] = {{10, 3, 0}, {298, 5, 4}};
  const AttentionPlan a = plan_attention(decode), b = plan_attention(verify);
  const AttentionWindowDesc& wa = a.windows[0];
  const AttentionWindowDesc& wb = b.windows[1];
  EXPECT_EQ(attention_chunks(wa.prefix_len + 0 + 1), attention_chunks(wb.prefix_len + 2 + 1));
}

TEST(AttentionPlan, RejectsBadWindows) {
  const AttentionWindowSpec empty[] = {{0, 0, 0}};
  const AttentionWindowSpec negative[] = {{-1, 1, 0}};
  EXPECT_THROW(plan_attention(empty), Error);
  EXPECT_THROW(plan_attention(negative), Error);
  EXPECT_EQ(plan_attention({}).total_tokens, 0);
}

}  // namespace
}  // namespace specpipe::cuda
