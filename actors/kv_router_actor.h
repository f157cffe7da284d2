#pragma once
/// The kv-router actor: the single writer of the target KV store. It registers admitted
/// sequences (prefix cache), reserves the slots a forward will write, commits exactly
/// the accepted prefix after each verdict (`pending + k` tokens) and truncates the rest,
/// and releases finished sequences. The K/V of a forward reach the pool through its
/// sink (the built-in kv_write strategy: write during the forward, truncate after), so
/// the pool never holds an unverified token once a round is over, and the prefix cache
/// only ever hashes committed blocks.
#include <memory>

#include "actors/interfaces.h"
#include "actors/offload_actor.h"
#include <nlohmann/json.hpp>

#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"

namespace specpipe::actors {

struct KvRouterDeps {
  std::shared_ptr<const Peers> peers;
  std::shared_ptr<KvStore> kv;
  std::shared_ptr<KvWriteSink> sink;  ///< the kv_write strategy (commits after verdicts)
  /// With a host tier: context tokens per sequence per admission pass (each pass is
  /// committed before the next, so older blocks can move to the host in between).
  int32_t prefill_chunk = 256;
  /// With a host tier: the offload actor's counters (`offload.actor` metrics) and its
  /// copy queue (null on a device). The actor itself is peers->offload.
  std::shared_ptr<const OffloadActorStats> offload_stats;
  std::shared_ptr<const WriteBackQueue> offload_write_back;
  /// With a host tier: a new context longer than the pool can hold now takes the
  /// layer-wise prefill (offload.prefill: layerwise; pipeline/prefill.h).
  bool layerwise_prefill = true;
};

/// The kv_write strategy's counters: pool traffic, and a plugin's own metrics.
nlohmann::json kv_write_metrics(const KvWriteSink& sink);
/// The host tier's traffic and occupancy (a store with a host tier).
nlohmann::json offload_metrics(const KvStore& kv);

kv_router_actor::behavior_type kv_router(kv_router_actor::pointer self, KvRouterDeps deps);

}  // namespace specpipe::actors
