// `specpipe generate`: text generation on a model pair (plain decoding for now).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "apps/commands.h"
#include "core/error.h"
#include "kernels/cpu/thread_pool.h"
#include "model/load_model.h"
#include "model/tokenizer/incremental_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "pipeline/plain_generator.h"

namespace specpipe::app {
namespace {

struct GenerateOptions {
  std::string model = "demo-target";
  std::string prompt = "def fibonacci(n):\n";
  std::string prompt_file;
  std::vector<int32_t> prompt_ids;
  int32_t max_tokens = 64;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  int32_t kv_blocks = 0;  // 0: enough for the prompt and max_tokens
  int32_t block_size = 16;
  int32_t prefill_chunk = 256;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::not_found, "prompt file {} cannot be read", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_generate(const GenerateOptions& o) {
  const auto dir = resolve_model_dir(o.model);
  auto model = load_transformer(dir);
  const Tokenizer tokenizer = Tokenizer::from_file(dir / "tokenizer.json");

  std::vector<int32_t> prompt = o.prompt_ids;
  if (prompt.empty()) prompt = tokenizer.encode(o.prompt_file.empty() ? o.prompt : read_file(o.prompt_file));

  int32_t blocks = o.kv_blocks;
  if (blocks == 0)
    blocks = static_cast<int32_t>((prompt.size() + static_cast<size_t>(o.max_tokens) + 1) / static_cast<size_t>(o.block_size) + 2);
  KvStore kv(model->kv_config(blocks, o.block_size));

  GenerationParams params;
  params.max_tokens = o.max_tokens;
  params.sampling = {o.temperature, o.top_k, o.top_p};
  params.seed = o.seed;
  params.stop_at_eos = !o.ignore_eos;

  IncrementalDecoder stream(tokenizer);
  PlainGenerator generator(*model, kv, o.prefill_chunk);
  GenerationResult r = generator.generate(prompt, params, [&](int32_t token) {
    std::fputs(stream.push(token).c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputs(stream.flush().c_str(), stdout);
  std::fprintf(stdout,
               "\n---\nprompt tokens: %d | generated: %zu (%s) | prefill: %.1f ms | decode: %.1f tok/s | "
               "threads: %d | mode: plain\n",
               r.prompt_tokens, r.tokens.size(), to_string(r.finish), r.prefill_ms,
               r.decode_tokens_per_s(), cpu::num_threads());
  return 0;
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto opts = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt");
  cmd->add_option("--model", opts->model, "model directory or name under models/")->capture_default_str();
  cmd->add_option("--prompt", opts->prompt, "prompt text")->capture_default_str();
  cmd->add_option("--prompt-file", opts->prompt_file, "read the prompt from a file");
  cmd->add_option("--prompt-ids", opts->prompt_ids, "prompt as token ids (comma separated)")->delimiter(',');
  cmd->add_option("--max-tokens", opts->max_tokens, "tokens to generate")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", opts->temperature, "0 = greedy")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", opts->top_k, "0 = off")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", opts->top_p, "1 = off")->capture_default_str()->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--seed", opts->seed, "sampling seed")->capture_default_str();
  cmd->add_flag("--ignore-eos", opts->ignore_eos, "keep generating after the EOS token");
  cmd->add_option("--kv-blocks", opts->kv_blocks, "KV pool size in blocks (0 = fit the request)")->capture_default_str();
  cmd->add_option("--block-size", opts->block_size, "tokens per KV block")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--prefill-chunk", opts->prefill_chunk, "prompt tokens per prefill window")->capture_default_str()->check(CLI::PositiveNumber);
  return [opts] { return run_generate(*opts); };
}

}  // namespace specpipe::app
