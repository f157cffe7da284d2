// `specpipe serve --config FILE`: the ZeroMQ endpoint (docs/PROTOCOL.md) and, with
// --http or server.http, the OpenAI-style HTTP gateway (docs/HTTP.md) in front of the
// one actor pipeline. SIGINT / SIGTERM shut both down cleanly.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.h"
#include "apps/commands.h"
#include "apps/pipeline_options.h"
#include "core/error.h"
#include "server/bind_policy.h"
#include "server/endpoint.h"
#include "server/http/gateway.h"

namespace specpipe::app {
namespace {

server::Endpoint* g_endpoint = nullptr;  // for the signal handler
int g_signal_pipe[2] = {-1, -1};         // the handler writes a byte: the HTTP gateway's cue

extern "C" void on_signal(int) {
  if (g_endpoint) g_endpoint->stop();  // async-signal-safe: an atomic store and a write()
  const char byte = 's';
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
}

/// Blocks until the signal handler has written its byte.
void wait_for_signal() {
  char byte;
  while (::read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
}

/// Security options of `serve`; each given one wins over the config's server section.
struct SecurityOptions {
  std::string curve_secret_key;
  std::vector<std::string> curve_allow;
  bool allow_insecure = false;
};

int run_serve(const PipelineOptions& opts, const std::string& endpoint, const std::string& http, bool http_only,
              const SecurityOptions& security) {
  PipelineConfig config = opts.config();
  if (!endpoint.empty()) config.server.endpoint = endpoint;
  if (!http.empty()) config.server.http = http;
  if (!security.curve_secret_key.empty()) config.server.curve.secret_key = security.curve_secret_key;
  if (!security.curve_allow.empty()) config.server.curve.allowed_clients = security.curve_allow;
  if (config.server.curve.enabled() != !config.server.curve.allowed_clients.empty())
    fail(ErrorCode::invalid_argument, "CURVE needs both the server's secret key (--curve-secret-key or "
                                      "server.curve.secret_key) and the allowed client keys (--curve-allow or "
                                      "server.curve.allowed_clients)");
  if (security.allow_insecure) config.server.allow_insecure = true;
  if (!http_only) server::check_endpoint_bind_policy(config.server);  // before minutes of model loading
  if (http_only && config.server.http.empty()) fail(ErrorCode::invalid_argument, "--http-only needs --http ADDR (or server.http)");
  apply_process_settings(config);
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) fail(ErrorCode::io, "serve: cannot create a pipe");
  actors::Engine engine(config);
  std::unique_ptr<server::Endpoint> zmq_server;
  if (!http_only) zmq_server = std::make_unique<server::Endpoint>(engine, config);
  std::unique_ptr<server::http::Gateway> gateway;
  if (!config.server.http.empty()) gateway = std::make_unique<server::http::Gateway>(engine, config);
  g_endpoint = zmq_server.get();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::printf("specpipe: serving %s on %s%s%s%s (drafter %s, gamma %d)\n", config.models.target.c_str(),
              zmq_server ? zmq_server->address().c_str() : "",
              zmq_server && config.server.curve.enabled() ? " (CURVE)" : "", zmq_server && gateway ? " and " : "",
              gateway ? ("http://" + gateway->address()).c_str() : "", to_string(config.drafter.type), config.drafter.gamma);
  std::fflush(stdout);
  const auto grace = std::chrono::milliseconds(config.server.shutdown_grace_ms);
  // The gateway winds down on its own thread, at the same time as the ZeroMQ endpoint.
  std::thread http_stopper;
  if (gateway && zmq_server) http_stopper = std::thread([&] {
    wait_for_signal();
    gateway->shutdown(grace);
  });
  if (zmq_server) {
    zmq_server->run();
  } else {
    wait_for_signal();
    gateway->shutdown(grace);
  }
  if (http_stopper.joinable()) http_stopper.join();
  g_endpoint = nullptr;
  std::printf("specpipe: stopped\n");
  return 0;
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto opts = std::make_shared<PipelineOptions>();
  auto endpoint = std::make_shared<std::string>();
  auto http = std::make_shared<std::string>();
  auto http_only = std::make_shared<bool>(false);
  auto security = std::make_shared<SecurityOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "serve the pipeline on a ZeroMQ ROUTER socket (docs/PROTOCOL.md) and/or HTTP (docs/HTTP.md)");
  opts->add_to(*cmd);
  cmd->add_option("--endpoint", *endpoint, "ZeroMQ bind address, e.g. tcp://127.0.0.1:5555 (default: the config's)");
  cmd->add_option("--http", *http, "also serve the OpenAI-style HTTP API on HOST:PORT, e.g. 127.0.0.1:8000 (server.http)");
  cmd->add_flag("--http-only", *http_only, "serve HTTP only: no ZeroMQ socket");
  cmd->add_option("--curve-secret-key", security->curve_secret_key,
                  "CURVE: the server's secret key, a file from `specpipe keygen` or a Z85 key (server.curve.secret_key)");
  cmd->add_option("--curve-allow", security->curve_allow,
                  "CURVE: a client public key admitted, file or Z85 key; repeatable (server.curve.allowed_clients)");
  cmd->add_flag("--allow-insecure", security->allow_insecure,
                "serve a non-loopback address without authentication (server.allow_insecure)");
  return [opts, endpoint, http, http_only, security] {
    return run_serve(*opts, *endpoint, *http, *http_only, *security);
  };
}

}  // namespace specpipe::app
