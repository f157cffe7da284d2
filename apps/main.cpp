// specpipe: the command line. Errors from the engine arrive as specpipe::Error and are
// reported here, once, as one line on stderr.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

#include "apps/commands.h"
#include "core/error.h"
#include "core/logging.h"
#include "apps/pipeline_options.h"
#include "kernels/cpu/thread_pool.h"

int main(int argc, char** argv) {
  CLI::App app{"specpipe: lossless speculative decoding engine"};
  app.require_subcommand(1);
  specpipe::app::GlobalOptions& globals = specpipe::app::global_options();
  app.add_option("--log-level", globals.log_level, "trace, debug, info, warn, error, off (default: the config's, else warn)");
  app.add_option("--threads", globals.threads, "CPU threads for the kernels (0 = all cores; default: the config's)");

  std::map<CLI::App*, specpipe::app::Runner> runners;
  auto add = [&](auto adder, const char* name) {
    auto runner = adder(app);
    runners[app.get_subcommand(name)] = std::move(runner);
  };
  add(specpipe::app::add_generate_command, "generate");
  add(specpipe::app::add_inspect_command, "inspect");
  add(specpipe::app::add_bench_command, "bench");
  add(specpipe::app::add_validate_config_command, "validate-config");
  add(specpipe::app::add_serve_command, "serve");
  add(specpipe::app::add_client_command, "client");
  add(specpipe::app::add_keygen_command, "keygen");

  CLI11_PARSE(app, argc, argv);
  try {
    // Commands that load a pipeline config apply it (apply_process_settings); these
    // defaults hold for the others.
    specpipe::init_logging(globals.log_level.empty() ? "warn" : globals.log_level);
    if (globals.threads >= 0) specpipe::cpu::set_num_threads(globals.threads);
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const specpipe::Error& e) {
    std::fprintf(stderr, "specpipe: error [%s]: %s\n", std::string(specpipe::to_string(e.code())).c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "specpipe: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
