#include "model/load_model.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.h"
#include "model/safetensors.h"

#ifndef SPECPIPE_DEFAULT_MODELS_DIR
#define SPECPIPE_DEFAULT_MODELS_DIR ""
#endif

namespace specpipe {

std::unique_ptr<Transformer> load_transformer(const std::filesystem::path& model_dir) {
  ModelConfig config = ModelConfig::from_dir(model_dir);
  ModelWeights weights = load_weights(config, SafetensorsArchive::open(model_dir));
  return std::make_unique<Transformer>(std::move(config), std::move(weights));
}

std::filesystem::path resolve_model_dir(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  // The name comes from a config or a request: the error_code overloads make a name the
  // file system refuses (too long, say) a model not found, not a filesystem_error.
  std::error_code ec;
  if (fs::is_directory(name_or_path, ec)) return name_or_path;
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("SPECPIPE_MODELS")) roots.emplace_back(env);
  // The vendored models: next to a relocated bundle's bin/, then the source tree.
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) roots.push_back(exe.parent_path().parent_path() / "models");
  if (*SPECPIPE_DEFAULT_MODELS_DIR) roots.emplace_back(SPECPIPE_DEFAULT_MODELS_DIR);
  std::vector<std::string> tried;
  for (const fs::path& root : roots) {
    if (fs::is_directory(root / name_or_path, ec)) return root / name_or_path;
    tried.push_back((root / name_or_path).string());
  }
  fail(ErrorCode::not_found, "model '{}' not found (looked in: {})", name_or_path,
       fmt::join(tried, ", "));
}

}  // namespace specpipe
