#pragma once
/// Chunked prefill: runs a sequence's uncomputed prompt tokens through the model in
/// windows of at most `chunk` tokens, committing each chunk to the KV store, and returns
/// the logits of the last prompt token. Long prompts never need a [prompt x prompt]
/// buffer, and because the forward is batch invariant the chunk size cannot change a
/// single logit.
#include <cstdint>
#include <span>
#include <vector>

#include "kvstore/kv_store.h"
#include "model/forward_model.h"

namespace specpipe {

/// Prefills `tokens` (the prompt minus what is already committed in `seq`). Throws
/// Error(out_of_capacity) before any work if the KV store cannot hold them. With a host
/// tier (offload) it reserves and commits chunk by chunk, moving the oldest blocks to
/// the host as the pool fills (kvstore/offload_policy.h), so the prompt may be longer
/// than the pool; running out of both tiers then throws out_of_capacity part way, with
/// the chunks before it committed.
void prefill(ForwardModel& model, KvStore& kv, SeqId seq, std::span<const int32_t> tokens,
             int32_t chunk, Logits& last_logits);

/// One sequence's uncomputed prompt tokens, for prefill_windows().
struct PrefillItem {
  SeqId seq;
  std::span<const int32_t> tokens;
};

/// Runs several sequences' prompt tokens through the model together, in chunks of at
/// most `chunk` tokens per sequence per forward, writing K/V through `sink` at positions
/// [length, length + n) of each sequence, which must be reserved. Commits nothing: the
/// caller (the KV-router) commits afterwards. `last_logits` receives one row per item:
/// the logits after its last token. Items must have at least one token.
void prefill_windows(ForwardModel& model, const KvStore& kv, KvWriteSink& sink,
                     std::span<const PrefillItem> items, int32_t chunk, Logits& last_logits);

/// Throws Error(out_of_capacity) with a clear message when `tokens` can never fit in the
/// KV store (pool and host tier) or the model's positions, whatever else is running.
void check_fits(const ForwardModel& model, const KvStore& kv, int64_t tokens);

}  // namespace specpipe
