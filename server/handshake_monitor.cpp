#include "server/handshake_monitor.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>

#include "core/error.h"

namespace specpipe::server {

HandshakeMonitor::HandshakeMonitor(zmq::context_t& context, zmq::socket_t& watched)
    : socket_(context, zmq::socket_type::pair) {
  // One inproc name per monitor: two endpoints may share a process (tests do).
  static std::atomic<int> next{0};
  const std::string address = "inproc://specpipe.handshakes." + std::to_string(next++);
  const int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
  if (zmq_socket_monitor(watched.handle(), address.c_str(), events) != 0)
    fail(ErrorCode::io, "server: cannot monitor the endpoint's handshakes: {}", zmq_strerror(zmq_errno()));
  socket_.set(zmq::sockopt::linger, 0);
  socket_.connect(address);
}

void HandshakeMonitor::handle() {
  for (;;) {
    // Two frames per event: 2 bytes of event id and 4 of value, then the peer's address.
    zmq::message_t head;
    if (!socket_.recv(head, zmq::recv_flags::dontwait)) return;
    zmq::message_t address;
    if (head.more() && !socket_.recv(address)) return;
    if (head.size() < 6) continue;
    uint16_t event;
    uint32_t value;
    std::memcpy(&event, head.data(), 2);
    std::memcpy(&value, static_cast<const char*>(head.data()) + 2, 4);
    switch (event) {
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: ++succeeded_; break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: ++failed_auth_; break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        ++failed_protocol_;
        spdlog::debug("server: handshake from {} failed: protocol error 0x{:x}", address.to_string(), value);
        break;
      default: ++failed_other_; break;
    }
  }
}

}  // namespace specpipe::server
