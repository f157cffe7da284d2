#include "pipeline/prefill.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "kvstore/offload_policy.h"

namespace specpipe {

void check_fits(const ForwardModel& model, const KvStore& kv, int64_t tokens) {
  const int64_t positions = model.config().max_position_embeddings;
  if (tokens > positions)
    fail(ErrorCode::out_of_capacity, "prompt of {} tokens is longer than the model's {} positions",
         tokens, positions);
  const int64_t host_tokens = kv.host_tier() ? int64_t{kv.host_tier()->total_blocks()} * kv.config().block_size : 0;
  if (tokens > kv.capacity_tokens() + host_tokens)
    fail(ErrorCode::out_of_capacity,
         "prompt of {} tokens exceeds the KV capacity of {} tokens ({} blocks of {}{})", tokens,
         kv.capacity_tokens() + host_tokens, kv.total_blocks(), kv.config().block_size,
         host_tokens ? fmt::format(" in the pool, {} on the host tier", kv.host_tier()->total_blocks()) : "");
}

int32_t layerwise_host_tokens(const KvStore& kv, int64_t tokens) {
  const HostKvTier* tier = kv.host_tier();
  if (!tier || tokens <= 1) return 0;
  const int64_t block = kv.config().block_size;
  const int64_t room = int64_t{kv.free_blocks()} * block;
  if (tokens <= room) return 0;
  // Whole blocks before what the pool holds now, at least the last token left in it.
  const int64_t host_blocks = std::min((tokens - room + block - 1) / block, (tokens - 1) / block);
  if (host_blocks <= 0 || host_blocks > tier->free_blocks()) return 0;
  // The rest must fit the pool now (a pool with no free block: chunk by chunk, the
  // offload policy making room as it goes).
  if (tokens - host_blocks * block > room) return 0;
  return static_cast<int32_t>(host_blocks * block);
}

int32_t layerwise_room(const KvStore& kv, int64_t tokens) {
  const HostKvTier* tier = kv.host_tier();
  // A free block holds the prompt's last part (layerwise_host_tokens books then, or the
  // tier lacks blocks, which no room mends).
  if (!tier || kv.free_blocks() > 0 || tokens <= kv.capacity_tokens()) return 0;
  const int64_t block = kv.config().block_size;
  const int64_t host_blocks = (tokens - 1) / block;
  const int64_t wanted = (tokens - host_blocks * block + block - 1) / block;
  // Each block moved to make the room takes a host block too.
  if (host_blocks + wanted > tier->free_blocks()) return 0;
  return static_cast<int32_t>(wanted);
}

int32_t book_layerwise(KvStore& kv, SeqId seq, std::span<const int32_t> tokens) {
  const int32_t host = layerwise_host_tokens(kv, static_cast<int64_t>(tokens.size()));
  if (host == 0) return 0;
  kv.book_host_prefix(seq, tokens.first(static_cast<size_t>(host)));
  try {
    kv.reserve(seq, static_cast<int32_t>(tokens.size()));
  } catch (const Error& e) {
    kv.truncate(seq, 0);
    if (e.code() != ErrorCode::out_of_capacity) throw;
    return 0;
  }
  return host;
}

bool run_layerwise(ForwardModel& model, const KvStore& kv, SeqId seq, std::span<const int32_t> tokens,
                   Logits& last_logits) {
  try {
    model.prefill_layerwise(seq, tokens, kv, last_logits);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::out_of_capacity && e.code() != ErrorCode::unsupported) throw;
    spdlog::debug("layer-wise prefill of sequence {} refused, chunk by chunk instead: {}", seq, e.what());
    return false;
  }
  return true;
}

void finish_layerwise(KvStore& kv, SeqId seq, std::span<const int32_t> tokens, bool ran) {
  if (!ran) {
    kv.truncate(seq, 0);
    return;
  }
  kv.commit(seq, tokens.subspan(static_cast<size_t>(kv.length(seq))));
}

namespace {

/// book_layerwise, a full pool first making layerwise_room (the engine's kv-router asks
/// the offload actor for it instead: actors/kv_router_actor.cpp).
int32_t book_layerwise_with_room(KvStore& kv, SeqId seq, std::span<const int32_t> tokens) {
  if (const int32_t host = book_layerwise(kv, seq, tokens); host > 0) return host;
  const int32_t room = layerwise_room(kv, static_cast<int64_t>(tokens.size()));
  if (room == 0) return 0;
  make_pool_room(kv, room);
  return book_layerwise(kv, seq, tokens);
}

}  // namespace

