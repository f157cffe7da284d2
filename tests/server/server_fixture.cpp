#include "tests/server/server_fixture.h"

#include "core/error.h"

namespace specpipe::test {

LoopbackServer::LoopbackServer(PipelineConfig config) {
  config.server.endpoint = "tcp://127.0.0.1:*";
  engine_ = std::make_unique<actors::Engine>(config);
  endpoint_ = std::make_unique<server::Endpoint>(*engine_, config);
  loop_ = std::thread([this] { endpoint_->run(); });
}

LoopbackServer::~LoopbackServer() { stop(); }

void LoopbackServer::stop() {
  if (!loop_.joinable()) return;
  endpoint_->stop();
  loop_.join();
}

void LoopbackServer::close() {
  stop();
  endpoint_.reset();
}

Client::Client(zmq::context_t& context, const std::string& address, zmq::socket_type type,
               const server::ClientCurve& curve)
    : socket_(context, type) {
  socket_.set(zmq::sockopt::linger, 0);
  server::apply_client_curve(socket_, curve);
  socket_.connect(address);
}

void Client::send(const nlohmann::json& message) { send_raw(message.dump()); }

void Client::send_raw(const std::string& bytes) { socket_.send(zmq::buffer(bytes), zmq::send_flags::none); }

std::optional<nlohmann::json> Client::receive(int timeout_ms) {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) == 0) return std::nullopt;
  zmq::message_t msg;
  if (!socket_.recv(msg)) return std::nullopt;
  return nlohmann::json::parse(msg.to_string());
}

Client::Outcome Client::wait_for(const std::string& id, int timeout_ms) {
  Outcome out;
  for (;;) {
    auto reply = receive(timeout_ms);
    if (!reply) fail(ErrorCode::io, "no reply for request {} within {} ms", id, timeout_ms);
    if (reply->value("id", nlohmann::json()) != id) continue;  // another request's reply
    const std::string type = (*reply)["type"];
    if (type == "delta") {
      out.streamed_text += (*reply)["text"].get<std::string>();
      for (int32_t t : (*reply)["tokens"]) out.streamed_tokens.push_back(t);
      ++out.deltas;
      continue;
    }
    out.last = *reply;
    return out;
  }
}

void Client::close() { socket_.close(); }

nlohmann::json generate_request(const std::string& id, nlohmann::json fields) {
  fields["v"] = 1;
  fields["id"] = id;
  fields["type"] = "generate";
  return fields;
}

}  // namespace specpipe::test
