#pragma once
/// Plain (non-speculative) decoding of one request: prefill, then one forward per token.
/// The baseline speculation is measured against, and the reference its output must equal.
#include <cstdint>
#include <functional>
#include <span>

#include "kvstore/kv_store.h"
#include "model/forward_model.h"
#include "pipeline/generation.h"

namespace specpipe {

class PlainGenerator {
 public:
  PlainGenerator(ForwardModel& model, KvStore& kv, int32_t prefill_chunk = 256)
      : model_(model), kv_(kv), prefill_chunk_(prefill_chunk) {}

  /// Generates up to params.max_tokens tokens after `prompt`; `on_token` sees each token
  /// as it is chosen. The sequence's KV is released on return, also when this throws.
  GenerationResult generate(std::span<const int32_t> prompt, const GenerationParams& params,
                            const std::function<void(int32_t)>& on_token = {});

 private:
  ForwardModel& model_;
  KvStore& kv_;
  int32_t prefill_chunk_;
};

}  // namespace specpipe
