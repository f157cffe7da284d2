#pragma once
/// Picks the next token from a row of target logits: argmax when greedy, otherwise a
/// draw from the request's RNG over the distribution of cpu::sampling_distribution.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "pipeline/rng.h"

namespace specpipe {

class TokenSelector {
 public:
  TokenSelector(const cpu::SamplingParams& params, uint64_t seed) : params_(params), rng_(seed) {}
  int32_t select(std::span<const float> logits);
  bool greedy() const { return params_.temperature == 0.0f; }
  const cpu::SamplingParams& params() const { return params_; }
  Rng& rng() { return rng_; }

 private:
  cpu::SamplingParams params_;
  Rng rng_;
  std::vector<float> probs_;
};

}  // namespace specpipe
