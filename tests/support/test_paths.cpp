#include "tests/support/test_paths.h"

#include <cstdlib>

#include <unistd.h>

#include <atomic>
#include <string>

namespace specpipe::test {

// $SPECPIPE_SOURCE_DIR: the checkout when the test binaries run elsewhere (a GPU bundle).
std::filesystem::path source_dir() {
  const char* env = std::getenv("SPECPIPE_SOURCE_DIR");
  return env && *env ? env : SPECPIPE_SOURCE_DIR;
}
std::filesystem::path model_dir(const char* name) { return source_dir() / "models" / name; }
std::filesystem::path data_path(const char* name) { return source_dir() / "tests" / "data" / name; }

std::string plugin_library(const char* built) {
  const char* env = std::getenv("SPECPIPE_PLUGIN_DIR");
  if (!env || !*env) return built;
  return (std::filesystem::path(env) / std::filesystem::path(built).filename()).string();
}

std::filesystem::path scratch_dir(const char* tag) {
  static std::atomic<int> counter{0};
  auto dir = std::filesystem::temp_directory_path() /
             ("specpipe-test-" + std::string(tag) + "-" + std::to_string(::getpid()) + "-" +
              std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace specpipe::test
