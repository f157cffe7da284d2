#include "tests/support/models.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "model/load_model.h"
#include "tests/support/test_paths.h"

namespace specpipe::test {

Transformer& model(const char* name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Transformer>> loaded;
  std::lock_guard lock(mutex);
  auto& slot = loaded[name];
  if (!slot) slot = load_transformer(model_dir(name));
  return *slot;
}

}  // namespace specpipe::test
