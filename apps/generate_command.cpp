// `specpipe generate`: text generation through the actor pipeline, speculative by
// default on the demo pair; prints the text as it streams, then the statistics.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "actors/engine.h"
#include "apps/commands.h"
#include "apps/pipeline_options.h"
#include "core/error.h"
#include "kernels/cpu/thread_pool.h"

namespace specpipe::app {
namespace {

struct GenerateOptions {
  PipelineOptions pipeline;
  std::string prompt = "def fibonacci(n):\n";
  std::string prompt_file;
  std::vector<int32_t> prompt_ids;
  int32_t max_tokens = 64;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  CLI::Option *max_tokens_opt = nullptr, *temperature_opt = nullptr, *top_k_opt = nullptr, *top_p_opt = nullptr;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::not_found, "prompt file {} cannot be read", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_generate(const GenerateOptions& o) {
  const PipelineConfig config = o.pipeline.config();
  apply_process_settings(config);
  actors::Engine engine(config);
  actors::RequestSpec spec;
  spec.prompt = o.prompt_ids;
  if (spec.prompt.empty())
    spec.prompt = engine.tokenizer().encode(o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file));
  // Request parameters: the command line, else the config file's defaults section.
  const RequestDefaults& d = config.defaults;
  spec.params.max_tokens = o.max_tokens_opt->count() ? o.max_tokens : d.max_tokens;
  spec.params.sampling = {o.temperature_opt->count() ? o.temperature : d.temperature,
                          o.top_k_opt->count() ? o.top_k : d.top_k, o.top_p_opt->count() ? o.top_p : d.top_p};
  spec.params.seed = o.seed;
  spec.params.stop_at_eos = o.ignore_eos ? false : d.stop_at_eos;
  spec.stop = o.stop;

  const actors::Completion c = engine.generate(std::move(spec), [](const actors::TokenDelta& delta) {
    std::fputs(delta.text.c_str(), stdout);
    std::fflush(stdout);
  });
  if (c.reason == FinishReason::error) fail(ErrorCode::invalid_argument, "{}", c.error);
  std::fputs("\n---\n", stdout);
  std::fputs(format_summary(c, config).c_str(), stdout);
  if (!config.plugins.empty() || config.offload.enable)
    std::fputs(format_strategy_summary(engine.strategy_metrics()).c_str(), stdout);
  return 0;
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto opts = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt (speculative by default)");
  opts->pipeline.add_to(*cmd);
  cmd->add_option("--prompt", opts->prompt, "prompt text")->capture_default_str();
  cmd->add_option("--prompt-file", opts->prompt_file, "read the prompt from a file");
  cmd->add_option("--prompt-ids", opts->prompt_ids, "prompt as token ids (comma separated)")->delimiter(',');
  opts->max_tokens_opt = cmd->add_option("--max-tokens", opts->max_tokens, "tokens to generate")->capture_default_str()->check(CLI::NonNegativeNumber);
  opts->temperature_opt = cmd->add_option("--temperature", opts->temperature, "0 = greedy")->capture_default_str()->check(CLI::NonNegativeNumber);
  opts->top_k_opt = cmd->add_option("--top-k", opts->top_k, "0 = off")->capture_default_str()->check(CLI::NonNegativeNumber);
  opts->top_p_opt = cmd->add_option("--top-p", opts->top_p, "1 = off")->capture_default_str()->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--seed", opts->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--stop", opts->stop, "stop string (repeatable)");
  cmd->add_flag("--ignore-eos", opts->ignore_eos, "keep generating after the EOS token");
  return [opts] { return run_generate(*opts); };
}

}  // namespace specpipe::app
