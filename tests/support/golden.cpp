#include "tests/support/golden.h"

#include <fstream>

#include "core/error.h"
#include "tests/support/test_paths.h"

namespace specpipe::test {
namespace {
nlohmann::json load(const char* name) {
  std::ifstream in(data_path(name));
  if (!in) fail(ErrorCode::not_found, "golden data {} not found", data_path(name).string());
  return nlohmann::json::parse(in);
}
}  // namespace

const nlohmann::json& golden_public() {
  static const nlohmann::json j = load("golden-public.json");
  return j;
}
const nlohmann::json& golden_long() {
  static const nlohmann::json j = load("golden-long.json");
  return j;
}

}  // namespace specpipe::test
