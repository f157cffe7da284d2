#pragma once
/// The typed interfaces of the pipeline's actors, and how they find each other.
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/type_ids.h"

namespace specpipe::actors {

using scheduler_actor = caf::typed_actor<caf::reacts_to<SubmitRequest>, caf::reacts_to<CancelRequest>,
                                         caf::reacts_to<AdmitDone>, caf::reacts_to<RoundDone>,
                                         caf::replies_to<StatsQuery>::with<SpecStats>,
                                         caf::replies_to<StrategyMetricsQuery>::with<std::string>>;

using draft_actor = caf::typed_actor<caf::reacts_to<DraftStart>, caf::reacts_to<DraftWork>,
                                     caf::reacts_to<DraftFinish>, caf::replies_to<KvQuery>::with<KvOccupancy>>;

/// The only actor that changes the target KV store (block tables, commits, truncation).
using kv_router_actor =
    caf::typed_actor<caf::reacts_to<AdmitWork>, caf::reacts_to<PrefillDone>, caf::reacts_to<ReserveWork>,
                     caf::reacts_to<VerifyDone>, caf::reacts_to<ReleaseWork>,
                     caf::replies_to<KvQuery>::with<KvOccupancy>,
                     caf::replies_to<StrategyMetricsQuery>::with<std::string>>;

using verifier_actor = caf::typed_actor<caf::reacts_to<PrefillWork>, caf::reacts_to<VerifyWork>>;

/// Owns the host tier's policy and the moves (actors/offload_actor.h); asked by the
/// kv-router only, which awaits each answer.
using offload_actor = caf::typed_actor<caf::replies_to<PoolRoomWork>::with<PoolRoomDone>,
                                       caf::replies_to<ViewCopyWork>::with<ViewCopyDone>>;

/// Owns SpecPV's retrieval index (actors/retrieval_actor.h); asked by the verifier on
/// refresh rounds only, which awaits the answer.
using retrieval_actor = caf::typed_actor<caf::replies_to<RetrievalWork>::with<RetrievalDone>>;

/// Every actor's handle. Filled by whoever builds the pipeline after spawning and before
/// the first message, then read-only (shared between the actors).
struct Peers {
  scheduler_actor scheduler;
  draft_actor draft;
  kv_router_actor kv_router;
  verifier_actor verifier;
  offload_actor offload;  ///< only with a host tier (offload.enable)
  retrieval_actor retrieval;  ///< only with a verify_view strategy (SpecPV)
};

}  // namespace specpipe::actors
