#include "server/bind_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "core/error.h"

namespace specpipe::server {

bool is_loopback_host(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") return true;
  const std::string h(host);
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

bool is_local_zmq_address(std::string_view address) {
  if (address.starts_with("ipc://") || address.starts_with("inproc://")) return true;
  if (!address.starts_with("tcp://")) return false;
  address.remove_prefix(6);
  const size_t colon = address.rfind(':');
  return colon != std::string_view::npos && is_loopback_host(address.substr(0, colon));
}

void check_endpoint_bind_policy(const ServerConfig& server) {
  if (server.curve.enabled() || server.allow_insecure || is_local_zmq_address(server.endpoint)) return;
  fail(ErrorCode::invalid_argument,
       "server.endpoint {}: not a loopback address, and CURVE is off: anyone who reaches it could generate, cancel and "
       "read stats. Configure server.curve (specpipe keygen; docs/PROTOCOL.md, \"Security\"), bind 127.0.0.1, or set "
       "server.allow_insecure: true",
       server.endpoint);
}

}  // namespace specpipe::server
