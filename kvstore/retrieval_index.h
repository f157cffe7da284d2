#pragma once
/// SpecPV retrieval state of the target's sequences: block summaries kept up to date as
/// blocks fill, and each sequence's retrieved blocks per layer, re-selected on a full
/// verification round from that round's queries (kvstore/block_summaries.h). Owned by
/// the retrieval actor (actors/retrieval_actor.h), which reads the K/V store while the
/// verifier awaits it on a refresh round; it only reads the store.
///
/// Only K/V checked by a full verification are summarised (positions below the caller's
/// `verified` length): K/V written by a partial round were computed over a partial view
/// and are recomputed by the next full round, so a summary never holds them.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "kvstore/block_summaries.h"
#include "kvstore/kv_store.h"

namespace specpipe {

/// Summarises full pool blocks where the pool lives (a device model's pool: on the
/// device, ForwardModel::key_summariser): for every layer l and block pool_blocks[b], the
/// element-wise max and min of its keys into kmax / kmin ([layers][blocks][kv_dim] host
/// floats).
using KeySummariser = std::function<void(std::span<const int32_t> pool_blocks, float* kmax, float* kmin)>;

/// SpecPV retrieval where a device pool lives (ForwardModel::device_retrieval): every
/// sequence's block summaries kept on the device, indexed by the sequence's block index,
/// and a refresh's scoring and top-k done there, so only the chosen block indices cross
/// to the host. The same choice as the host path (BlockSummaries::score, top_blocks) bit
/// for bit. Driven by RetrievalIndex in device mode; calls are ordered on the device's
/// stream (select waits for it).
class DeviceRetrieval {
 public:
  virtual ~DeviceRetrieval() = default;
  /// Blocks [first, first + pool_blocks.size()) of `seq`: the element-wise max and min of
  /// the keys of pool block pool_blocks[i], every layer, computed on the device.
  virtual void summarise(SeqId seq, int32_t first, std::span<const int32_t> pool_blocks) = 0;
  /// Blocks [first, first + n) of `seq` from summaries made on the host (host-tier
  /// blocks: their keys are on the host): kmax / kmin [layers][n][kv_dim] host floats.
  virtual void upload(SeqId seq, int32_t first, int32_t n, const float* kmax, const float* kmin) = 0;
  /// For every layer l: out[l] = top_blocks(scores of blocks [0, blocks), k, first), the
  /// scores those of BlockSummaries::score for the query sums `sums` (a handle a tapped
  /// forward gave, QueryTap::on_device_sums), from the summaries of blocks [0, blocks).
  virtual void select(SeqId seq, int32_t sums, int32_t blocks, int32_t k, int32_t first,
                      std::vector<std::vector<int32_t>>& out) = 0;
  /// Frees `seq`'s summaries.
  virtual void forget(SeqId seq) = 0;
};

class RetrievalIndex {
 public:
  /// `device`: the device retrieval update_on_device / select_on_device use (null: host only).
  explicit RetrievalIndex(SummaryShape shape, std::shared_ptr<DeviceRetrieval> device = {})
      : shape_(shape), device_(std::move(device)) {}

  /// Summarises the full blocks of `seq` below position `verified` not summarised yet:
  /// host-tier blocks from the tier's keys on the host (FP32; the tier's memory must be
  /// current: a device model lands its queued moves first, ForwardModel::land_host_copies),
  /// pool blocks through `summarise` when given (a device pool: only the summaries
  /// cross to the host), else from the keys in the store's host tensors. Blocks the
  /// sequence no longer reaches (it was truncated below them) are forgotten first.
  void update(const KvStore& kv, SeqId seq, int32_t verified, const KeySummariser& summarise = {});
  /// Re-selects `seq`'s retrieved blocks of `layer`: the top `k` by score for the
  /// window's query rows q ([n, num_heads * head_dim], row i at q + i * ld_q), blocks
  /// [first, last) only (outside the sink and the recent region).
  void select(SeqId seq, int32_t layer, const float* q, int32_t n, int64_t ld_q, int32_t num_heads, int32_t k,
              int32_t first, int32_t last);
  /// The same from the queries' sums (QuerySums::of): the same scores, bit for bit.
  void select(SeqId seq, int32_t layer, const QuerySums& sums, int32_t k, int32_t first, int32_t last);
  /// Re-selects `seq`'s retrieved blocks of `layer` by attention mass instead: the top `k`
  /// of blocks [first, last) by `mass` (block_mass_scores of the refresh window's
  /// attention over its whole prefix; blocks past its end are not candidates).
  void select_by_mass(SeqId seq, int32_t layer, std::span<const float> mass, int32_t k, int32_t first, int32_t last);
  /// Device mode (a DeviceRetrieval given): the same as update, the summaries kept on the
  /// device: pool blocks summarised there (DeviceRetrieval::summarise), host-tier blocks
  /// on the host from the tier and uploaded (the tier's memory must be current, as for
  /// update). Blocks the sequence no longer reaches are summarised again when it does.
  void update_on_device(const KvStore& kv, SeqId seq, int32_t verified);
  /// Device mode: every layer's retrieved blocks re-selected on the device from the query
  /// sums `sums` (QueryTap::on_device_sums), as select would from the same sums.
  void select_on_device(SeqId seq, int32_t sums, int32_t k, int32_t first, int32_t last);
  bool on_device() const { return device_ != nullptr; }
  /// Marks `seq`'s selection complete (every layer selected this round).
  void mark_ready(SeqId seq) { entry(seq).ready = true; }
  bool ready(SeqId seq) const;
  /// The retrieved blocks of `layer` (ascending); empty before the first selection.
  std::span<const int32_t> retrieved(SeqId seq, int32_t layer) const;
  /// Blocks summarised (in device mode: on the device).
  int32_t summarised_blocks(SeqId seq) const;
  void forget(SeqId seq);
  /// Forgets every sequence the store no longer holds (released since).
  void forget_all_but(const KvStore& kv);
  /// Refreshes done (every layer of a sequence counts once).
  int64_t refreshes() const { return refreshes_; }

 private:
  struct Entry {
    explicit Entry(SummaryShape s) : summaries(s), selected(static_cast<size_t>(s.num_layers)) {}
    BlockSummaries summaries;
    int32_t device_blocks = 0;                   // device mode: blocks summarised there
    std::vector<std::vector<int32_t>> selected;  // per layer
    bool ready = false;
  };
  Entry& entry(SeqId seq);
  /// Appends the summaries of `seq`'s host-tier blocks [from, to) to `into`, from the tier.
  void add_host_tier_blocks(const KvStore& kv, SeqId seq, int32_t from, int32_t to, BlockSummaries& into) const;

  SummaryShape shape_;
  std::shared_ptr<DeviceRetrieval> device_;
  std::map<SeqId, Entry> seqs_;
  std::vector<float> scores_;
  std::vector<float> kmax_, kmin_;  // a device summariser's answer
  int64_t refreshes_ = 0;
};

}  // namespace specpipe
