#pragma once
/// Which bind addresses are reachable only from this machine. The ZeroMQ endpoint
/// refuses any other address without CURVE, and the HTTP gateway (which has no
/// authentication) refuses any other address, unless the config says
/// `server.allow_insecure: true` (docs/PROTOCOL.md, "Security").
#include <string_view>

#include "pipeline/pipeline_config.h"

namespace specpipe::server {

/// True for a loopback host: localhost, 127.0.0.0/8, ::1 (brackets allowed). Wildcards
/// ("*", 0.0.0.0, ::), other addresses and interface names are false.
bool is_loopback_host(std::string_view host);

/// True for a ZeroMQ address only this machine can reach: ipc://, inproc://, or tcp://
/// on a loopback host.
bool is_local_zmq_address(std::string_view address);

/// Throws Error(invalid_argument) when server.endpoint is not local, CURVE is off and
/// allow_insecure is false; the message says how to fix it.
void check_endpoint_bind_policy(const ServerConfig& server);

}  // namespace specpipe::server
