#pragma once
/// Building the actor pipeline: loading what the actors own (models, KV store,
/// drafter, tokenizer) and spawning the four actors wired to each other. Used by the
/// Engine and by the deterministic actor tests (which spawn into a test system).
#include <caf/actor_system.hpp>

#include <memory>
#include <string>

#include "actors/interfaces.h"
#include "actors/scheduler_actor.h"
#include "kvstore/async_write_back.h"
#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"
#include "model/tokenizer/tokenizer.h"
#include "model/forward_model.h"
#include "pipeline/drafter.h"
#include "pipeline/pipeline_config.h"
#include "pipeline/verify_planner.h"
#include "pipeline/view_planner.h"

namespace specpipe::actors {

/// What the actors own, loaded and ready.
struct PipelineParts {
  std::shared_ptr<ForwardModel> target;     ///< on the configured device
  std::shared_ptr<KvStore> kv;
  std::shared_ptr<KvWriteSink> sink;          ///< slot kv_write
  std::shared_ptr<VerifyPlanner> planner;     ///< slot verify_plan
  std::shared_ptr<ViewPlanner> view_planner;  ///< slot verify_view
  std::shared_ptr<Drafter> drafter;
  Tokenizer tokenizer;
  SchedulerConfig scheduler;
  int32_t prefill_chunk = 256;
  /// Offload on the CPU: the copy thread of the store's moves to the host tier (null on
  /// a device, where the target's ring copies them, or with offload.overlap off).
  std::shared_ptr<WriteBackQueue> offload_write_back;
  /// offload.prefill is `layerwise` (the kv-router's admission: pipeline/prefill.h).
  bool layerwise_prefill = true;
};

/// Loads models and tokenizer on the configured device and sizes the stores (kv.tokens,
/// or on a device `auto`: kv.memory_fraction of the memory the weights left free).
/// Throws specpipe::Error naming the file or option at fault.
PipelineParts load_pipeline(const PipelineConfig& config);

/// Spawns scheduler, draft, kv-router and verifier actors in `system`, wired together.
std::shared_ptr<const Peers> spawn_pipeline(caf::actor_system& system, const PipelineParts& parts);

}  // namespace specpipe::actors
