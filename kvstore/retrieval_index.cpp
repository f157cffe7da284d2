#include "kvstore/retrieval_index.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "kvstore/host_tier.h"

namespace specpipe {
namespace {

/// Block-layers (8 KiB of keys each for 2 KV heads of 64 dims, 16 rows) a thread of
/// host_tier_summaries takes at least: below that one thread does it all.
constexpr int64_t kBlockLayersPerThread = 256;

/// The summaries of `seq`'s host-tier blocks [first, first + n) from the tier into kmax /
/// kmin ([layers][n][kv_dim]), the blocks shared out among threads (at 128K tokens of the
/// demo target: 537 MB of keys, one thread's ~0.1 s became the first refresh's largest
/// cost). Each thread summarises whole blocks with BlockSummaries::add_layer_block, so the
/// bits are the host path's whatever the split.
void host_tier_summaries(const KvStore& kv, SeqId seq, const SummaryShape& shape, int32_t first, int32_t n,
                         std::vector<float>& kmax, std::vector<float>& kmin) {
  const HostKvTier& tier = *kv.host_tier();
  const std::span<const int32_t> host = kv.host_block_table(seq);
  const auto d = static_cast<size_t>(shape.kv_dim());
  const auto layers = static_cast<size_t>(shape.num_layers);
  std::vector<const float*> keys(layers);
  for (size_t l = 0; l < layers; ++l) keys[l] = tier.k(static_cast<int32_t>(l));  // throws for a BF16 tier: before any thread
  kmax.resize(layers * static_cast<size_t>(n) * d);
  kmin.resize(kmax.size());
  auto run = [&](int32_t from, int32_t to) {
    BlockSummaries part(shape);
    for (int32_t b = from; b < to; ++b) {
      const int64_t first_slot = int64_t{host[static_cast<size_t>(first + b)]} * shape.block_size;
      for (size_t l = 0; l < layers; ++l)
        part.add_layer_block(static_cast<int32_t>(l), keys[l] + first_slot * tier.slot_stride(), tier.slot_stride());
      part.finish_block();
    }
    for (size_t l = 0; l < layers; ++l) {
      const size_t at = (l * static_cast<size_t>(n) + static_cast<size_t>(from)) * d;
      std::copy_n(part.kmax(static_cast<int32_t>(l), 0), static_cast<size_t>(to - from) * d, kmax.data() + at);
      std::copy_n(part.kmin(static_cast<int32_t>(l), 0), static_cast<size_t>(to - from) * d, kmin.data() + at);
    }
  };
  const int64_t most = std::max<int64_t>(1, std::min<unsigned>(16, std::thread::hardware_concurrency()));
  const auto threads = static_cast<int32_t>(std::clamp<int64_t>(int64_t{n} * shape.num_layers / kBlockLayersPerThread, 1, most));
  if (threads == 1) return run(0, n);
  std::vector<std::thread> pool;
  const int32_t share = (n + threads - 1) / threads;
  for (int32_t from = 0; from < n; from += share) pool.emplace_back(run, from, std::min(n, from + share));
  for (std::thread& t : pool) t.join();
}

}  // namespace

RetrievalIndex::Entry& RetrievalIndex::entry(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) it = seqs_.emplace(seq, Entry(shape_)).first;
  return it->second;
}

void RetrievalIndex::add_host_tier_blocks(const KvStore& kv, SeqId seq, int32_t from, int32_t to,
                                          BlockSummaries& into) const {
  if (from >= to) return;
  const HostKvTier& tier = *kv.host_tier();
  const std::span<const int32_t> host = kv.host_block_table(seq);
  for (int32_t b = from; b < to; ++b) {
    const int64_t first_slot = int64_t{host[static_cast<size_t>(b)]} * shape_.block_size;
    for (int32_t layer = 0; layer < shape_.num_layers; ++layer)
      into.add_layer_block(layer, tier.k(layer) + first_slot * tier.slot_stride(), tier.slot_stride());
    into.finish_block();
  }
}

