#pragma once
/// What every connection of the gateway shares (internal to server/http/). Touched from
/// the gateway's Asio thread, except the atomics and `active` (the shutdown caller).
#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "actors/engine.h"
#include "pipeline/pipeline_config.h"
#include "server/http/chat_template.h"
#include "server/http/metrics.h"

namespace specpipe::server::http {

struct GatewayState {
  actors::Engine& engine;
  PipelineConfig config;
  ChatTemplate chat_template;
  std::string model_name;  ///< the target directory's name: /v1/models and `model`
  Metrics metrics;
  std::atomic<int64_t> inflight{0};  ///< completion requests submitted and not yet complete
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> next_response_id{1};
  std::atomic<int64_t> writing{0};   ///< connections with a write outstanding (shutdown drains them)

  /// Engine ids of the requests in flight, so shutdown can cancel them.
  std::mutex active_mutex;
  std::map<uint64_t, RequestId> active;  // response id -> engine id

  GatewayState(actors::Engine& e, const PipelineConfig& c);
};

}  // namespace specpipe::server::http
