#pragma once
/// What a request asks for and what it gets back.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/sampling.h"

namespace specpipe {

struct GenerationParams {
  int32_t max_tokens = 64;
  cpu::SamplingParams sampling;  ///< temperature 0 = greedy
  uint64_t seed = 0;             ///< seeds the request's own RNG stream
  bool stop_at_eos = true;
  std::vector<int32_t> eos_ids;  ///< empty: the model's EOS ids
};

/// Why a request ended. context: it reached the model's max positions.
enum class FinishReason { length, eos, stop, context, cancelled, error };
const char* to_string(FinishReason reason);

struct GenerationResult {
  std::vector<int32_t> tokens;  ///< generated tokens (the EOS token included if hit)
  FinishReason finish = FinishReason::length;
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;  ///< reused from the prefix cache
  double prefill_ms = 0;             ///< prompt forward up to the first token
  double decode_ms = 0;              ///< everything after the first token
  /// Decode speed over the tokens after the first (the first comes from prefill).
  double decode_tokens_per_s() const;
};

}  // namespace specpipe
