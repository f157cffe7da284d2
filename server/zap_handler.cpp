#include "server/zap_handler.h"

#include <spdlog/spdlog.h>

#include <iterator>
#include <vector>
#include <zmq_addon.hpp>

#include "core/error.h"

namespace specpipe::server {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";  // fixed by RFC 27

/// A Z85 rendering of a 32-byte key.
std::string z85_of(const zmq::message_t& key) {
  char text[41];
  if (key.size() != 32 || zmq_z85_encode(text, static_cast<const uint8_t*>(key.data()), 32) == nullptr) return {};
  return text;
}

}  // namespace

ZapHandler::ZapHandler(zmq::context_t& context, std::set<std::string> allowed)
    : socket_(context, zmq::socket_type::rep), allowed_(std::move(allowed)) {
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    fail(ErrorCode::io, "CURVE: cannot bind the ZAP handler at {}: {}", kZapEndpoint, e.what());
  }
}

void ZapHandler::handle() {
  for (;;) {
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(socket_, std::back_inserter(request), zmq::recv_flags::dontwait)) return;
    answer(request);
  }
}

void ZapHandler::answer(const std::vector<zmq::message_t>& request) {
  // version, request id, domain, address, routing id, mechanism, credentials...
  const bool well_formed = request.size() >= 6 && request[0].to_string_view() == "1.0";
  const std::string request_id = request.size() >= 2 ? request[1].to_string() : std::string();
  std::string key, status = "400", text = "client key not allowed";
  if (!well_formed) {
    text = "malformed ZAP request";
  } else if (request[5].to_string_view() != "CURVE" || request.size() != 7) {
    text = "only CURVE is accepted";
  } else {
    key = z85_of(request[6]);
    if (!key.empty() && allowed_.count(key)) status = "200", text = "OK";
  }
  const std::string address = request.size() >= 4 ? request[3].to_string() : std::string();
  if (status == "200") {
    ++admitted_;
    spdlog::debug("server: CURVE client {} admitted from {}", key, address);
  } else {
    ++refused_;
    spdlog::debug("server: CURVE handshake from {} refused: {}{}", address, text, key.empty() ? "" : " (" + key + ")");
  }
  // version, request id, status code, status text, user id, metadata.
  const std::string user_id = status == "200" ? key : std::string();
  for (const std::string& part : {std::string("1.0"), request_id, status, text, user_id})
    socket_.send(zmq::buffer(part), zmq::send_flags::sndmore);
  socket_.send(zmq::message_t{}, zmq::send_flags::none);
}

}  // namespace specpipe::server
