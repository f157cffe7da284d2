#include "pipeline/token_selector.h"

namespace specpipe {

int32_t TokenSelector::select(std::span<const float> logits) {
  if (greedy()) return cpu::argmax(logits);
  cpu::sampling_distribution(logits, params_, probs_);
  return cpu::sample_from(probs_, rng_.uniform());
}

}  // namespace specpipe
