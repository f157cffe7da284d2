#pragma once
/// Turning a row of logits into a token: argmax, and temperature / top-k / top-p
/// sampling from a uniform draw supplied by the caller (the RNG lives with the request).
#include <cstdint>
#include <span>
#include <vector>

namespace specpipe::cpu {

/// Index of the largest logit; the lowest index wins a tie (as torch.argmax).
int32_t argmax(std::span<const float> logits);

struct SamplingParams {
  float temperature = 0.0f;  ///< 0 = greedy
  int32_t top_k = 0;         ///< 0 = off
  float top_p = 1.0f;        ///< 1 = off
};

/// The distribution a request samples from, written into `probs` (size = vocab):
///   1. divide the logits by the temperature and softmax them;
///   2. top-k: keep the k most probable tokens (ties broken by lower id);
///   3. top-p: of those, keep the smallest most-probable-first prefix whose probability
///      mass reaches top_p (at least one token);
///   4. renormalise over the kept tokens; every other token gets exactly 0.
/// The same rule shapes the target's p and the draft's q in speculative sampling.
/// Requires temperature > 0.
void sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                           std::vector<float>& probs);

/// Inverse-CDF draw: the first token whose cumulative probability exceeds u * total
/// (u in [0, 1)); skips zero-probability tokens.
int32_t sample_from(std::span<const float> probs, double u);

}  // namespace specpipe::cpu
