#pragma once
/// The scheduler actor: owns requests and their sequence state (pending token, stop
/// conditions, RNG stream, statistics), admits work against KV capacity, plans each
/// round (which sequences, how many drafts), and streams results to clients.
///
/// Continuous batching: requests join (after their prefill) and leave between rounds.
/// With one micro-batch (scheduler.micro_batches 1, the default) phases never overlap: an
/// admission batch (prefill) and a round are never in flight at the same time. With N > 1
/// up to N rounds are in flight, each over its own share of the running sequences (a
/// sequence is in at most one), beside an admission batch: the draft actor drafts one
/// round while the verifier verifies another. The kv-router still lends the KV store to
/// the verifier one forward at a time and holds other work back meanwhile
/// (actors/kv_router_actor.cpp), so the two never touch the store at once.
#include <memory>

#include <caf/actor_system.hpp>

#include "actors/interfaces.h"
#include "model/tokenizer/tokenizer.h"
#include "pipeline/verify_planner.h"
#include "pipeline/view_planner.h"

namespace specpipe::actors {

struct SchedulerConfig {
  int32_t gamma = 4;           ///< slots.drafter.gamma: for requests that name none
  int32_t max_gamma = 16;      ///< slots.drafter.max_gamma: the most a request (or a plan) may use
  int32_t max_batch = 32;      ///< sequences per round
  int32_t max_queue = 1024;    ///< waiting requests beyond which new ones are refused
  int64_t kv_blocks = 0;       ///< blocks of the target KV, pool and host tier (the draft's is as large)
  /// Blocks of the target's pool alone (with offload, kv_blocks - pool_blocks are on the
  /// host tier).
  int64_t pool_blocks = 0;
  int32_t block_size = 16;
  int32_t max_positions = 0;   ///< smallest max_position_embeddings of target and draft
  std::vector<int32_t> eos_ids;
  bool speculative = true;     ///< false: every round is a plain decode step (gamma 0)
  /// scheduler.micro_batches: rounds in flight at once, each of its own share of the
  /// running sequences (1: one round, every sequence, at a time).
  int32_t micro_batches = 1;
};

struct RetrievalActorStats;

struct SchedulerDeps {
  std::shared_ptr<const Peers> peers;
  SchedulerConfig config;
  Tokenizer tokenizer;
  std::shared_ptr<VerifyPlanner> planner;  ///< slot verify_plan (fixed gamma if null)
  std::shared_ptr<ViewPlanner> view_planner;  ///< slot verify_view (always full if null)
  /// The retrieval actor's counters (with a verify_view strategy), in its metrics.
  std::shared_ptr<const RetrievalActorStats> retrieval_stats;
};

scheduler_actor spawn_scheduler(caf::actor_system& system, SchedulerDeps deps);

}  // namespace specpipe::actors