void RetrievalIndex::update(const KvStore& kv, SeqId seq, int32_t verified, const KeySummariser& summarise) {
  if (!summarise && !kv.tensors().holds_pool())
    fail(ErrorCode::unsupported, "retrieval: the KV pool is on a device and no summariser was given");
  Entry& e = entry(seq);
  const int32_t B = shape_.block_size;
  const int32_t full = std::min(verified, kv.length(seq)) / B;
  e.summaries.truncate(full);
  const std::span<const int32_t> table = kv.block_table(seq);
  // Host-tier blocks (a sequence's oldest) are summarised where they live, on the host:
  // their keys never cross to a device for it.
  add_host_tier_blocks(kv, seq, e.summaries.blocks(), std::min(kv.host_blocks(seq), full), e.summaries);
  if (summarise) {
    const int32_t first = e.summaries.blocks();
    if (first >= full) return;
    const auto n = static_cast<size_t>(full - first);
    const auto d = static_cast<size_t>(shape_.kv_dim());
    kmax_.resize(static_cast<size_t>(shape_.num_layers) * n * d);
    kmin_.resize(kmax_.size());
    summarise(table.subspan(static_cast<size_t>(first), n), kmax_.data(), kmin_.data());
    for (size_t b = 0; b < n; ++b) {
      for (int32_t layer = 0; layer < shape_.num_layers; ++layer) {
        const size_t at = (static_cast<size_t>(layer) * n + b) * d;
        e.summaries.add_layer_summary(layer, kmax_.data() + at, kmin_.data() + at);
      }
      e.summaries.finish_block();
    }
    return;
  }
  const KvTensors& t = kv.tensors();
  for (int32_t b = e.summaries.blocks(); b < full; ++b) {
    const int64_t first_slot = static_cast<int64_t>(table[static_cast<size_t>(b)]) * B;
    for (int32_t layer = 0; layer < shape_.num_layers; ++layer)
      e.summaries.add_layer_block(layer, t.k(layer) + first_slot * t.slot_stride(), t.slot_stride());
    e.summaries.finish_block();
  }
}

void RetrievalIndex::update_on_device(const KvStore& kv, SeqId seq, int32_t verified) {
  if (!device_) fail(ErrorCode::invalid_argument, "retrieval: no device retrieval for update_on_device");
  Entry& e = entry(seq);
  const int32_t full = std::min(verified, kv.length(seq)) / shape_.block_size;
  e.device_blocks = std::min(e.device_blocks, full);
  // Host-tier blocks: summarised on the host from the tier, the summaries uploaded.
  const int32_t on_host = std::min(kv.host_blocks(seq), full);
  if (e.device_blocks < on_host) {
    const int32_t first = e.device_blocks, n = on_host - first;
    host_tier_summaries(kv, seq, shape_, first, n, kmax_, kmin_);
    device_->upload(seq, first, n, kmax_.data(), kmin_.data());
    e.device_blocks = on_host;
  }
  // Pool blocks: summarised on the device from the pool's keys.
  if (e.device_blocks < full) {
    const std::span<const int32_t> table = kv.block_table(seq);
    device_->summarise(seq, e.device_blocks,
                       table.subspan(static_cast<size_t>(e.device_blocks), static_cast<size_t>(full - e.device_blocks)));
    e.device_blocks = full;
  }
}

void RetrievalIndex::select_on_device(SeqId seq, int32_t sums, int32_t k, int32_t first, int32_t last) {
  if (!device_) fail(ErrorCode::invalid_argument, "retrieval: no device retrieval for select_on_device");
  Entry& e = entry(seq);
  device_->select(seq, sums, std::max(0, std::min(last, e.device_blocks)), k, first, e.selected);
  ++refreshes_;
}

void RetrievalIndex::select(SeqId seq, int32_t layer, const float* q, int32_t n, int64_t ld_q, int32_t num_heads,
                            int32_t k, int32_t first, int32_t last) {
  select(seq, layer, QuerySums::of(shape_, q, n, ld_q, num_heads), k, first, last);
}

void RetrievalIndex::select(SeqId seq, int32_t layer, const QuerySums& sums, int32_t k, int32_t first, int32_t last) {
  Entry& e = entry(seq);
  const int32_t blocks = std::min(last, e.summaries.blocks());
  scores_.assign(static_cast<size_t>(std::max(0, e.summaries.blocks())), 0.0f);
  e.summaries.score(layer, sums, scores_);
  e.selected.at(static_cast<size_t>(layer)) =
      top_blocks(std::span<const float>(scores_).first(static_cast<size_t>(std::max(0, blocks))), k, first);
  if (layer == 0) ++refreshes_;
}

void RetrievalIndex::select_by_mass(SeqId seq, int32_t layer, std::span<const float> mass, int32_t k, int32_t first,
                                    int32_t last) {
  const auto blocks = static_cast<size_t>(std::clamp<int64_t>(last, 0, static_cast<int64_t>(mass.size())));
  entry(seq).selected.at(static_cast<size_t>(layer)) = top_blocks(mass.first(blocks), k, first);
  if (layer == 0) ++refreshes_;
}

void RetrievalIndex::forget(SeqId seq) {
  if (seqs_.erase(seq) > 0 && device_) device_->forget(seq);
}

void RetrievalIndex::forget_all_but(const KvStore& kv) {
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    if (kv.contains(it->first)) {
      ++it;
      continue;
    }
    if (device_) device_->forget(it->first);
    it = seqs_.erase(it);
  }
}

bool RetrievalIndex::ready(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it != seqs_.end() && it->second.ready;
}

std::span<const int32_t> RetrievalIndex::retrieved(SeqId seq, int32_t layer) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.selected.at(static_cast<size_t>(layer));
}

int32_t RetrievalIndex::summarised_blocks(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return 0;
  return device_ ? it->second.device_blocks : it->second.summaries.blocks();
}

}  // namespace specpipe
