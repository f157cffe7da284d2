#include "kvstore/partial_view.h"

#include <algorithm>

namespace specpipe {

int32_t recent_first_block(int32_t length, int32_t verified, int32_t block_size, int32_t window_tokens) {
  const int32_t first_token = std::clamp(std::min(verified, length - window_tokens), 0, length);
  return first_token / block_size;
}

std::optional<std::vector<int32_t>> view_blocks(int32_t length, int32_t verified, int32_t block_size,
                                                const ViewBudget& budget, std::span<const int32_t> retrieved,
                                                ViewRefusal* why) {
  auto refuse = [&](ViewRefusal r) {
    if (why) *why = r;
    return std::nullopt;
  };
  if (why) *why = ViewRefusal::none;
  if (length - verified > budget.buffer_tokens) return refuse(ViewRefusal::buffer_full);
  const int32_t total = (length + block_size - 1) / block_size;
  const int32_t sink = std::min(total, (budget.sink_tokens + block_size - 1) / block_size);
  // The last block is always in view: its tail is the newest K/V, and attention's
  // gather needs every block but the view's last to be full.
  const int32_t recent = std::min(recent_first_block(length, verified, block_size, budget.window_tokens), total - 1);
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b < sink; ++b) blocks.push_back(b);
  for (int32_t b : retrieved)
    if (b >= sink && b < recent) blocks.push_back(b);
  for (int32_t b = std::max(sink, recent); b < total; ++b) blocks.push_back(b);
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  if (static_cast<int32_t>(blocks.size()) >= total) return refuse(ViewRefusal::covers_context);
  return blocks;
}

int32_t view_length(std::span<const int32_t> blocks, int32_t length, int32_t block_size) {
  if (blocks.empty()) return 0;
  return static_cast<int32_t>(blocks.size() - 1) * block_size + (length - blocks.back() * block_size);
}

}  // namespace specpipe
