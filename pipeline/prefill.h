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
///
/// `layerwise` (offload.prefill: layerwise, the default): with a host tier, a new
/// sequence's prompt longer than the pool can hold now takes the layer-wise prefill
/// (book_layerwise / run_layerwise / finish_layerwise below; a full pool first makes
/// layerwise_room) and falls back to the chunks when the model refuses it. Returns the
/// way it took.
enum class PrefillWay { chunked, layerwise, fallback };
PrefillWay prefill(ForwardModel& model, KvStore& kv, SeqId seq, std::span<const int32_t> tokens, int32_t chunk,
                   Logits& last_logits, bool layerwise = true);

/// Layer-wise prefill with offload (issue 16 item 5; kvstore/README.md, "Layer-wise
/// prefill"), the offload policy's rule: a new prompt of `tokens` positions keeps in the
/// pool what its free (and evictable) blocks hold now; the whole blocks before that go
/// to the host tier up front, the oldest first as `longest` would move them, at least
/// the last token staying in the pool. Returns those host tokens: 0 (prefill chunk by
/// chunk) when the pool holds the prompt, the store has no host tier, the tier lacks
/// the blocks or the pool cannot hold the rest now.
int32_t layerwise_host_tokens(const KvStore& kv, int64_t tokens);

/// The pool room a new prompt of `tokens` positions asks the offload policy for
/// (make_pool_room; in the engine the offload actor's PoolRoomWork), the way a reserve
/// does, before it books the layer-wise prefill: when the pool is full (no free or
/// evictable block) layerwise_host_tokens says chunked, as not even the prompt's last
/// part fits. A prompt longer than the whole pool is the longest sequence there, so
/// under `longest` its own blocks are the ones to go: it asks for the blocks of that
/// last part (1), every whole block before it then booked on the host. Returns 0 (no
/// room to ask for) when the prompt books now, the whole pool could hold it (chunk by
/// chunk, each chunk asking for room: `longest` keeps it whole in the pool), there is
/// no host tier, or the tier lacks the blocks for the prompt and the moves together.
int32_t layerwise_room(const KvStore& kv, int64_t tokens);

/// Books the layer-wise prefill of `tokens` for `seq`, a sequence with nothing committed
/// or reserved: the host prefix (KvStore::book_host_prefix) and the rest reserved in the
/// pool. Returns the host tokens; 0 when the rule says chunked or the pool cannot
/// reserve the rest (nothing booked then).
int32_t book_layerwise(KvStore& kv, SeqId seq, std::span<const int32_t> tokens);

/// Runs a booked layer-wise prefill (ForwardModel::prefill_layerwise). Returns false
/// when the model refused it (Error out_of_capacity or unsupported: nothing written);
/// other errors propagate.
bool run_layerwise(ForwardModel& model, const KvStore& kv, SeqId seq, std::span<const int32_t> tokens,
                   Logits& last_logits);

/// After run_layerwise: when it `ran`, commits the tokens past the host part; else gives
/// the booking back (the sequence empty again, ready for the chunks).
void finish_layerwise(KvStore& kv, SeqId seq, std::span<const int32_t> tokens, bool ran);

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
