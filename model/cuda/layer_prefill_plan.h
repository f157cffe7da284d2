#pragma once
/// The host side of a layer-wise prefill (CudaTransformer::prefill_layerwise, issue 16
/// item 5), built without any CUDA call: the prompt's rows cut into chunks of at most
/// max_tokens (one layer launch each), their metadata in one buffer uploaded once, and
/// where each block of a layer's dense slot goes when that layer is done (host tier or
/// pool, runs of consecutive blocks). Unit-tested without a GPU (tests/cuda).
///
/// A layer's K/V of the whole prompt live in a dense slot while the layer runs: row
/// `pos` at slot position pos, block i of the prompt at slot block i, which the chunks'
/// block tables name as ring_table_entry(i). Chunk c's window has prefix_len = its first
/// position: the keys of the chunks before it come from the slot, its own from its qkv
/// rows, as in a chunked prefill (the attention's split-K follows absolute positions, the
/// GEMMs are batch-invariant): the same bits.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cuda/attention_plan.h"
#include "kvstore/kv_store.h"
#include "model/config.h"
#include "model/cuda/forward_plan.h"

namespace specpipe::cuda {

/// Consecutive blocks of a dense slot to consecutive blocks of the host tier or the pool.
struct SlotRun {
  int32_t slot_first, dst_first, blocks;
};

struct LayerPrefillPlan {
  int32_t tokens = 0;  ///< prompt rows (positions [0, tokens))
  int32_t chunk = 0;   ///< rows of one layer launch (all chunks but the last)
  int32_t blocks = 0;  ///< blocks of a dense slot: ceil(tokens / block_size)
  std::vector<SlotRun> to_host;  ///< the sequence's host blocks [0, h)
  std::vector<SlotRun> to_pool;  ///< its pool blocks after them
  /// Metadata bytes, 16-byte aligned arrays: tokens int32 [tokens], positions int32
  /// [tokens], slots int64 [tokens] (= positions), zeros int32 [chunk] (each row's window
  /// within its chunk), windows AttentionWindowDesc [chunks], the block table int32
  /// [blocks] (ring entries), the last row's index in its chunk int32 [1].
  std::vector<unsigned char> meta;
  size_t tokens_at = 0, positions_at = 0, slots_at = 0, zeros_at = 0, windows_at = 0, table_at = 0, last_row_at = 0;

  int32_t chunks() const { return (tokens + chunk - 1) / chunk; }
  int32_t chunk_rows(int32_t c) const { return c + 1 < chunks() ? chunk : tokens - c * chunk; }
};

/// Plans the prefill of `prompt` into `seq` of `kv`. Throws Error(invalid_argument),
/// naming what is wrong, unless the store's layout matches the model and pool of `g`
/// and check_layer_prefill (model/layer_prefill_check.h) passes.
LayerPrefillPlan plan_layer_prefill(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv,
                                    const ModelConfig& config, const ForwardGeometry& g);

}  // namespace specpipe::cuda
