#include "actors/pipeline_builder.h"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "actors/draft_actor.h"
#include "actors/kv_router_actor.h"
#include "actors/offload_actor.h"
#include "actors/retrieval_actor.h"
#include "actors/verifier_actor.h"
#include "core/error.h"
#include "core/timer.h"
#include "kvstore/async_write_back.h"
#include "model/load_model.h"
#include "model/open_model.h"
#include "pipeline/gamma.h"
#include "pipeline/lookup_drafter.h"
#include "pipeline/model_drafter.h"
#include "pipeline/plugin_kv_writer.h"
#include "pipeline/warm_start.h"

namespace specpipe::actors {

PipelineParts load_pipeline(const PipelineConfig& c) {
  if (c.kv.block_size <= 0) fail(ErrorCode::invalid_argument, "kv.block_size must be positive");
  if (c.kv.tokens != KvConfig::kAuto && c.kv.tokens < c.kv.block_size)
    fail(ErrorCode::invalid_argument, "kv.tokens must hold at least one block");
  const Device device = Device::parse(c.device);
  const bool on_device = device.kind != DeviceKind::cpu;
  // A device forward takes a bounded number of tokens (at most 1024): it is sized for a
  // round's verify windows and a prefill chunk; gamma_limits checks what it got.
  constexpr int32_t kDeviceForwardTokens = 1024;
  const int64_t verify_tokens = int64_t{c.scheduler.max_batch} * largest_window(std::min(c.drafter.max_gamma, kDeviceForwardTokens));
  const ModelOptions model_options{
      .device = device,
      .max_forward_tokens = static_cast<int32_t>(
          std::min<int64_t>(kDeviceForwardTokens, std::max<int64_t>(c.scheduler.prefill_chunk, verify_tokens))),
      .gemm = c.models.gemm,
      // kv.dtype: both models' K/V (the CPU backend refuses bf16 in open_model).
      .kv_dtype = c.kv.dtype == "bf16" ? DType::bf16 : DType::f32};
  // The drafter drafts the next round while the target verifies (on a device by
  // default); the target's stream then goes first wherever both want the SMs.
  const bool draft_ahead = c.drafter.type == DrafterKind::model &&
                           (c.drafter.draft_ahead == DraftAhead::on ||
                            (c.drafter.draft_ahead == DraftAhead::automatic && on_device));
  ModelOptions target_options = model_options;
  target_options.high_priority_stream = draft_ahead;
  const auto target_dir = resolve_model_dir(c.models.target);
  std::shared_ptr<ForwardModel> target = open_model(target_dir, target_options);
  std::unique_ptr<ForwardModel> draft;
  if (c.drafter.type == DrafterKind::model) {
    ModelOptions draft_options = model_options;
    draft_options.fused_step = c.models.draft_fused_step;  // a draft's bits only move its acceptance
    draft_options.fused_blocks = c.models.draft_fused_blocks;
    // Drafting ahead, the draft kernel runs beside the target's: half the SMs each
    // (measured on an H100: a third to a half of the SMs best; all of them starve the
    // target, docs/BENCHMARKS.md section 5).
    if (draft_ahead) draft_options.fused_sm_share = 0.5f;
    // and its chain steps' one-row GEMMs do not launch the next kernel early: the early
    // blocks waiting on the SMs slow the verify forward beside them
    // (kernels/cuda/early_launch.h).
    draft_options.one_row_early_launch = !draft_ahead;
    draft = open_model(resolve_model_dir(c.models.draft), draft_options);
    if (draft->config().vocab_size != target->config().vocab_size)
      fail(ErrorCode::invalid_argument, "draft model {} has a vocabulary of {}, the target {}", c.models.draft,
           draft->config().vocab_size, target->config().vocab_size);
  }
  // The one config-load check of gamma, against what the opened models can run.
  check_gamma_config(c.drafter, gamma_limits(*target, draft.get(), c.scheduler.max_batch));
  int32_t blocks = 0;
  if (c.kv.tokens == KvConfig::kAuto) {
    std::vector<const ForwardModel*> models{target.get()};
    if (draft) models.push_back(draft.get());
    blocks = kv_blocks_for_free_memory(device, models, c.kv.block_size, c.kv.memory_fraction);
    if (c.offload.enable) {
      // The ring's device slots are allocated at the first forward over host K/V: leave
      // them room. A slot holds one layer of every host token a forward reads, at most
      // the tier's share of one layer.
      int64_t per_block = 0;
      for (const ForwardModel* m : models) per_block += m->kv_block_bytes(c.kv.block_size);
      const int64_t ring = int64_t{c.offload.ring_slots} * (c.offload.host_bytes / target->config().num_layers);
      blocks -= static_cast<int32_t>(std::min<int64_t>(blocks - 1, (ring + per_block - 1) / per_block));
    }
  } else {
    blocks = static_cast<int32_t>(c.kv.tokens / c.kv.block_size);
  }
  target->allocate_kv_pool(blocks, c.kv.block_size);
  PipelineParts p{.target = target,
                  .kv = nullptr,
                  .sink = nullptr,
                  .planner = nullptr,
                  .view_planner = nullptr,
                  .drafter = nullptr,
                  .tokenizer = Tokenizer::from_file(target_dir / "tokenizer.json"),
                  .scheduler = {},
                  .prefill_chunk = c.scheduler.prefill_chunk,
                  .offload_write_back = nullptr};
  p.layerwise_prefill = c.offload.prefill == "layerwise";
  KvStoreConfig kv_config = p.target->kv_config(blocks, c.kv.block_size);
  kv_config.prefix_cache = c.kv.prefix_cache;
  const bool partial_views = c.slots.verify_view != "full";
  // SpecPV settles a sequence's partial rounds against its full ones in the order the
  // rounds run; with several micro-batches in flight that order is not checked yet.
  if (partial_views && c.scheduler.micro_batches > 1)
    fail(ErrorCode::unsupported, "scheduler.micro_batches {} with slots.verify_view {}: partial verification with "
         "more than one round in flight is not built", c.scheduler.micro_batches, c.slots.verify_view);
  if (partial_views) {
    // SpecPV's partial views read the pool (on a device, the model's: its forward gathers
    // them and it summarises blocks where they live). With the host tier, a view's
    // host-tier blocks are copied into the pool after each refresh (KvStore::
    // set_view_copies), so partial rounds move no K/V over PCIe.
    // The device's block summaries read FP32 keys (model/cuda/key_summaries.h).
    if (c.kv.dtype == "bf16")
      fail(ErrorCode::unsupported, "slots.verify_view: partial verification with kv.dtype bf16 is not supported yet");
    // Blocks filled by partial rounds hold K/V computed over a partial view (and, in
    // exact mode, maybe tokens a full round rolls back): they must never be shared.
    if (kv_config.prefix_cache) spdlog::info("slots.verify_view {}: prefix cache off", c.slots.verify_view);
    kv_config.prefix_cache = false;
  }
  // On a device the pool is the target model's: it copies shared blocks (copy-on-write).
  // The copier holds the model, so the store never outlives the pool it books.
  BlockCopier copier;
  if (BlockCopier device_copy = p.target->block_copier())
    copier = [model = p.target, device_copy](int32_t src, int32_t dst) { device_copy(src, dst); };
  p.kv = std::make_shared<KvStore>(kv_config, std::move(copier));
  int32_t host_blocks = 0;
  if (c.offload.enable) {
    // The host tier (nothing half-allocated on failure; on a device in pinned memory,
    // its blocks moved by the target's stream) and the target's layer ring.
    const HostTierLayout layout{kv_config.num_layers, kv_config.num_kv_heads, kv_config.head_dim,
                                kv_config.block_size, p.target->kv_dtype()};
    try {
      p.target->enable_layer_ring(c.offload.ring_slots, c.offload.overlap);  // ring_slots < 2 before any allocation
      auto tier = std::make_unique<HostKvTier>(layout, c.offload.host_bytes, p.target->host_memory_allocator());
      HostTierCopier host_copier = p.target->host_tier_copier();
      if (kv_config.host_tensors && c.offload.overlap) {
        // CPU: the offload actor's moves run on a copy thread beside the forward
        // (kvstore/async_write_back.h); with overlap off they copy in line, as before.
        p.offload_write_back = std::make_shared<WriteBackQueue>(std::make_shared<ThreadCopyStream>());
        host_copier = async_host_copier(p.offload_write_back, p.kv->tensors(), *tier);
      }
      p.kv->attach_host_tier(std::move(tier), std::move(host_copier));
    } catch (const Error& e) {
      fail(e.code(), "offload: {}", e.what());
    }
    host_blocks = p.kv->host_tier()->total_blocks();
  }
  // Strategy plugins are loaded and checked before anything runs: a refusal names the
  // file and the reason (pipeline/plugin_library.h).
  auto plugin_for = [&](const std::string& name, const std::string& slot) {
    for (const PluginConfig& pc : c.plugins)
      if (pc.name == name) {
        const auto library = PluginLibrary::load(pc.path);
        // On a device the plugin's host services work on the target's pool (the plugin
        // holds the model through it: it is destroyed before the pool it writes).
        std::shared_ptr<DeviceKvPool> pool;
        if (DeviceKvPool* device_pool = p.target->device_kv_pool())
          pool = std::shared_ptr<DeviceKvPool>(p.target, device_pool);
        return std::make_shared<PluginInstance>(
            library, slot, describe_model(*p.kv, c.drafter.max_gamma, c.scheduler.max_batch, device),
            nlohmann::json::parse(pc.config_json), p.kv.get(), std::move(pool));
      }
    fail(ErrorCode::invalid_argument, "slots.{}.type: plugin '{}' is not declared under plugins", slot, name);
  };
  if (c.slots.kv_write == "direct") p.sink = std::make_shared<DirectKvWriter>(*p.kv);
  else p.sink = std::make_shared<PluginKvWriter>(*p.kv, plugin_for(c.slots.kv_write, "kv_write"));
  if (c.slots.verify_plan == "fixed") p.planner = std::make_shared<FixedGammaPlanner>();
  else p.planner = std::make_shared<PluginVerifyPlanner>(plugin_for(c.slots.verify_plan, "verify_plan"));
  if (partial_views)
    p.view_planner = std::make_shared<PluginViewPlanner>(plugin_for(c.slots.verify_view, "verify_view"));
  int32_t max_positions = p.target->config().max_position_embeddings;
  const DrafterConfig& d = c.drafter;
  std::shared_ptr<ModelDrafter> model_drafter;
  switch (d.type) {
    case DrafterKind::model: {
      max_positions = std::min(max_positions, draft->config().max_position_embeddings);
      // The draft's KV is not offloaded: its pool holds what both target tiers hold, up
      // to max_batch sequences of every position.
      const int64_t per_sequence = (max_positions + c.kv.block_size - 1) / c.kv.block_size + 1;
      const auto draft_blocks = static_cast<int32_t>(std::max<int64_t>(
          blocks, std::min<int64_t>(int64_t{blocks} + host_blocks, per_sequence * c.scheduler.max_batch)));
      // The verifier's forward reads the drafts where the draft model leaves them (a
      // host model's in host memory): chain rounds then have no host sync of the drafter's.
      const bool drafts_readable = draft->device() == p.target->device() || draft->device().kind == DeviceKind::cpu;
      // Sampled chains' q rows stay on the device for the target's verdicts when both
      // models share it and one round is in flight (the next chain overwrites them).
      // SPECPIPE_SAMPLED_Q_ON_DEVICE=0 copies them through the host (A/B in one build).
      const char* q_env = std::getenv("SPECPIPE_SAMPLED_Q_ON_DEVICE");
      const bool q_on_device = draft->device() == p.target->device() && draft->device().kind != DeviceKind::cpu &&
                               p.target->computes_sampled_verdicts() && c.scheduler.micro_batches <= 1 &&
                               !(q_env && std::string_view(q_env) == "0");
      auto drafter = std::make_shared<ModelDrafter>(std::move(draft), draft_blocks, c.kv.block_size,
                                                    c.scheduler.prefill_chunk, draft_ahead);
      // The ids stay valid until the drafter's next chain: with one round in flight that
      // chain comes after the verdict; with micro-batches the next round's chain comes
      // before it, so each round in flight keeps its drafts in its slot's buffer
      // (RoundBatch::slot, ARCHITECTURE.md section 4).
      drafter->keep_drafts_on_device(drafts_readable, c.scheduler.micro_batches);
      drafter->keep_q_on_device(q_on_device);
      // And with them the sampled drafts' ids (a round's one host sync is then the
      // verdict's). SPECPIPE_SAMPLED_DRAFTS_ON_DEVICE=0 waits for the chain and sends the
      // ids up with the window as before (A/B in one build).
      const char* ids_env = std::getenv("SPECPIPE_SAMPLED_DRAFTS_ON_DEVICE");
      drafter->keep_sampled_drafts_on_device(q_on_device && !(ids_env && std::string_view(ids_env) == "0"));
      // A request alone gets its draft prefill beside the target's (ModelDrafter::
      // prefill_when_idle), where the drafter drafts ahead on its own stream.
      // SPECPIPE_DRAFT_PREFILL_WHEN_IDLE=0 keeps it lazy (for A/B timings in one build).
      const char* idle_env = std::getenv("SPECPIPE_DRAFT_PREFILL_WHEN_IDLE");
      drafter->prefill_when_idle(draft_ahead && !(idle_env != nullptr && std::string_view(idle_env) == "0"));
      model_drafter = drafter;
      p.drafter = std::move(drafter);
      break;
    }
    case DrafterKind::ngram:
    case DrafterKind::none: {
      NgramConfig ngram = d.ngram;
      ngram.max_proposals = std::max(1, d.max_gamma);  // a request's gamma caps it further
      p.drafter = std::make_shared<LookupDrafter>(ngram);
      break;
    }
  }
  SchedulerConfig& s = p.scheduler;
  s.gamma = d.gamma;
  s.max_gamma = d.max_gamma;
  s.max_batch = c.scheduler.max_batch;
  s.max_queue = c.scheduler.max_queue;
  s.kv_blocks = int64_t{blocks} + host_blocks;
  s.pool_blocks = blocks;
  s.block_size = c.kv.block_size;
  s.max_positions = max_positions;
  s.eos_ids = p.target->config().eos_token_ids;
  s.speculative = d.type != DrafterKind::none;
  s.micro_batches = c.scheduler.micro_batches;
  if (on_device && c.models.warm_graphs) {
    // Every shape one sequence's rounds use, before the first request (warm_start.h):
    // the verify windows of gammas 0..max_gamma (a recomputed token, the pending token,
    // the drafts) and the draft model's chains; a plain server only its decode step.
    const Stopwatch clock;
    const int32_t max_window = s.speculative ? largest_window(d.max_gamma) : 1;
    const int32_t target_forwards = warm_verify_windows(*p.target, *p.kv, max_window);
    const int32_t draft_chains = model_drafter ? model_drafter->warm_graphs(d.max_gamma) : 0;
    spdlog::info("warm start: {} target forwards (windows of 1..{} tokens) and {} draft chains (gammas 1..{}) in {:.1f} ms",
                 target_forwards, max_window, draft_chains, model_drafter ? d.max_gamma : 0, clock.elapsed_ms());
  }
  spdlog::info("pipeline: target {} ({} layers) on {}, drafter {}, gamma {}, KV {} blocks x {}, host tier {} blocks",
               target_dir.string(), p.target->config().num_layers, device.to_string(), to_string(d.type), d.gamma,
               blocks, c.kv.block_size, host_blocks);
  return p;
}

std::shared_ptr<const Peers> spawn_pipeline(caf::actor_system& system, const PipelineParts& parts) {
  auto peers = std::make_shared<Peers>();
  // With rounds in flight together (scheduler.micro_batches > 1) the two actors that run
  // forwards get threads of their own (CAF `detached`). On the pool a message an actor
  // sends goes to the front of its own worker's queue, unannounced; when that worker then
  // runs the other micro-batch's forward, the message (a RoundDone, the next DraftWork)
  // waits behind it unless an idle worker steals it, and idle workers sleep up to 10 ms
  // between tries. Detached, a forward holds no pool worker, and a message to a forwarding
  // actor wakes its thread at once. One round in flight keeps every actor on the pool: its
  // hops run one after another on one worker (docs/BENCHMARKS.md section 8).
  const bool own_threads = parts.scheduler.micro_batches > 1;
  auto spawn_forwarding = [&](auto fun, auto deps) {
    return own_threads ? system.spawn<caf::detached>(fun, std::move(deps)) : system.spawn(fun, std::move(deps));
  };
  peers->verifier = spawn_forwarding(
      verifier, VerifierDeps{peers, parts.target, parts.kv, parts.sink, parts.prefill_chunk, parts.view_planner != nullptr});
  std::shared_ptr<RetrievalActorStats> retrieval_stats;
  if (parts.view_planner) {
    retrieval_stats = std::make_shared<RetrievalActorStats>();
    peers->retrieval = system.spawn(retrieval, RetrievalDeps{parts.kv, parts.target, retrieval_stats});
  }
  std::shared_ptr<OffloadActorStats> offload_stats;
  if (parts.kv->host_tier()) {
    offload_stats = std::make_shared<OffloadActorStats>();
    peers->offload = system.spawn(offload, OffloadDeps{parts.kv, parts.offload_write_back, offload_stats, OffloadPolicy::longest});
  }
  peers->kv_router = system.spawn(
      kv_router, KvRouterDeps{peers, parts.kv, parts.sink, parts.prefill_chunk, offload_stats, parts.offload_write_back,
                                          parts.layerwise_prefill});
  peers->draft = spawn_forwarding(draft, DraftDeps{peers, parts.drafter});
  peers->scheduler =
      spawn_scheduler(system, SchedulerDeps{peers, parts.scheduler, parts.tokenizer, parts.planner, parts.view_planner,
                                            retrieval_stats});
  return peers;
}

}  // namespace specpipe::actors
