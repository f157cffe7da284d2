#include "tests/support/engine.h"

#include "tests/support/test_paths.h"

#include <cstdlib>

namespace specpipe::test {

PipelineConfig demo_engine_config(int32_t gamma, int32_t block_size) {
  PipelineConfig c;
  c.models.target = model_dir("demo-target").string();
  c.models.draft = model_dir("demo-draft").string();
  c.drafter.gamma = gamma;
  c.kv.block_size = block_size;
  c.kv.tokens = 32768;
  // The GPU machine runs the same engine suites on its device (tools/gpu/engine_check.sh).
  if (const char* device = std::getenv("SPECPIPE_TEST_DEVICE"); device && *device) c.device = device;
  return c;
}

std::shared_ptr<actors::ResponseSink> Completions::sink() {
  return std::make_shared<actors::CallbackSink>(nullptr, [this](const actors::Completion& c) {
    std::lock_guard lock(mutex_);
    done_[c.id] = c;
    cv_.notify_all();
  });
}

std::map<RequestId, actors::Completion> Completions::wait(size_t expected) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done_.size() >= expected; });
  return done_;
}

actors::RequestSpec greedy_request(std::vector<int32_t> prompt, int32_t max_tokens, int32_t gamma) {
  actors::RequestSpec r;
  r.prompt = std::move(prompt);
  r.params.max_tokens = max_tokens;
  r.params.stop_at_eos = false;
  r.gamma = gamma;
  return r;
}

}  // namespace specpipe::test
