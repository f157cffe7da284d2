#pragma once
/// Command-line options that configure the pipeline (shared by generate, bench and
/// serve), and the statistics summary they print. `--config FILE` loads a pipeline YAML
/// file; options given explicitly on the command line override its values.
#include <CLI/CLI.hpp>

#include <string>

#include "actors/engine.h"

namespace specpipe::app {

class PipelineOptions {
 public:
  void add_to(CLI::App& cmd);
  /// The config file (or the defaults), with the explicitly given options applied.
  PipelineConfig config() const;
  /// The same for another config file (empty: the defaults).
  PipelineConfig config_from(const std::string& file) const;
  bool speculative() const;

 private:
  std::string config_file_;
  PipelineConfig defaults_;  // holds the option values; only given ones are applied
  std::string drafter_ = "model";
  std::string device_ = "cpu";
  std::string kv_tokens_ = "16384";
  bool no_spec_ = false;
  bool offload_ = false;
  std::vector<std::pair<CLI::Option*, void (*)(const PipelineOptions&, PipelineConfig&)>> overrides_;
};

/// Process-wide settings given before the subcommand (`specpipe --threads N
/// --log-level L ...`); they win over a config file's `threads` and `logging.level`.
struct GlobalOptions {
  int threads = -1;       ///< -1: not given
  std::string log_level;  ///< empty: not given
};
GlobalOptions& global_options();

/// Applies a config's kernel threads and log level, unless given on the command line.
void apply_process_settings(const PipelineConfig& config);

/// The per-request statistics block printed after generation.
std::string format_summary(const actors::Completion& c, const PipelineConfig& config);
/// One line per strategy slot filled by a plugin (Engine::strategy_metrics()).
std::string format_strategy_summary(const nlohmann::json& metrics);

}  // namespace specpipe::app
