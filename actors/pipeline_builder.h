#pragma once
/// Building the actor pipeline: loading what the actors own (models, KV store,
/// drafter, tokenizer) and spawning the four actors wired to each other. Used by the
/// Engine and by the deterministic actor tests (which spawn into a test system).
#include <caf/actor_system.hpp>

#include <memory>
#include <string>

#include "actors/interfaces.h"
#include "actors/scheduler_actor.h"
#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"
#include "model/tokenizer/tokenizer.h"
#include "model/transformer.h"
#include "pipeline/drafter.h"
#include "pipeline/ngram_drafter.h"

namespace specpipe::actors {

enum class DrafterKind { model, ngram, none };
DrafterKind parse_drafter_kind(const std::string& text);
const char* to_string(DrafterKind kind);

struct PipelineConfig {
  std::string target = "demo-target";  ///< model directory or name under models/
  std::string draft = "demo-draft";    ///< draft model (DrafterKind::model)
  DrafterKind drafter = DrafterKind::model;
  NgramConfig ngram;
  int32_t gamma = 4;
  int32_t max_gamma = 16;
  int64_t kv_tokens = 16384;  ///< capacity of the target KV (and of the draft's)
  int32_t block_size = 16;
  int32_t prefill_chunk = 256;
  int32_t max_batch = 32;
  int32_t max_queue = 1024;
};

/// What the actors own, loaded and ready.
struct PipelineParts {
  std::shared_ptr<Transformer> target;
  std::shared_ptr<KvStore> kv;
  std::shared_ptr<KvWriteSink> sink;
  std::shared_ptr<Drafter> drafter;
  Tokenizer tokenizer;
  SchedulerConfig scheduler;
  int32_t prefill_chunk = 256;
};

/// Loads models and tokenizer and sizes the stores. Throws specpipe::Error naming the
/// file or option at fault.
PipelineParts load_pipeline(const PipelineConfig& config);

/// Spawns scheduler, draft, kv-router and verifier actors in `system`, wired together.
std::shared_ptr<const Peers> spawn_pipeline(caf::actor_system& system, const PipelineParts& parts);

}  // namespace specpipe::actors
