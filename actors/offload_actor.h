#pragma once
/// The offload actor (issue 16 item 3; ARCHITECTURE.md section 3): owns the host tier's
/// policy and its moves. When a reserve would not fit the pool, or a layer-wise prefill
/// finds the pool full (pipeline/prefill.h, layerwise_room), the kv-router asks it for
/// room (PoolRoomWork) instead of moving blocks itself; it decides which blocks go
/// (offload.policy, kvstore/offload_policy.h), moves them (KvStore::offload_prefix) and
/// answers with the event after their copies (a CopyFence), which the router hands to
/// the verifier's next forward as data. After a SpecPV refresh it brings the views'
/// host-tier blocks back into pool copies (ViewCopyWork), making room the same way.
///
/// Where the copies run: on the CPU, a store with host tensors gives its moves to this
/// actor's copy thread (kvstore/async_write_back.h; the forward waits on the fence
/// before it reads the host tier or writes the pool); on a device, the model's copier
/// queues them on its ring's copy stream, ordered per layer by events inside the next
/// forward (kvstore/write_back.h), and the fence stays empty. Per-layer waits are never
/// messages: a message per layer would cost more than the layer (36 of ~1 ms at 32K).
///
/// The store has one writer at a time: the router awaits every answer (CAF `await`: no
/// other message of the router runs meanwhile), so while this actor moves blocks no
/// other actor changes or reads the store (the verifier only runs work the router sent).
#include <atomic>
#include <cstdint>
#include <memory>

#include <nlohmann/json.hpp>

#include "actors/interfaces.h"
#include "kvstore/async_write_back.h"
#include "kvstore/kv_store.h"
#include "kvstore/offload_policy.h"

namespace specpipe::actors {

/// What the offload actor did (read from any thread: the kv-router's metrics).
struct OffloadActorStats {
  std::atomic<int64_t> room_requests{0};  ///< PoolRoomWork answered
  std::atomic<int64_t> room_moves{0};     ///< of those, ones that moved blocks
  std::atomic<int64_t> blocks_moved{0};   ///< pool -> host blocks moved by this actor
  std::atomic<int64_t> view_requests{0};  ///< ViewCopyWork answered
  std::atomic<int64_t> view_bytes{0};     ///< host -> pool bytes of the view copies
};

struct OffloadDeps {
  std::shared_ptr<KvStore> kv;  ///< with a host tier
  /// The CPU's copy thread for the store's moves (null: the store's copier orders them,
  /// a device model's ring).
  std::shared_ptr<WriteBackQueue> write_back;
  std::shared_ptr<OffloadActorStats> stats = std::make_shared<OffloadActorStats>();
  OffloadPolicy policy = OffloadPolicy::longest;
};

offload_actor::behavior_type offload(offload_actor::pointer self, OffloadDeps deps);

/// The actor's counters and its copy queue's, for the `offload` metrics.
nlohmann::json offload_actor_metrics(const OffloadActorStats& stats, const WriteBackQueue* write_back);

}  // namespace specpipe::actors
