#include "tests/support/engine.h"

#include "tests/support/test_paths.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "tests/support/golden.h"

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
  // ... and with a BF16 K/V store there (SPECPIPE_TEST_KV_DTYPE=bf16): exact against the
  // golden tokens as with FP32 wherever the suites compare tokens.
  if (const char* dtype = std::getenv("SPECPIPE_TEST_KV_DTYPE"); dtype && *dtype) c.kv.dtype = dtype;
  return c;
}

bool kv_bf16() {
  const char* dtype = std::getenv("SPECPIPE_TEST_KV_DTYPE");
  return dtype && std::string(dtype) == "bf16";
}

std::vector<int32_t> expected_greedy(const nlohmann::json& golden_case) {
  if (!kv_bf16()) return ids(golden_case["target_greedy_96"]);
  static std::mutex mutex;
  static std::map<std::vector<int32_t>, std::vector<int32_t>> plain;  // prompt -> tokens
  static std::unique_ptr<actors::Engine> engine;
  const std::vector<int32_t> prompt = ids(golden_case["prompt_ids"]);
  const std::lock_guard lock(mutex);
  if (const auto it = plain.find(prompt); it != plain.end()) return it->second;
  if (!engine) {
    PipelineConfig c = demo_engine_config();
    c.drafter.type = DrafterKind::none;
    engine = std::make_unique<actors::Engine>(c);
  }
  const actors::Completion got = engine->generate(greedy_request(prompt, 96));
  return plain[prompt] = got.tokens;
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
