#include "model/layer_prefill_check.h"

#include <algorithm>

#include "core/error.h"

namespace specpipe {

int32_t check_layer_prefill(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv, const ModelConfig& c) {
  const auto n = static_cast<int64_t>(prompt.size());
  if (n == 0 || n > c.max_position_embeddings)
    fail(ErrorCode::invalid_argument, "layer-wise prefill: a prompt of {} tokens (1..{} positions)", n,
         c.max_position_embeddings);
  if (!kv.contains(seq)) fail(ErrorCode::invalid_argument, "layer-wise prefill: no KV sequence {}", seq);
  const int64_t host_tokens = int64_t{kv.host_blocks(seq)} * kv.config().block_size;
  const std::span<const int32_t> committed = kv.tokens(seq);
  if (static_cast<int64_t>(committed.size()) != host_tokens || host_tokens > n ||
      !std::equal(committed.begin(), committed.end(), prompt.begin()))
    fail(ErrorCode::invalid_argument,
         "layer-wise prefill: KV sequence {} must hold only its {} host blocks of the prompt (book_host_prefix), "
         "it has {} committed tokens",
         seq, kv.host_blocks(seq), committed.size());
  if (kv.reserved(seq) < n)
    fail(ErrorCode::invalid_argument, "layer-wise prefill: KV sequence {} reserved {} of the prompt's {} positions",
         seq, kv.reserved(seq), n);
  return static_cast<int32_t>(host_tokens);
}

}  // namespace specpipe
