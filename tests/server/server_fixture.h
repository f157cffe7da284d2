#pragma once
// A real server on loopback for tests: an Engine on the demo pair, an Endpoint bound to a
// free TCP port, its loop on a thread; and a small DEALER client.
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "actors/engine.h"
#include "server/curve_keys.h"
#include "server/endpoint.h"

namespace specpipe::test {

class LoopbackServer {
 public:
  explicit LoopbackServer(PipelineConfig config);
  ~LoopbackServer();
  const std::string& address() const { return endpoint_->address(); }
  actors::Engine& engine() { return *engine_; }
  server::Endpoint& endpoint() { return *endpoint_; }
  /// Stops the loop and waits for run() to return.
  void stop();
  /// stop(), then closes the endpoint's sockets as a `specpipe serve` process does on its
  /// way out: what the loop sent last must still reach its clients.
  void close();

 private:
  std::unique_ptr<actors::Engine> engine_;
  std::unique_ptr<server::Endpoint> endpoint_;
  std::thread loop_;
};

class Client {
 public:
  /// `curve`: the server's public key and this client's secret key (empty: no CURVE).
  Client(zmq::context_t& context, const std::string& address, zmq::socket_type type = zmq::socket_type::dealer,
         const server::ClientCurve& curve = {});
  void send(const nlohmann::json& message);
  void send_raw(const std::string& bytes);
  /// The next reply, or nullopt after `timeout_ms`.
  std::optional<nlohmann::json> receive(int timeout_ms = 60000);
  /// Replies for request `id` until its final or error; the deltas' text is concatenated.
  struct Outcome {
    nlohmann::json last;       ///< the final or error message
    std::string streamed_text;
    std::vector<int32_t> streamed_tokens;
    int deltas = 0;
  };
  Outcome wait_for(const std::string& id, int timeout_ms = 120000);
  void close();

 private:
  zmq::socket_t socket_;
};

/// {"v":1,"id":id,"type":"generate", ...fields}
nlohmann::json generate_request(const std::string& id, nlohmann::json fields);

}  // namespace specpipe::test
