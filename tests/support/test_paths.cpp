#include "tests/support/test_paths.h"

#include <cstdlib>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <string>
#include <system_error>

namespace specpipe::test {
namespace {

/// Tests write models, configs and copies of the 7 MB demo draft into scratch dirs: remove
/// this process's at exit unless a test failed, when they are evidence. Registered here,
/// beside scratch_dir, so every test binary that makes one cleans up after itself.
class RemoveScratchDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    if (::testing::UnitTest::GetInstance()->failed_test_count() > 0) return;
    const std::string suffix = fmt::format("-{}-", ::getpid());
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(
             std::filesystem::temp_directory_path(), ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("specpipe-test-") && name.find(suffix) != std::string::npos)
        std::filesystem::remove_all(entry.path(), ec);
    }
  }
};

[[maybe_unused]] const auto* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new RemoveScratchDirs());

}  // namespace

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
