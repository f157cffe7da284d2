#include "actors/kv_router_actor.h"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/timer.h"
#include "kvstore/offload_policy.h"
#include "pipeline/plugin_kv_writer.h"

namespace specpipe::actors {
namespace {

/// The sequence gives its KV back and the item fails with `why`.
void fail_item(KvStore& kv, AdmitItem& it, const std::string& why) {
  kv.release(it.seq);
  it.seq = -1;
  it.error = why;
}

/// Gives every sequence's SpecPV view copies back to the pool (until its next refresh a
/// sequence's partial views then leave its host-tier blocks out, counted). Returns
/// whether any block came back.
bool drop_view_copies(KvStore& kv) {
  bool any = false;
  for (SeqId seq : kv.sequence_ids())
    if (kv.view_copy_blocks(seq) > 0) {
      kv.drop_view_copies(seq);
      any = true;
    }
  return any;
}

/// Reserves every unfinished item's next prefill pass: the whole rest of its context,
/// or with a host tier the next `chunk` tokens, after moving older blocks to the host
/// when the pool cannot serve it. With a host tier an item the pool cannot serve yet
/// (the blocks that could move are not committed yet) waits a pass while others
/// progress; when none can progress, the waiting ones fail. Returns whether any item
/// has a pass to run.
bool reserve_prefill_pass(KvStore& kv, AdmitBatch& b, int32_t chunk) {
  std::vector<std::pair<AdmitItem*, std::string>> waiting;
  bool progress = false;
  for (AdmitItem& it : b.items) {
    if (it.seq < 0) continue;
    const auto context = static_cast<int32_t>(it.context.size());
    it.prefill_end = kv.host_tier() ? std::min(context, it.prefilled + chunk) : context;
    if (it.prefill_end == it.prefilled) continue;
    try {
      try {
        reserve_offloading(kv, it.seq, it.prefill_end);  // oldest blocks to the host first
      } catch (const Error& e) {
        if (e.code() != ErrorCode::out_of_capacity || !drop_view_copies(kv)) throw;
        reserve_offloading(kv, it.seq, it.prefill_end);  // SpecPV view copies gave their blocks back
      }
      progress = true;
    } catch (const Error& e) {
      if (kv.host_tier() && e.code() == ErrorCode::out_of_capacity) {
        it.prefill_end = it.prefilled;  // nothing this pass
        waiting.emplace_back(&it, e.what());
      } else {
        fail_item(kv, it, e.what());
      }
    } catch (const std::exception& e) {
      fail_item(kv, it, e.what());
    }
  }
  if (!progress)
    for (auto& [it, why] : waiting) fail_item(kv, *it, why);
  return progress;
}

void admit(KvStore& kv, AdmitBatch& b, int32_t chunk) {
  Stopwatch clock;
  for (AdmitItem& it : b.items) {
    try {
      it.seq = kv.add_sequence(it.context, &it.cached);
    } catch (const std::exception& e) {
      it.error = e.what();
      continue;
    }
    it.prefilled = it.cached;
  }
  reserve_prefill_pass(kv, b, chunk);
  b.commit_ms += clock.elapsed_ms();
}

/// Commits the pass the verifier just prefilled. Returns true when some item has more
/// context to prefill (offload: chunk by chunk); that next pass is reserved then.
bool commit_prefill(KvStore& kv, AdmitBatch& b, int32_t chunk) {
  Stopwatch clock;
  for (AdmitItem& it : b.items) {
    if (it.seq < 0) continue;
    if (it.error.empty()) {
      const auto pass = std::span<const int32_t>(it.context).subspan(static_cast<size_t>(it.prefilled));
      kv.commit(it.seq, pass.first(static_cast<size_t>(it.prefill_end - it.prefilled)));
      it.prefilled = it.prefill_end;
    } else {
      kv.release(it.seq);  // a failed prefill keeps nothing
      it.seq = -1;
    }
  }
  const bool more = reserve_prefill_pass(kv, b, chunk);
  b.commit_ms += clock.elapsed_ms();
  return more;
}

void reserve(KvStore& kv, RoundBatch& b) {
  Stopwatch clock;
  for (RoundItem& it : b.items) {
    if (!it.error.empty()) continue;
    try {
      // SpecPV: a full round after partial ones rewrites the K/V they left (never below
      // what a full verification checked, so no prefix-cached block is touched).
      if (it.rewind_to >= 0 && it.rewind_to < kv.length(it.seq)) kv.truncate(it.seq, it.rewind_to);
      const int32_t new_length = kv.length(it.seq) + it.layout().size();
      try {
        reserve_offloading(kv, it.seq, new_length);
      } catch (const Error& e) {
        // SpecPV view copies are a cache: the pool's sequences come first.
        if (e.code() != ErrorCode::out_of_capacity || !drop_view_copies(kv)) throw;
        reserve_offloading(kv, it.seq, new_length);
      }
    } catch (const std::exception& e) {
      it.error = e.what();
    }
  }
  b.times.reserve_ms += clock.elapsed_ms();
}

/// SpecPV over the host tier: after a refresh, the host-tier blocks of the sequence's
/// next views are copied into pool blocks it holds until the next refresh, so its
/// partial rounds read them from the pool. Room for the copies is made as for a reserve
/// (older blocks move to the host; those of the view then need copies too, so the host
/// part is looked at again). A pool that still cannot hold them leaves the sequence
/// without copies: its partial rounds read the whole prefix (counted by the verifier);
/// the round itself does not fail.
void make_view_copies(KvStore& kv, RoundItem& it) {
  std::vector<std::vector<int32_t>> on_host(it.view_sets.size());
  auto host_part = [&] {
    const int32_t h = kv.host_blocks(it.seq);
    int32_t most = 0;
    for (size_t l = 0; l < on_host.size(); ++l) {
      const std::vector<int32_t>& set = it.view_sets[l];
      on_host[l].assign(set.begin(), std::lower_bound(set.begin(), set.end(), h));
      most = std::max(most, static_cast<int32_t>(on_host[l].size()));
    }
    return most;
  };
  try {
    kv.drop_view_copies(it.seq);  // their blocks count as free for the new ones
    for (int pass = 0; pass < 3; ++pass) {
      const int32_t needed = host_part();
      if (needed <= kv.free_blocks() || make_pool_room(kv, needed) == 0) break;
    }
    host_part();
    it.host_view.copy_bytes = kv.set_view_copies(it.seq, on_host);
  } catch (const Error& e) {
    it.host_view.copies_refused = true;
    if (e.code() != ErrorCode::out_of_capacity) spdlog::warn("SpecPV view copies: {}", e.what());
  }
}

/// After the verdict the pool must hold exactly the accepted prefix: recomputed tokens,
/// pending and the k accepted drafts become committed, every other reserved slot is
/// released. If the kv_write strategy could not put the accepted rows in the pool,
/// nothing is committed and the scheduler has them recomputed next round.
void commit_round(KvStore& kv, KvWriteSink& sink, RoundBatch& b) {
  Stopwatch clock;
  std::vector<WindowCommit> verdicts;
  for (RoundItem& it : b.items)
    if (it.error.empty() && it.seq >= 0 && kv.contains(it.seq))
      verdicts.push_back({it.seq, it.layout().committed(it.accepted)});
  const bool in_pool = verdicts.empty() || sink.commit_round(verdicts);
  std::vector<int32_t> accepted;
  for (RoundItem& it : b.items) {
    if (it.seq < 0 || !kv.contains(it.seq)) continue;
    if (it.error.empty()) {
      if (in_pool) {
        accepted.assign(it.recompute.begin(), it.recompute.end());
        accepted.push_back(it.pending);
        const std::vector<int32_t> chain = it.chain();
        accepted.insert(accepted.end(), chain.begin(), chain.begin() + it.accepted);
        kv.commit(it.seq, accepted);
      } else {
        it.kv_redo = true;
      }
    }
    kv.truncate(it.seq, kv.length(it.seq));
    if (it.error.empty() && !it.view_sets.empty()) make_view_copies(kv, it);
  }
  b.times.commit_ms += clock.elapsed_ms();
}

/// The router and the verifier share the kv_write sink (and, through it, a plugin) without
/// a lock, by passing its ownership along with the work: from the moment the router sends
/// a PrefillWork or VerifyWork until the matching Done comes back, the verifier writes
/// through the sink (on its own actor thread, one of several with `actor_threads` > 1)
/// and the router must not touch it. A metrics query that arrives then waits for the sink
/// to come back, so a snapshot never reads counters (or calls the plugin) mid-forward and
/// always covers whole forwards.
struct KvRouterState {
  KvRouterDeps deps;
  bool sink_lent = false;  ///< a PrefillWork or VerifyWork is with the verifier
  std::vector<caf::typed_response_promise<std::string>> metrics_waiting;

