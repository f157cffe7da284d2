#pragma once
/// What a layer-wise prefill (issue 16 item 5) needs of the KV store's books, on either
/// backend (Transformer::prefill_layerwise, CudaTransformer::prefill_layerwise): the
/// sequence holds only the prompt's first h blocks, booked on the host tier
/// (KvStore::book_host_prefix, h may be 0), and has reserved the whole prompt.
#include <cstdint>
#include <span>

#include "kvstore/kv_store.h"
#include "model/config.h"

namespace specpipe {

/// Returns h * block_size, the prompt's tokens on the host tier. Throws
/// Error(invalid_argument), naming what is wrong, unless the prompt is non-empty and
/// within the model's positions, the sequence exists, its committed tokens are exactly
/// its host blocks' and equal the prompt's first ones, and it has reserved the prompt.
int32_t check_layer_prefill(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv, const ModelConfig& config);

}  // namespace specpipe