PrefillWay prefill(ForwardModel& model, KvStore& kv, SeqId seq, std::span<const int32_t> tokens, int32_t chunk,
                   Logits& last_logits, bool layerwise) {
  if (tokens.empty()) fail(ErrorCode::invalid_argument, "prefill: no tokens to compute");
  if (chunk <= 0) fail(ErrorCode::invalid_argument, "prefill: chunk size must be positive");
  DirectKvWriter writer(kv);
  if (kv.host_tier()) {
    PrefillWay way = PrefillWay::chunked;
    if (layerwise && kv.length(seq) == 0 && kv.reserved(seq) == 0 && book_layerwise_with_room(kv, seq, tokens) > 0) {
      const bool ran = run_layerwise(model, kv, seq, tokens, last_logits);
      finish_layerwise(kv, seq, tokens, ran);
      if (ran) return PrefillWay::layerwise;
      way = PrefillWay::fallback;
    }
    // Offload: chunk by chunk, committed as it goes, so that the oldest blocks can move
    // to the host tier when the pool fills and a prompt may be longer than the pool.
    for (size_t done = 0; done < tokens.size();) {
      const auto n = std::min(tokens.size() - done, static_cast<size_t>(chunk));
      const int32_t end = kv.length(seq) + static_cast<int32_t>(n);
      reserve_offloading(kv, seq, end);
      const PrefillItem item{seq, tokens.subspan(done, n)};
      prefill_windows(model, kv, writer, {&item, 1}, chunk, last_logits);
      kv.commit(seq, item.tokens);
      done += n;
    }
    return way;
  }
  // Reserve the whole prompt up front so that running out of blocks fails before work.
  kv.reserve(seq, kv.length(seq) + static_cast<int32_t>(tokens.size()));
  const PrefillItem item{seq, tokens};
  prefill_windows(model, kv, writer, {&item, 1}, chunk, last_logits);
  kv.commit(seq, tokens);
  return PrefillWay::chunked;
}

}  // namespace specpipe

namespace specpipe {

void prefill_windows(ForwardModel& model, const KvStore& kv, KvWriteSink& sink,
                     std::span<const PrefillItem> items, int32_t chunk, Logits& last_logits) {
  if (chunk <= 0) fail(ErrorCode::invalid_argument, "prefill: chunk size must be positive");
  // Each pass takes the next chunk of every sequence that still has tokens, so all of
  // them advance together (one varlen forward per pass), up to the model's tokens per
  // forward; a sequence's last chunk asks for its last-position logits, which are
  // gathered per item.
  const auto budget = static_cast<size_t>(model.max_forward_tokens());
  chunk = std::min(chunk, model.max_forward_tokens());
  std::vector<size_t> done(items.size(), 0);
  std::vector<std::vector<float>> last(items.size());
  std::vector<ForwardWindow> windows;
  std::vector<size_t> owner;
  Logits logits;
  for (;;) {
    windows.clear();
    owner.clear();
    size_t used = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const auto& tokens = items[i].tokens;
      if (done[i] >= tokens.size()) continue;
      const size_t n = std::min({tokens.size() - done[i], static_cast<size_t>(chunk), budget - used});
      if (n == 0) break;  // this forward is full; the rest go in the next pass
      used += n;
      const bool final_chunk = done[i] + n == tokens.size();
      windows.push_back({items[i].seq, tokens.subspan(done[i], n),
                         final_chunk ? LogitsMode::last : LogitsMode::none,
                         kv.length(items[i].seq) + static_cast<int32_t>(done[i])});
      owner.push_back(i);
      done[i] += n;
    }
    if (windows.empty()) break;
    model.forward(windows, kv, sink, logits);
    for (size_t w = 0; w < windows.size(); ++w)
      if (logits.rows(w) > 0) {
        const auto row = logits.row(w);
        last[owner[w]].assign(row.begin(), row.end());
      }
  }
  last_logits.assign(last);
}

}  // namespace specpipe
