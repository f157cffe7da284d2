#include "actors/kv_router_actor.h"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <memory>

#include "actors/offload_actor.h"
#include "actors/stage_clock.h"
#include "core/error.h"
#include "core/timer.h"
#include "pipeline/plugin_kv_writer.h"
#include "pipeline/prefill.h"

namespace specpipe::actors {
namespace {

/// The sequence gives its KV back and the item fails with `why`.
void fail_item(KvStore& kv, AdmitItem& it, const std::string& why) {
  kv.release(it.seq);
  it.seq = -1;
  it.error = why;
}

/// Sets every unfinished item's next prefill pass: the whole rest of its context, or
/// with a host tier the next `chunk` tokens. Returns the pool blocks those passes need
/// (what the offload actor is asked to make room for).
int32_t plan_prefill_pass(KvStore& kv, AdmitBatch& b, int32_t chunk) {
  int32_t wanted = 0;
  for (AdmitItem& it : b.items) {
    if (it.seq < 0) continue;
    const auto context = static_cast<int32_t>(it.context.size());
    if (it.layerwise) {  // booked and reserved whole at admission
      it.prefill_end = context;
      continue;
    }
    it.prefill_end = kv.host_tier() ? std::min(context, it.prefilled + chunk) : context;
    if (it.prefill_end > it.prefilled) wanted += kv.blocks_needed(it.seq, it.prefill_end);
  }
  return wanted;
}

/// Reserves every item's planned prefill pass. With a host tier an item the pool cannot
/// serve yet (the blocks that could move are not committed yet) waits a pass while
/// others progress; when none can progress, the waiting ones fail. Returns whether any
/// item has a pass to run.
bool reserve_prefill_pass(KvStore& kv, AdmitBatch& b) {
  std::vector<std::pair<AdmitItem*, std::string>> waiting;
  bool progress = false;
  for (AdmitItem& it : b.items) {
    if (it.seq < 0 || it.prefill_end == it.prefilled) continue;
    if (it.layerwise) {
      progress = true;
      continue;
    }
    try {
      kv.reserve(it.seq, it.prefill_end);
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

/// Layer-wise prefills (`offload.layerwise_*` metrics): run; refused by the model (then
/// prefilled chunk by chunk); host blocks booked for them (counted in blocks_to_host,
/// which the offload actor did not move); passes whose bookings first asked the offload
/// actor for pool room (a full pool).
struct LayerwiseCounts {
  int64_t prefills = 0, fallbacks = 0, host_blocks = 0, room_requests = 0;
};

void admit(KvStore& kv, AdmitBatch& b) {
  Stopwatch clock;
  for (AdmitItem& it : b.items) {
    try {
      it.seq = kv.add_sequence(it.context, &it.cached);
      it.prefilled = it.cached;
    } catch (const std::exception& e) {
      if (it.seq >= 0 && kv.contains(it.seq)) kv.release(it.seq);
      it.seq = -1;
      it.error = e.what();
      continue;
    }
  }
  b.commit_ms += clock.elapsed_ms();
}

/// offload.prefill `layerwise` (pipeline/prefill.h): books the layer-wise prefill of
/// every new context (nothing cached, prefilled, reserved or refused yet) that is longer
/// than the pool can hold now, its first blocks on the host. Returns the pool blocks to
/// ask the offload actor for (layerwise_room: a full pool) before trying those again.
/// A context that waited a pass may be booked in a later one.
int32_t book_layerwise_items(KvStore& kv, AdmitBatch& b, LayerwiseCounts& counts) {
  Stopwatch clock;
  int32_t room = 0;
  for (AdmitItem& it : b.items) {
    if (it.seq < 0 || it.layerwise || it.layerwise_refused || it.prefilled > 0 || it.context.empty() ||
        kv.reserved(it.seq) > 0)
      continue;
    try {
      const int32_t host = book_layerwise(kv, it.seq, it.context);
      it.layerwise = host > 0;
      counts.host_blocks += host / kv.config().block_size;
      if (host == 0) room += layerwise_room(kv, static_cast<int64_t>(it.context.size()));
    } catch (const std::exception& e) {
      fail_item(kv, it, e.what());
    }
  }
  b.commit_ms += clock.elapsed_ms();
  return room;
}

/// Commits the pass the verifier just prefilled.
void commit_prefill(KvStore& kv, AdmitBatch& b, LayerwiseCounts& counts) {
  Stopwatch clock;
  for (AdmitItem& it : b.items) {
    if (it.seq < 0) continue;
    if (it.error.empty() && it.layerwise) {
      // The whole context ran layer by layer, or the model refused and the booking goes
      // back: the next passes prefill it chunk by chunk from the start.
      const bool ran = !it.layerwise_refused;
      finish_layerwise(kv, it.seq, it.context, ran);
      it.layerwise = false;
      if (ran) {
        ++counts.prefills;
        it.prefilled = it.prefill_end;
      } else {
        ++counts.fallbacks;
        it.prefilled = it.prefill_end = 0;
      }
    } else if (it.error.empty()) {
      const auto pass = std::span<const int32_t>(it.context).subspan(static_cast<size_t>(it.prefilled));
      kv.commit(it.seq, pass.first(static_cast<size_t>(it.prefill_end - it.prefilled)));
      it.prefilled = it.prefill_end;
    } else {
      kv.release(it.seq);  // a failed prefill keeps nothing
      it.seq = -1;
    }
  }
  b.commit_ms += clock.elapsed_ms();
}

/// SpecPV: a full round after partial ones rewrites the K/V they left (never below what
/// a full verification checked, so no prefix-cached block is touched). Returns the pool
/// blocks the round's reserves need then.
int32_t rewind(KvStore& kv, RoundBatch& b) {
  int32_t wanted = 0;
  for (RoundItem& it : b.items) {
    if (!it.error.empty()) continue;
    try {
      if (it.rewind_to >= 0 && it.rewind_to < kv.length(it.seq)) kv.truncate(it.seq, it.rewind_to);
      wanted += kv.blocks_needed(it.seq, kv.length(it.seq) + it.layout().size());
    } catch (const std::exception& e) {
      it.error = e.what();
    }
  }
  return wanted;
}

void reserve(KvStore& kv, RoundBatch& b) {
  Stopwatch clock;
  for (RoundItem& it : b.items) {
    if (!it.error.empty()) continue;
    try {
      kv.reserve(it.seq, kv.length(it.seq) + it.layout().size());
    } catch (const std::exception& e) {
      it.error = e.what();
    }
  }
  b.times.reserve_ms += clock.elapsed_ms();
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
///
/// The store is lent the same way: the verifier reads it during the forward. With
/// micro-batches (scheduler.micro_batches > 1) a round's reserves, an admission batch or a
/// release may arrive meanwhile, or while the router is between the steps of another
/// (awaiting the offload actor): they wait in `held` and run in order once the store is
/// the router's again, so it still has one user at a time. One round at a time never
/// holds anything back.
struct KvRouterState {
  KvRouterDeps deps;
  bool sink_lent = false;  ///< a PrefillWork or VerifyWork is with the verifier
  bool busy = false;       ///< an admission, reserve or commit is between its steps
  std::deque<std::function<void()>> held;
  LayerwiseCounts layerwise;
  /// The offload actor's latest copy event: every forward from now on waits on it.
  CopyFence fence;
  std::vector<caf::typed_response_promise<std::string>> metrics_waiting;
  StageClock stage;

  std::string metrics() const {
    nlohmann::json j = kv_write_metrics(*deps.sink);
    if (deps.kv->host_tier()) {
      j["offload"] = offload_metrics(*deps.kv);
      j["offload"]["layerwise_prefills"] = layerwise.prefills;
      j["offload"]["layerwise_fallbacks"] = layerwise.fallbacks;
      j["offload"]["layerwise_host_blocks"] = layerwise.host_blocks;
      j["offload"]["layerwise_room_requests"] = layerwise.room_requests;
      if (deps.offload_stats)
        j["offload"]["actor"] = offload_actor_metrics(*deps.offload_stats, deps.offload_write_back.get());
    }
    return j.dump();
  }
  /// The verifier is done with the sink: answer the queries that waited for it.
  void sink_returned() {
    sink_lent = false;
    for (auto& rp : metrics_waiting) rp.deliver(metrics());
    metrics_waiting.clear();
  }
  /// Runs `work` now, or once the store is the router's again.
  void run_or_hold(std::function<void()> work) {
    if (sink_lent || busy) held.push_back(std::move(work));
    else work();
  }
  /// An operation ended without lending the store: run what waited for it.
  void done() {
    busy = false;
    while (!sink_lent && !busy && !held.empty()) {
      std::function<void()> work = std::move(held.front());
      held.pop_front();
      work();
    }
  }
};

}  // namespace

kv_router_actor::behavior_type kv_router(kv_router_actor::pointer self, KvRouterDeps deps) {
  auto st = std::make_shared<KvRouterState>();
  st->deps = std::move(deps);
  auto to_verifier = [self, st](auto work) {
    st->busy = false;
    st->sink_lent = true;
    self->send(st->deps.peers->verifier, std::move(work));
  };
  // Runs `then` once the pool has `wanted` free blocks or the offload actor has moved
  // what it could (its answer carries the event after the moves). The router awaits the
  // answer: none of its other messages runs meanwhile, so the store has one writer.
  auto with_room = [self, st](int32_t wanted, std::function<void()> then) {
    const offload_actor& offload = st->deps.peers->offload;
    if (!offload || wanted <= st->deps.kv->free_blocks()) return then();
    self->request(offload, caf::infinite, PoolRoomWork{wanted})
        .await(
            [st, then](PoolRoomDone& done) {
              if (!done.fence.empty()) st->fence = std::move(done.fence);
              then();
            },
            [then](caf::error& err) {
              spdlog::warn("kv-router: the offload actor did not answer: {}", caf::to_string(err));
              then();  // the reserves fail with their own out_of_capacity errors
            });
  };
  // Books the layer-wise prefills (a full pool first asking the offload actor for room
  // for them, as the reserves do), reserves the planned prefill pass, then sends it to
  // the verifier or, when no item has one left, the batch back to the scheduler.
  auto next_pass = [self, st, to_verifier, with_room](std::shared_ptr<AdmitBatch> b) {
    auto reserve_pass = [self, st, to_verifier, with_room, b] {
      const int32_t wanted = plan_prefill_pass(*st->deps.kv, *b, st->deps.prefill_chunk);
      with_room(wanted, [self, st, to_verifier, b] {
        Stopwatch clock;
        const bool more = reserve_prefill_pass(*st->deps.kv, *b);
        b->commit_ms += clock.elapsed_ms();
        if (more) return to_verifier(PrefillWork{std::move(*b), st->fence});
        self->send(st->deps.peers->scheduler, AdmitDone{std::move(*b)});
        st->done();
      });
    };
    KvStore& kv = *st->deps.kv;
    if (!st->deps.layerwise_prefill || !kv.host_tier()) return reserve_pass();
    const int32_t room = book_layerwise_items(kv, *b, st->layerwise);
    if (room == 0) return reserve_pass();
    ++st->layerwise.room_requests;
    with_room(room, [st, b, reserve_pass] {
      book_layerwise_items(*st->deps.kv, *b, st->layerwise);  // what is still short waits a pass
      reserve_pass();
    });
  };
  return {
      [st, next_pass](AdmitWork& w) {
        auto b = std::make_shared<AdmitBatch>(std::move(w.b));
        st->run_or_hold([st, next_pass, b] {
          st->busy = true;
          admit(*st->deps.kv, *b);
          next_pass(b);
        });
        st->stage.busy_until_now();
      },
      [st, next_pass](PrefillDone& w) {
        st->busy = true;
        commit_prefill(*st->deps.kv, w.b, st->layerwise);
        st->sink_returned();
        next_pass(std::make_shared<AdmitBatch>(std::move(w.b)));  // the next chunk, if any
        st->stage.busy_until_now();
      },
      [st, to_verifier, with_room](ReserveWork& w) {
        st->stage.arrive(w.b.times);
        auto b = std::make_shared<RoundBatch>(std::move(w.b));
        // Held while the store is lent to another forward: queued (actors/stage_clock.h).
        st->run_or_hold([st, to_verifier, with_room, b, since = StageClock::now_ns()] {
          StageClock::held(b->times, since);
          st->busy = true;
          const int32_t wanted = rewind(*st->deps.kv, *b);
          with_room(wanted, [st, to_verifier, b] {
            reserve(*st->deps.kv, *b);
            StageClock::leave(b->times);
            to_verifier(VerifyWork{std::move(*b), st->fence});
          });
        });
        st->stage.busy_until_now();
      },
      [self, st](VerifyDone& w) {
        st->stage.arrive(w.b.times);
        st->busy = true;
        commit_round(*st->deps.kv, *st->deps.sink, w.b);
        st->sink_returned();
        const bool views = std::any_of(w.b.items.begin(), w.b.items.end(),
                                       [](const RoundItem& it) { return !it.view_sets.empty(); });
        if (!views || !st->deps.peers->offload) {
          StageClock::leave(w.b.times);
          self->send(st->deps.peers->scheduler, RoundDone{std::move(w.b)});
          st->done();
          return st->stage.busy_until_now();
        }
        // SpecPV over the host tier: the offload actor brings the views' host blocks back.
        self->request(st->deps.peers->offload, caf::infinite, ViewCopyWork{std::move(w.b)})
            .await([self, st](ViewCopyDone& done) {
              if (!done.fence.empty()) st->fence = std::move(done.fence);
              StageClock::leave(done.b.times);
              self->send(st->deps.peers->scheduler, RoundDone{std::move(done.b)});
              st->done();
              st->stage.busy_until_now();
            },
            [st](caf::error& err) {
              // The batch went with the request: its requests cannot finish (a bug or a
              // dead offload actor, which only ends with the pipeline).
              spdlog::error("kv-router: the offload actor failed a view copy: {}", caf::to_string(err));
              st->done();
            });
      },
      [st](ReleaseWork& w) {
        st->run_or_hold([st, seqs = std::move(w.seqs)] {
          KvStore& kv = *st->deps.kv;
          for (SeqId seq : seqs)
            if (kv.contains(seq)) kv.release(seq);
        });
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
