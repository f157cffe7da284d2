#pragma once
/// Counts the ROUTER socket's handshakes through libzmq's socket monitor, so refusals are
/// visible (the `stats` reply's `security` block): a plain client at a CURVE endpoint
/// fails on the mechanism and never reaches the ZAP handler, a client with the wrong
/// server key fails on the cryptography. Like the ZAP handler, it is polled by the
/// endpoint's socket thread.
#include <cstdint>
#include <string>
#include <zmq.hpp>

namespace specpipe::server {

class HandshakeMonitor {
 public:
  /// Starts monitoring `watched` (before it binds, so no handshake is missed).
  HandshakeMonitor(zmq::context_t& context, zmq::socket_t& watched);

  zmq::socket_t& socket() { return socket_; }
  /// Reads every pending event (never blocks).
  void handle();

  int64_t succeeded() const { return succeeded_; }
  /// Failed on the protocol: wrong mechanism, bad cryptography (a wrong server key), ...
  int64_t failed_protocol() const { return failed_protocol_; }
  /// Refused by the ZAP handler.
  int64_t failed_auth() const { return failed_auth_; }
  /// The connection closed mid-handshake, or any other failure.
  int64_t failed_other() const { return failed_other_; }

 private:
  zmq::socket_t socket_;
  int64_t succeeded_ = 0, failed_protocol_ = 0, failed_auth_ = 0, failed_other_ = 0;
};

}  // namespace specpipe::server
