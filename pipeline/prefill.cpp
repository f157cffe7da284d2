#include "pipeline/prefill.h"

#include <algorithm>

#include "core/error.h"

namespace specpipe {

void check_fits(const Transformer& model, const KvStore& kv, int64_t tokens) {
  const int64_t positions = model.config().max_position_embeddings;
  if (tokens > positions)
    fail(ErrorCode::out_of_capacity, "prompt of {} tokens is longer than the model's {} positions",
         tokens, positions);
  if (tokens > kv.capacity_tokens())
    fail(ErrorCode::out_of_capacity,
         "prompt of {} tokens exceeds the KV capacity of {} tokens ({} blocks of {})", tokens,
         kv.capacity_tokens(), kv.total_blocks(), kv.config().block_size);
}

void prefill(Transformer& model, KvStore& kv, SeqId seq, std::span<const int32_t> tokens,
             int32_t chunk, Logits& last_logits) {
  if (tokens.empty()) fail(ErrorCode::invalid_argument, "prefill: no tokens to compute");
  if (chunk <= 0) fail(ErrorCode::invalid_argument, "prefill: chunk size must be positive");
  // Reserve the whole prompt up front so that running out of blocks fails before work.
  kv.reserve(seq, kv.length(seq) + static_cast<int32_t>(tokens.size()));
  DirectKvWriter writer(kv);
  for (size_t done = 0; done < tokens.size();) {
    const size_t n = std::min(tokens.size() - done, static_cast<size_t>(chunk));
    const bool last = done + n == tokens.size();
    const ForwardWindow window{seq, tokens.subspan(done, n), last ? LogitsMode::last : LogitsMode::none};
    model.forward({&window, 1}, kv, writer, last_logits);
    kv.commit(seq, tokens.subspan(done, n));
    done += n;
  }
}

}  // namespace specpipe
