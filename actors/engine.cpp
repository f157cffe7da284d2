#include "actors/engine.h"

#include <caf/all.hpp>

#include <utility>

#include "core/error.h"

namespace specpipe::actors {

Engine::Engine(const PipelineConfig& config) : Engine(load_pipeline(config), config.scheduler.actor_threads) {}

Engine::Engine(PipelineParts parts, int32_t actor_threads) : parts_(std::move(parts)) {
  caf_config_ = std::make_unique<caf::actor_system_config>();
  caf_config_->set("scheduler.max-threads", static_cast<size_t>(std::max(1, actor_threads)));
  caf_config_->set("logger.verbosity", caf::atom("quiet"));
  system_ = std::make_unique<caf::actor_system>(*caf_config_);
  peers_ = spawn_pipeline(*system_, parts_);
}

Engine::~Engine() {
  for (const caf::strong_actor_ptr& a :
       {caf::actor_cast<caf::strong_actor_ptr>(peers_->scheduler), caf::actor_cast<caf::strong_actor_ptr>(peers_->draft),
        caf::actor_cast<caf::strong_actor_ptr>(peers_->kv_router), caf::actor_cast<caf::strong_actor_ptr>(peers_->verifier)})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  peers_.reset();
  system_->await_all_actors_done();
  system_.reset();
}

RequestId Engine::submit(RequestSpec spec, std::shared_ptr<ResponseSink> sink) {
  const RequestId id = next_id_++;
  SubmitRequest r;
  r.id = id;
  r.prompt = std::move(spec.prompt);
  r.params = std::move(spec.params);
  r.stop = std::move(spec.stop);
  r.gamma = spec.gamma;
  r.sink = std::move(sink);
  caf::anon_send(peers_->scheduler, std::move(r));
  return id;
}

void Engine::cancel(RequestId id) { caf::anon_send(peers_->scheduler, CancelRequest{id}); }

Completion Engine::generate(RequestSpec spec, std::function<void(const TokenDelta&)> on_delta) {
  auto done = std::make_shared<std::promise<Completion>>();
  auto result = done->get_future();
  submit(std::move(spec), std::make_shared<CallbackSink>(std::move(on_delta),
                                                        [done](const Completion& c) { done->set_value(c); }));
  return result.get();
}

SpecStats Engine::stats() {
  caf::scoped_actor self{*system_};
  SpecStats out;
  self->request(peers_->scheduler, caf::infinite, StatsQuery{})
      .receive([&](const SpecStats& s) { out = s; },
               [&](const caf::error& e) { fail(ErrorCode::internal, "stats query failed: {}", system_->render(e)); });
  return out;
}

}  // namespace specpipe::actors

namespace specpipe::actors {
namespace {
template <typename Handle>
KvOccupancy query_occupancy(caf::actor_system& system, const Handle& actor) {
  caf::scoped_actor self{system};
  KvOccupancy out;
  self->request(actor, caf::infinite, KvQuery{})
      .receive([&](const KvOccupancy& o) { out = o; },
               [&](const caf::error& e) { fail(ErrorCode::internal, "KV query failed: {}", system.render(e)); });
  return out;
}
}  // namespace

KvOccupancy Engine::kv_occupancy() { return query_occupancy(*system_, peers_->kv_router); }
KvOccupancy Engine::draft_kv_occupancy() { return query_occupancy(*system_, peers_->draft); }

}  // namespace specpipe::actors

namespace specpipe::actors {

nlohmann::json Engine::strategy_metrics() {
  caf::scoped_actor self{*system_};
  nlohmann::json out;
  auto ask = [&](const char* key, const auto& actor) {
    self->request(actor, caf::infinite, StrategyMetricsQuery{})
        .receive([&](const std::string& text) { out[key] = nlohmann::json::parse(text); },
                 [&](const caf::error& e) { fail(ErrorCode::internal, "metrics query failed: {}", system_->render(e)); });
  };
  ask("kv_write", peers_->kv_router);
  ask("verify_plan", peers_->scheduler);
  // The scheduler answers for both of its slots: verify_view gets its own key.
  if (out["verify_plan"].contains("verify_view")) {
    out["verify_view"] = out["verify_plan"]["verify_view"];
    out["verify_plan"].erase("verify_view");
  }
  // Offload: the router's host tier traffic and the target's layer ring, side by side.
  if (out["kv_write"].contains("offload")) {
    out["offload"] = out["kv_write"]["offload"];
    out["kv_write"].erase("offload");
    const RingStats ring = parts_.target->ring_stats();
    out["offload"]["ring_forwards"] = ring.forwards;
    out["offload"]["ring_loads"] = ring.loads;
    out["offload"]["ring_bytes_loaded"] = ring.bytes_loaded;
    out["offload"]["ring_stalls"] = ring.stalls;
    out["offload"]["ring_stall_ms"] = ring.stall_ms;
  }
  return out;
}

}  // namespace specpipe::actors
