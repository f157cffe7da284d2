#pragma once
/// The `specpipe` subcommands. Each registers its options on the CLI11 app and returns
/// the function that runs it (exit code).
#include <CLI/CLI.hpp>

#include <functional>

namespace specpipe::app {

using Runner = std::function<int()>;

Runner add_generate_command(CLI::App& app);
Runner add_inspect_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_validate_config_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);
Runner add_client_command(CLI::App& app);
Runner add_keygen_command(CLI::App& app);

}  // namespace specpipe::app
