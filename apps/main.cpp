// specpipe: the command line. Errors from the engine arrive as specpipe::Error and are
// reported here, once, as one line on stderr.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

#include "apps/commands.h"
#include "core/error.h"
#include "core/logging.h"
#include "kernels/cpu/thread_pool.h"

int main(int argc, char** argv) {
  CLI::App app{"specpipe: lossless speculative decoding engine"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  int threads = 0;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads for the kernels (0 = all cores)")->capture_default_str();

  std::map<CLI::App*, specpipe::app::Runner> runners;
  auto add = [&](auto adder, const char* name) {
    auto runner = adder(app);
    runners[app.get_subcommand(name)] = std::move(runner);
  };
  add(specpipe::app::add_generate_command, "generate");
  add(specpipe::app::add_inspect_command, "inspect");
  add(specpipe::app::add_bench_command, "bench");

  CLI11_PARSE(app, argc, argv);
  try {
    specpipe::init_logging(log_level);
    specpipe::cpu::set_num_threads(threads);
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