  std::string metrics() const {
    nlohmann::json j = kv_write_metrics(*deps.sink);
    if (deps.kv->host_tier()) j["offload"] = offload_metrics(*deps.kv);
    return j.dump();
  }
  /// The verifier is done with the sink: answer the queries that waited for it.
  void sink_returned() {
    sink_lent = false;
    for (auto& rp : metrics_waiting) rp.deliver(metrics());
    metrics_waiting.clear();
  }
};

}  // namespace

kv_router_actor::behavior_type kv_router(kv_router_actor::pointer self, KvRouterDeps deps) {
  auto st = std::make_shared<KvRouterState>();
  st->deps = std::move(deps);
  auto to_verifier = [self, st](auto work) {
    st->sink_lent = true;
    self->send(st->deps.peers->verifier, std::move(work));
  };
  return {
      [st, to_verifier](AdmitWork& w) {
        admit(*st->deps.kv, w.b, st->deps.prefill_chunk);
        to_verifier(PrefillWork{std::move(w.b)});
      },
      [self, st, to_verifier](PrefillDone& w) {
        const bool more = commit_prefill(*st->deps.kv, w.b, st->deps.prefill_chunk);
        st->sink_returned();
        if (more) {
          to_verifier(PrefillWork{std::move(w.b)});  // the next chunk
        } else {
          self->send(st->deps.peers->scheduler, AdmitDone{std::move(w.b)});
        }
      },
      [st, to_verifier](ReserveWork& w) {
        reserve(*st->deps.kv, w.b);
        to_verifier(VerifyWork{std::move(w.b)});
      },
      [self, st](VerifyDone& w) {
        commit_round(*st->deps.kv, *st->deps.sink, w.b);
        st->sink_returned();
        self->send(st->deps.peers->scheduler, RoundDone{std::move(w.b)});
      },
      [st](ReleaseWork& w) {
        KvStore& kv = *st->deps.kv;
        for (SeqId seq : w.seqs)
          if (kv.contains(seq)) kv.release(seq);
      },
      // The block books only: the verifier reads them during a forward but never changes them.
      [st](KvQuery) { return st->deps.kv->occupancy(); },
      [self, st](StrategyMetricsQuery) {
        auto rp = self->make_response_promise<std::string>();
        if (st->sink_lent) st->metrics_waiting.push_back(rp);
        else rp.deliver(st->metrics());
        return rp;
      },
  };
}

}  // namespace specpipe::actors

