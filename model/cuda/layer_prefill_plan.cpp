#include "model/cuda/layer_prefill_plan.h"

#include <cstring>

#include "model/layer_prefill_check.h"

namespace specpipe::cuda {
namespace {

size_t meta_align(size_t v) { return (v + 15) / 16 * 16; }

/// Appends dense block `slot_block` -> `dst` to `runs`, extending the last run when both
/// sides continue it (a fresh host tier and pool hand blocks out in order: few copies).
void add_block(std::vector<SlotRun>& runs, int32_t slot_block, int32_t dst) {
  if (!runs.empty() && runs.back().slot_first + runs.back().blocks == slot_block &&
      runs.back().dst_first + runs.back().blocks == dst)
    ++runs.back().blocks;
  else
    runs.push_back({slot_block, dst, 1});
}

template <typename T>
void put_array(std::vector<unsigned char>& meta, size_t at, const std::vector<T>& values) {
  std::memcpy(meta.data() + at, values.data(), values.size() * sizeof(T));
}

}  // namespace

LayerPrefillPlan plan_layer_prefill(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv,
                                    const ModelConfig& c, const ForwardGeometry& g) {
  check_store_layout(kv, c, g);
  const int32_t B = g.block_size;
  const int32_t h = check_layer_prefill(seq, prompt, kv, c) / B;
  const auto n = static_cast<int64_t>(prompt.size());

  LayerPrefillPlan p;
  p.tokens = static_cast<int32_t>(n);
  p.chunk = g.max_tokens;
  p.blocks = static_cast<int32_t>((n + B - 1) / B);
  const std::span<const int32_t> table = kv.block_table(seq);
  const std::span<const int32_t> host = kv.host_block_table(seq);
  for (int32_t i = 0; i < p.blocks; ++i)
    add_block(i < h ? p.to_host : p.to_pool, i, i < h ? host[static_cast<size_t>(i)] : table[static_cast<size_t>(i)]);

  const int32_t chunks = p.chunks();
  std::vector<int32_t> positions(static_cast<size_t>(n));
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (int32_t i = 0; i < p.tokens; ++i) positions[static_cast<size_t>(i)] = slots[static_cast<size_t>(i)] = i;
  std::vector<AttentionWindowDesc> windows;
  for (int32_t ci = 0; ci < chunks; ++ci) windows.push_back({ci * p.chunk, 0, p.chunk_rows(ci), 0});
  std::vector<int32_t> ring_table(static_cast<size_t>(p.blocks));
  for (int32_t i = 0; i < p.blocks; ++i) ring_table[static_cast<size_t>(i)] = ring_table_entry(i);
  const std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  const std::vector<int32_t> zeros(static_cast<size_t>(p.chunk), 0);
  const std::vector<int32_t> last_row{p.chunk_rows(chunks - 1) - 1};

  const auto un = static_cast<size_t>(n);
  p.tokens_at = 0;
  p.positions_at = meta_align(p.tokens_at + un * 4);
  p.slots_at = meta_align(p.positions_at + un * 4);
  p.zeros_at = meta_align(p.slots_at + un * 8);
  p.windows_at = meta_align(p.zeros_at + zeros.size() * 4);
  p.table_at = meta_align(p.windows_at + windows.size() * sizeof(AttentionWindowDesc));
  p.last_row_at = meta_align(p.table_at + ring_table.size() * 4);
  p.meta.assign(meta_align(p.last_row_at + 4), 0);
  put_array(p.meta, p.tokens_at, tokens);
  put_array(p.meta, p.positions_at, positions);
  put_array(p.meta, p.slots_at, slots);
  put_array(p.meta, p.zeros_at, zeros);
  put_array(p.meta, p.windows_at, windows);
  put_array(p.meta, p.table_at, ring_table);
  put_array(p.meta, p.last_row_at, last_row);
  return p;
}

}  // namespace specpipe::cuda
