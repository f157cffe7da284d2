#pragma once
/// Command-line options that configure the pipeline (shared by generate and bench),
/// and the statistics summary they print.
#include <CLI/CLI.hpp>

#include <string>

#include "actors/engine.h"

namespace specpipe::app {

struct PipelineOptions {
  std::string model = "demo-target";
  std::string draft = "demo-draft";
  std::string drafter = "model";  ///< model, ngram
  bool no_spec = false;
  int32_t gamma = 4;
  int32_t ngram_max = 3, ngram_min = 1;
  int64_t kv_tokens = 16384;
  int32_t block_size = 16;
  int32_t prefill_chunk = 256;
  int32_t max_batch = 32;

  void add_to(CLI::App& cmd);
  /// The pipeline: `--config FILE` if given, with these options applied on top when set.
  PipelineConfig engine_config() const;
};

/// The per-request statistics block printed after generation.
std::string format_summary(const actors::Completion& c, const PipelineOptions& o);

}  // namespace specpipe::app
