#pragma once
/// Helpers for tests that drive the actor pipeline through the Engine.
#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "actors/engine.h"

namespace specpipe::test {

/// An engine on the vendored demo pair with test-friendly defaults.
PipelineConfig demo_engine_config(int32_t gamma = 4, int32_t block_size = 16);

/// Collects completions of many concurrent requests; wait() blocks until `expected`
/// have completed.
class Completions {
 public:
  std::shared_ptr<actors::ResponseSink> sink();
  std::map<RequestId, actors::Completion> wait(size_t expected);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<RequestId, actors::Completion> done_;
};

/// A greedy request for `max_tokens` tokens that ignores EOS (as the golden data does).
actors::RequestSpec greedy_request(std::vector<int32_t> prompt, int32_t max_tokens, int32_t gamma = -1);

}  // namespace specpipe::test
