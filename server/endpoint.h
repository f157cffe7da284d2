#pragma once
/// The ZeroMQ endpoint: a ROUTER socket that feeds the actor pipeline (docs/PROTOCOL.md).
///
/// One thread runs the socket (ZeroMQ sockets belong to one thread): it reads requests,
/// submits them to the Engine, and sends the replies that the scheduler's sinks queue
/// for it; an eventfd wakes the loop when there is something to send or when stop() is
/// called (safe from a signal handler).
///
/// Security (docs/PROTOCOL.md, "Security"): with server.curve the socket is a CURVE
/// server whose ZAP handler admits only the configured client keys; without it, an
/// address other machines can reach is refused unless server.allow_insecure. Each client
/// (its CURVE key, else its connection) may have server.max_inflight_per_client generate
/// requests in flight.
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <string>

#include "actors/engine.h"
#include "pipeline/pipeline_config.h"

namespace specpipe::server {

class Endpoint {
 public:
  /// Binds config.server.endpoint ("tcp://127.0.0.1:0" picks a free port). Throws
  /// specpipe::Error: io if it cannot bind; invalid_argument for a non-loopback address
  /// without CURVE or allow_insecure, or a key that cannot be loaded.
  Endpoint(actors::Engine& engine, const PipelineConfig& config);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  /// The address actually bound (with the port a wildcard resolved to).
  const std::string& address() const { return address_; }

  /// Serves until stop(); then refuses new requests, lets in-flight ones finish for
  /// shutdown_grace_ms, cancels the rest, delivers every final message and returns. A
  /// client that stops reading gets another shutdown_grace_ms for what is queued to it,
  /// here and (when the Endpoint is destroyed) in ZeroMQ's queues.
  void run();
  /// Asks run() to shut down. Async-signal-safe.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace specpipe::server
