#pragma once
// The HTTP gateway on loopback for tests: an Engine on the demo pair and a Gateway bound
// to a free port (no ZeroMQ socket), plus helpers to wait for the KV pool to empty.
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "actors/engine.h"
#include "server/http/gateway.h"
#include "tests/server/http_client.h"
#include "tests/support/engine.h"

namespace specpipe::test {

inline PipelineConfig http_config() {
  PipelineConfig c = demo_engine_config();
  c.server.http = "127.0.0.1:0";
  c.server.max_message_bytes = 64 * 1024;
  c.server.http_timeout_ms = 2000;
  c.scheduler.max_queue = 256;
  return c;
}

class LoopbackGateway {
 public:
  explicit LoopbackGateway(PipelineConfig config = http_config())
      : engine_(std::make_unique<actors::Engine>(config)),
        gateway_(std::make_unique<server::http::Gateway>(*engine_, config)) {}
  ~LoopbackGateway() { gateway_.reset(); }
  const std::string& address() const { return gateway_->address(); }
  actors::Engine& engine() { return *engine_; }
  server::http::Gateway& gateway() { return *gateway_; }

  /// True once no request is in flight and the KV pool holds no sequence (every block free
  /// or evictable), within `timeout_ms`.
  bool kv_back_to_empty(int timeout_ms = 20000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const KvOccupancy kv = engine_->kv_occupancy();
      if (gateway_->inflight() == 0 && kv.sequences == 0 && kv.free_blocks == kv.total_blocks) return true;
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  std::unique_ptr<actors::Engine> engine_;
  std::unique_ptr<server::http::Gateway> gateway_;
};

}  // namespace specpipe::test
