#include "pipeline/draft_sampling.h"

#include "core/error.h"

namespace specpipe {

int32_t draft_sample(std::span<const float> draft_logits, const cpu::SamplingParams& params, Rng& rng,
                     std::vector<float>& q_out) {
  if (draft_logits.empty()) fail(ErrorCode::invalid_argument, "draft_sample: the draft logits are empty");
  if (params.temperature == 0.0f) {
    q_out.clear();
    return cpu::argmax(draft_logits);
  }
  cpu::sampling_distribution(draft_logits, params, q_out);  // validates the temperature
  return cpu::sample_from(q_out, rng.uniform());
}

}  // namespace specpipe
