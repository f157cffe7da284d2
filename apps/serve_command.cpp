// `specpipe serve --config FILE`: the ZeroMQ endpoint in front of the actor pipeline
// (docs/PROTOCOL.md). SIGINT / SIGTERM shut it down cleanly.
#include <csignal>
#include <cstdio>

#include "actors/engine.h"
#include "apps/commands.h"
#include "apps/pipeline_options.h"
#include "server/endpoint.h"

namespace specpipe::app {
namespace {

server::Endpoint* g_endpoint = nullptr;  // for the signal handler

extern "C" void on_signal(int) {
  if (g_endpoint) g_endpoint->stop();  // async-signal-safe: an atomic store and a write()
}

int run_serve(const PipelineOptions& opts, const std::string& endpoint) {
  PipelineConfig config = opts.config();
  if (!endpoint.empty()) config.server.endpoint = endpoint;
  apply_process_settings(config);
  actors::Engine engine(config);
  server::Endpoint server(engine, config);
  g_endpoint = &server;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::printf("specpipe: serving %s on %s (drafter %s, gamma %d)\n", config.models.target.c_str(),
              server.address().c_str(), to_string(config.drafter.type), config.drafter.gamma);
  std::fflush(stdout);
  server.run();
  g_endpoint = nullptr;
  std::printf("specpipe: stopped\n");
  return 0;
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto opts = std::make_shared<PipelineOptions>();
  auto endpoint = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("serve", "serve the pipeline on a ZeroMQ ROUTER socket (docs/PROTOCOL.md)");
  opts->add_to(*cmd);
  cmd->add_option("--endpoint", *endpoint, "bind address, e.g. tcp://127.0.0.1:5555 (default: the config's)");
  return [opts, endpoint] { return run_serve(*opts, *endpoint); };
}

}  // namespace specpipe::app