namespace specpipe::actors {

nlohmann::json offload_metrics(const KvStore& kv) {
  const OffloadStats s = kv.offload_stats();
  const HostKvTier& tier = *kv.host_tier();
  return {{"blocks_to_host", s.blocks_to_host},
          {"bytes_to_host", s.bytes_to_host},
          {"blocks_to_pool", s.blocks_to_pool},
          {"bytes_to_pool", s.bytes_to_pool},
          {"view_layer_copies", s.view_layer_copies},
          {"view_bytes_to_pool", s.view_bytes_to_pool},
          {"host_blocks_used", tier.used_blocks()},
          {"host_blocks_total", tier.total_blocks()},
          {"host_bytes", tier.bytes()}};
}

nlohmann::json kv_write_metrics(const KvWriteSink& sink) {
  const KvWriteStats s = sink.stats();
  nlohmann::json j = {{"rounds", s.rounds},
                      {"pool_rows_written", s.rows_written},
                      {"prefill_rows_written", s.prefill_rows_written},
                      {"pool_bytes_written", s.rows_written * s.row_bytes},
                      {"pool_rows_not_written", s.rows_not_written},
                      {"pool_bytes_not_written", s.rows_not_written * s.row_bytes},
                      {"pool_rows_wasted", s.rows_wasted},
                      {"redo_rounds", s.redo_rounds}};
  if (const auto* plugin = dynamic_cast<const PluginKvWriter*>(&sink)) {
    j["strategy"] = plugin->plugin().name();
    j["plugin"] = plugin->plugin().metrics();
  } else {
    j["strategy"] = "direct";
  }
  return j;
}

}  // namespace specpipe::actors
