#pragma once
/// The retrieval actor (issue 17 item 2; ARCHITECTURE.md section 3): owns SpecPV's
/// retrieval index (kvstore/retrieval_index.h: the block summaries of every sequence and
/// its retrieved blocks per layer). On a refresh round the verifier's forward reduces
/// each refreshing window's queries layer by layer (QuerySums, where the queries are);
/// after the forward the verifier sends them in one RetrievalWork and awaits the answer:
/// this actor summarises the sequences' newly verified blocks, scores the blocks and
/// answers the top ones per layer, which the verifier's next partial views read. With a
/// device target (ForwardModel::device_retrieval) all of it stays on the device: the
/// forward leaves each window's query sums there, the summaries are kept there per
/// sequence (pool blocks summarised from the pool; host-tier blocks on the host from the
/// tier, only their summaries uploaded), and only the chosen block indices come back, in
/// one copy. On the CPU the index and its scoring are on the host. No other round sends
/// it anything: partial and plain rounds neither wait for it nor sync for it.
///
/// It reads the KV store and uses the target model (its summariser, its landing of
/// host-tier moves) only while the verifier awaits it: the verifier lends both, as the
/// kv-router lends the store to the offload actor, so the store still has one user at a
/// time and the model's stream one caller.
#include <atomic>
#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "actors/interfaces.h"
#include "kvstore/kv_store.h"
#include "model/forward_model.h"

namespace specpipe::actors {

/// What the retrieval actor did (read from any thread).
struct RetrievalActorStats {
  std::atomic<int64_t> requests{0};   ///< RetrievalWork answered (refresh rounds)
  std::atomic<int64_t> sequences{0};  ///< sequences re-selected
  std::atomic<int64_t> unselected{0}; ///< sequences left with their previous selection
  std::atomic<int64_t> on_device{0};  ///< of `sequences`: selected on the device (DeviceRetrieval)
  std::atomic<int64_t> failures{0};   ///< sequences whose refresh failed (their item failed)
  std::atomic<int64_t> by_mass{0};    ///< of `sequences`: selected by the round's attention mass
  /// Of `sequences`: by mass was asked for, the forward gave none (a backend without it,
  /// the CUDA forward for now): selected by the query sums (Quest) instead.
  std::atomic<int64_t> mass_fallbacks{0};
};

struct RetrievalDeps {
  std::shared_ptr<const KvStore> kv;  ///< the target's store (owned by the kv-router)
  /// The target model, for a device pool's key summariser and landing host-tier moves
  /// (null: a store holding its pool in host tensors, the CPU's).
  std::shared_ptr<ForwardModel> target;
  std::shared_ptr<RetrievalActorStats> stats = std::make_shared<RetrievalActorStats>();
};

retrieval_actor::behavior_type retrieval(retrieval_actor::pointer self, RetrievalDeps deps);

/// The actor's counters, for the `verify_view` strategy metrics (`retrieval`).
nlohmann::json retrieval_actor_metrics(const RetrievalActorStats& stats);

}  // namespace specpipe::actors
