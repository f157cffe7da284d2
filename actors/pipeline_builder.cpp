#include "actors/pipeline_builder.h"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>

#include "actors/draft_actor.h"
#include "actors/kv_router_actor.h"
#include "actors/verifier_actor.h"
#include "core/error.h"
#include "model/load_model.h"
#include "pipeline/lookup_drafter.h"
#include "pipeline/model_drafter.h"

namespace specpipe::actors {

DrafterKind parse_drafter_kind(const std::string& text) {
  if (text == "model" || text == "draft-model") return DrafterKind::model;
  if (text == "ngram") return DrafterKind::ngram;
  if (text == "none") return DrafterKind::none;
  fail(ErrorCode::invalid_argument, "unknown drafter '{}' (model, ngram or none)", text);
}

const char* to_string(DrafterKind kind) {
  switch (kind) {
    case DrafterKind::model: return "model";
    case DrafterKind::ngram: return "ngram";
    case DrafterKind::none: return "none";
  }
  return "?";
}

PipelineParts load_pipeline(const PipelineConfig& c) {
  if (c.block_size <= 0) fail(ErrorCode::invalid_argument, "block_size must be positive");
  if (c.kv_tokens < c.block_size) fail(ErrorCode::invalid_argument, "kv_tokens must hold at least one block");
  if (c.gamma < 0 || c.gamma > c.max_gamma) fail(ErrorCode::invalid_argument, "gamma must be in [0, {}]", c.max_gamma);
  const auto target_dir = resolve_model_dir(c.target);
  PipelineParts p{.target = load_transformer(target_dir),
                  .kv = nullptr,
                  .sink = nullptr,
                  .drafter = nullptr,
                  .tokenizer = Tokenizer::from_file(target_dir / "tokenizer.json"),
                  .scheduler = {},
                  .prefill_chunk = c.prefill_chunk};
  const auto blocks = static_cast<int32_t>(c.kv_tokens / c.block_size);
  p.kv = std::make_shared<KvStore>(p.target->kv_config(blocks, c.block_size));
  p.sink = std::make_shared<DirectKvWriter>(*p.kv);
  int32_t max_positions = p.target->config().max_position_embeddings;
  switch (c.drafter) {
    case DrafterKind::model: {
      auto draft = load_transformer(resolve_model_dir(c.draft));
      if (draft->config().vocab_size != p.target->config().vocab_size)
        fail(ErrorCode::invalid_argument, "draft model {} has a vocabulary of {}, the target {}", c.draft,
             draft->config().vocab_size, p.target->config().vocab_size);
      max_positions = std::min(max_positions, draft->config().max_position_embeddings);
      p.drafter = std::make_shared<ModelDrafter>(std::move(draft), blocks, c.block_size, c.prefill_chunk);
      break;
    }
    case DrafterKind::ngram: p.drafter = std::make_shared<LookupDrafter>(c.ngram); break;
    case DrafterKind::none: p.drafter = std::make_shared<LookupDrafter>(c.ngram); break;
  }
  SchedulerConfig& s = p.scheduler;
  s.default_gamma = c.gamma;
  s.max_gamma = c.max_gamma;
  s.max_batch = c.max_batch;
  s.max_queue = c.max_queue;
  s.kv_blocks = blocks;
  s.block_size = c.block_size;
  s.max_positions = max_positions;
  s.eos_ids = p.target->config().eos_token_ids;
  s.speculative = c.drafter != DrafterKind::none;
  spdlog::info("pipeline: target {} ({} layers), drafter {}, gamma {}, KV {} blocks x {}", target_dir.string(),
               p.target->config().num_layers, to_string(c.drafter), c.gamma, blocks, c.block_size);
  return p;
}

std::shared_ptr<const Peers> spawn_pipeline(caf::actor_system& system, const PipelineParts& parts) {
  auto peers = std::make_shared<Peers>();
  peers->verifier = system.spawn(verifier, VerifierDeps{peers, parts.target, parts.kv, parts.sink, parts.prefill_chunk});
  peers->kv_router = system.spawn(kv_router, KvRouterDeps{peers, parts.kv});
  peers->draft = system.spawn(draft, DraftDeps{peers, parts.drafter});
  peers->scheduler = spawn_scheduler(system, SchedulerDeps{peers, parts.scheduler, parts.tokenizer});
  return peers;
}

}  // namespace specpipe::actors
