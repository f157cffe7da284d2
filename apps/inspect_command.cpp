// `specpipe inspect <model dir>`: what a checkpoint holds, and whether its tokenizer loads
// and agrees with its config.
#include <cstdio>

#include "apps/commands.h"
#include "model/inspect.h"
#include "model/load_model.h"
#include "model/tokenizer/tokenizer.h"

namespace specpipe::app {
namespace {

int run_inspect(const std::string& model, bool list_tensors) {
  const auto dir = resolve_model_dir(model);
  nlohmann::json report = inspect_checkpoint(dir);
  if (!list_tensors) report.erase("tensors");

  const Tokenizer tokenizer = Tokenizer::from_file(dir / "tokenizer.json");
  const std::string probe = "def f(x):\n    return x  # ünïcödé ✓\n";
  const auto ids = tokenizer.encode(probe);
  nlohmann::json tok;
  tok["vocab_size"] = tokenizer.vocab_size();
  tok["round_trip_ok"] = tokenizer.decode(ids) == probe;
  tok["probe_tokens"] = ids.size();
  const int64_t config_vocab = report["config"]["vocab_size"].get<int64_t>();
  tok["fits_model_vocab"] = tokenizer.vocab_size() <= config_vocab;
  report["tokenizer"] = tok;
  std::printf("%s\n", report.dump(2).c_str());
  const bool weights_ok = report["weights"]["ok"].get<bool>();
  return weights_ok && tok["round_trip_ok"].get<bool>() && tok["fits_model_vocab"].get<bool>() ? 0 : 2;
}

}  // namespace

Runner add_inspect_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto tensors = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("inspect", "show a checkpoint's config, tensors and tokenizer check");
  cmd->add_option("model", *model, "model directory or name under models/")->required();
  cmd->add_flag("--tensors", *tensors, "list every tensor");
  return [model, tensors] { return run_inspect(*model, *tensors); };
}

}  // namespace specpipe::app
