#pragma once
/// The OpenAI-style HTTP gateway (docs/HTTP.md): an HTTP/1.1 server on Boost.Beast that
/// turns POST /v1/completions and /v1/chat/completions into Engine::submit, the same
/// request path as the ZeroMQ endpoint (server/admission.h), and serves /v1/models,
/// /health and /metrics. One Asio thread runs every connection; the engine's sinks post
/// their deltas and completions onto it, so no connection state is shared between threads.
#include <chrono>
#include <memory>
#include <string>

#include "actors/engine.h"
#include "pipeline/pipeline_config.h"

namespace specpipe::server::http {

class Gateway {
 public:
  /// Binds config.server.http ("HOST:PORT"; port 0 picks a free one) and starts serving
  /// on its own thread. Throws specpipe::Error(io) if it cannot resolve or bind.
  Gateway(actors::Engine& engine, const PipelineConfig& config);
  ~Gateway();  ///< shutdown(0) unless done
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  /// "HOST:PORT" actually bound.
  const std::string& address() const { return address_; }
  /// Completion requests of this gateway in the engine now.
  int64_t inflight() const;

  /// Stops accepting connections and answers new requests 503; lets in-flight requests
  /// run for `grace`, cancels the rest, sends their last events, then stops the thread.
  /// Not async-signal-safe: call it from a normal thread. Idempotent.
  void shutdown(std::chrono::milliseconds grace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace specpipe::server::http
