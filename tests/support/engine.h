#pragma once
/// Helpers for tests that drive the actor pipeline through the Engine.
#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

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

/// Whether the suites run with a BF16 K/V store (SPECPIPE_TEST_KV_DTYPE=bf16 on a GPU).
bool kv_bf16();

/// The 96 greedy tokens an engine must produce for the golden case `golden_case`: the
/// reference's (target_greedy_96), or with a BF16 K/V store plain greedy decoding of the
/// same store (a plain engine of demo_engine_config, computed once per case): rounding
/// the keys and values moves some tokens off the FP32 reference, and speculation, offload
/// and batching must still give exactly plain decoding's tokens.
std::vector<int32_t> expected_greedy(const nlohmann::json& golden_case);

}  // namespace specpipe::test
