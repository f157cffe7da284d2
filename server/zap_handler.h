#pragma once
/// The ZAP handler (ZeroMQ RFC 27) of a CURVE endpoint: a REP socket on
/// inproc://zeromq.zap.01 in the endpoint's context. libzmq asks it about every CURVE
/// handshake (the client's long-term public key) before the connection may carry a
/// message; it admits only the configured public keys and names the client by its Z85
/// public key (the messages' "User-Id" property), which the endpoint keys its
/// per-client limits by.
///
/// It belongs to the endpoint's socket thread: the endpoint polls socket() beside its
/// ROUTER socket and calls handle() when it is readable. Bound before the ROUTER socket:
/// without a handler libzmq would admit every CURVE client.
#include <cstdint>
#include <set>
#include <string>
#include <zmq.hpp>

namespace specpipe::server {

class ZapHandler {
 public:
  /// `allowed`: Z85 public keys.
  ZapHandler(zmq::context_t& context, std::set<std::string> allowed);

  zmq::socket_t& socket() { return socket_; }
  /// Answers every pending ZAP request (never blocks).
  void handle();

  int64_t admitted() const { return admitted_; }
  /// Handshakes refused because the client's key is not allowed.
  int64_t refused() const { return refused_; }

 private:
  void answer(const std::vector<zmq::message_t>& request);

  zmq::socket_t socket_;
  std::set<std::string> allowed_;
  int64_t admitted_ = 0;
  int64_t refused_ = 0;
};

}  // namespace specpipe::server
