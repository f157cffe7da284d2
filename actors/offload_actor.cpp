#include "actors/offload_actor.h"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"

namespace specpipe::actors {
namespace {

/// SpecPV over the host tier: after a refresh, the host-tier blocks of the sequence's
/// next views are copied into pool blocks it holds until the next refresh, so its
/// partial rounds read them from the pool. Room for the copies is made as for a reserve
/// (older blocks move to the host; those of the view then need copies too, so the host
/// part is looked at again). A pool that still cannot hold them leaves the sequence
/// without copies: its partial rounds read the whole prefix (counted by the verifier);
/// the round itself does not fail.
void make_view_copies(KvStore& kv, OffloadPolicy policy, RoundItem& it) {
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
      if (needed <= kv.free_blocks() || make_pool_room(kv, needed, policy) == 0) break;
    }
    host_part();
    it.host_view.copy_bytes = kv.set_view_copies(it.seq, on_host);
  } catch (const Error& e) {
    it.host_view.copies_refused = true;
    if (e.code() != ErrorCode::out_of_capacity) spdlog::warn("SpecPV view copies: {}", e.what());
  }
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

struct OffloadState {
  OffloadDeps deps;
  CopyFence fence() const { return deps.write_back ? deps.write_back->fence() : CopyFence{}; }
  int64_t to_host() const { return deps.kv->offload_stats().blocks_to_host; }
};

}  // namespace

offload_actor::behavior_type offload(offload_actor::pointer /*self*/, OffloadDeps deps) {
  if (!deps.kv || !deps.kv->host_tier())
    fail(ErrorCode::invalid_argument, "offload actor: the KV store has no host tier");
  auto st = std::make_shared<OffloadState>();
  st->deps = std::move(deps);
  return {
      [st](PoolRoomWork& w) {
        KvStore& kv = *st->deps.kv;
        const int64_t before = st->to_host();
        try {
          make_pool_room(kv, w.wanted, st->deps.policy);
          // SpecPV view copies are a cache: the pool's sequences come first.
          if (kv.free_blocks() < w.wanted && drop_view_copies(kv)) make_pool_room(kv, w.wanted, st->deps.policy);
        } catch (const std::exception& e) {
          // The reserves that follow fail with their own out_of_capacity error.
          spdlog::warn("offload: making room for {} blocks: {}", w.wanted, e.what());
        }
        OffloadActorStats& s = *st->deps.stats;
        const int64_t moved = st->to_host() - before;
        s.room_requests.fetch_add(1);
        if (moved > 0) s.room_moves.fetch_add(1);
        s.blocks_moved.fetch_add(moved);
        return PoolRoomDone{moved, st->fence()};
      },
      [st](ViewCopyWork& w) {
        for (RoundItem& it : w.b.items)
          if (it.error.empty() && it.seq >= 0 && st->deps.kv->contains(it.seq) && !it.view_sets.empty()) {
            const int64_t before = st->to_host();
            // make_view_copies turns the store's errors into a fallback to whole-prefix
            // reads; anything else (std::bad_alloc, ...) fails this request with its
            // reason. The batch must go back whatever happens: the router handed it over
            // with this message, and an actor that threw would answer with an error
            // instead, leaving every request in the batch waiting for ever.
            try {
              make_view_copies(*st->deps.kv, st->deps.policy, it);
            } catch (const std::exception& e) {
              it.error = std::string("SpecPV view copies: ") + e.what();
            }
            st->deps.stats->blocks_moved.fetch_add(st->to_host() - before);
            st->deps.stats->view_bytes.fetch_add(it.host_view.copy_bytes);
          }
        st->deps.stats->view_requests.fetch_add(1);
        return ViewCopyDone{std::move(w.b), st->fence()};
      },
  };
}

nlohmann::json offload_actor_metrics(const OffloadActorStats& s, const WriteBackQueue* write_back) {
  nlohmann::json j = {{"room_requests", s.room_requests.load()},
                      {"room_moves", s.room_moves.load()},
                      {"blocks_moved", s.blocks_moved.load()},
                      {"view_requests", s.view_requests.load()},
                      {"view_bytes", s.view_bytes.load()},
                      {"async_copies", write_back != nullptr}};
  if (write_back) {
    j["copies_queued"] = write_back->blocks_queued();
    j["store_write_stalls"] = write_back->stalls();
  }
  return j;
}

}  // namespace specpipe::actors
