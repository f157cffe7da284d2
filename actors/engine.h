#pragma once
/// The engine: an actor system running the speculative pipeline, behind a small
/// thread-safe C++ API. The command line, the benchmarks and the tests use it; the
/// ZeroMQ endpoint talks to the same scheduler actor.
#include <atomic>
#include <functional>
#include <future>
#include <memory>

#include <nlohmann/json.hpp>

#include "actors/pipeline_builder.h"
#include "actors/response_sink.h"

namespace caf {
class actor_system;
class actor_system_config;
}  // namespace caf

namespace specpipe::actors {

struct RequestSpec {
  std::vector<int32_t> prompt;
  GenerationParams params;
  std::vector<std::string> stop;
  int32_t gamma = -1;  ///< -1: the pipeline's default
};

class Engine {
 public:
  /// Loads the pipeline and starts its actors. config.scheduler.actor_threads CAF threads:
  /// 1 suits the CPU backend (the kernels have their own pool and rounds are sequential;
  /// more threads only poll).
  explicit Engine(const PipelineConfig& config);
  /// The same over parts already loaded (a test may put a decorated model in them).
  Engine(PipelineParts parts, int32_t actor_threads);
  ~Engine();  ///< cancels what is running and stops the actors
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Starts a request; `sink` receives its deltas and completion (on an actor thread).
  RequestId submit(RequestSpec spec, std::shared_ptr<ResponseSink> sink);
  void cancel(RequestId id);
  /// Runs a request to completion (blocking) and returns its completion.
  Completion generate(RequestSpec spec, std::function<void(const TokenDelta&)> on_delta = {});
  /// Aggregate statistics of the requests finished so far (blocking query).
  SpecStats stats();
  /// How full the target KV store is, as the kv-router sees it now (blocking query:
  /// answered after every message the router had queued, releases included).
  KvOccupancy kv_occupancy();
  /// The same for the drafter's KV store (total_blocks 0 when it has none).
  KvOccupancy draft_kv_occupancy();
  /// The strategies in the kv_write and verify_plan slots and their counters (a plugin's
  /// own metrics, fallbacks, pool traffic): {"kv_write": {...}, "verify_plan": {...}},
  /// and with offload {"offload": {...}}: bytes moved to the host tier, its occupancy,
  /// the layer ring's loads and stalls.
  nlohmann::json strategy_metrics();

  const Tokenizer& tokenizer() const { return parts_.tokenizer; }
  const PipelineParts& parts() const { return parts_; }

 private:
  PipelineParts parts_;
  std::unique_ptr<caf::actor_system_config> caf_config_;
  std::unique_ptr<caf::actor_system> system_;
  std::shared_ptr<const Peers> peers_;
  std::atomic<RequestId> next_id_{1};
};

/// A ResponseSink from two callbacks.
class CallbackSink final : public ResponseSink {
 public:
  CallbackSink(std::function<void(const TokenDelta&)> on_delta, std::function<void(const Completion&)> on_complete)
      : on_delta_(std::move(on_delta)), on_complete_(std::move(on_complete)) {}
  void on_delta(const TokenDelta& d) override {
    if (on_delta_) on_delta_(d);
  }
  void on_complete(const Completion& c) override {
    if (on_complete_) on_complete_(c);
  }

 private:
  std::function<void(const TokenDelta&)> on_delta_;
  std::function<void(const Completion&)> on_complete_;
};

}  // namespace specpipe::actors
