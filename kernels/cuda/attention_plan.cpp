#include "kernels/cuda/attention_plan.h"

#include <algorithm>

#include "core/error.h"

namespace specpipe::cuda {

AttentionPlan plan_attention(std::span<const AttentionWindowSpec> windows) {
  AttentionPlan plan;
  plan.windows.reserve(windows.size());
  for (size_t w = 0; w < windows.size(); ++w) {
    const AttentionWindowSpec& s = windows[w];
    if (s.n < 1 || s.prefix_len < 0 || s.block_table_offset < 0)
      fail(ErrorCode::invalid_argument,
           "attention plan: window {} has n = {}, prefix_len = {}, block_table_offset = {}", w, s.n,
           s.prefix_len, s.block_table_offset);
    plan.windows.push_back({s.prefix_len, plan.total_tokens, s.n, s.block_table_offset});
    plan.token_window.insert(plan.token_window.end(), static_cast<size_t>(s.n), static_cast<int32_t>(w));
    plan.total_tokens += s.n;
    // The window's last row sees the most keys: prefix_len + n.
    plan.max_chunks = std::max(plan.max_chunks, attention_chunks(s.prefix_len + s.n));
  }
  return plan;
}

}  // namespace specpipe::cuda
