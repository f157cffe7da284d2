#pragma once
/// The draft side of speculative sampling: proposing one token from the draft model's
/// logits and keeping the distribution it was drawn from, which acceptance needs to
/// judge it (pipeline/acceptance.h).
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "pipeline/rng.h"

namespace specpipe {

/// Writes q = cpu::sampling_distribution(draft_logits, params) to `q_out` (size vocab)
/// and returns a draw from it, using exactly one rng.uniform() (cpu::sample_from).
/// Temperature 0 drafts greedily: returns cpu::argmax(draft_logits), leaves `q_out`
/// empty (a deterministic proposal, a point mass for accept_sampling) and draws nothing.
/// Throws Error(invalid_argument) for empty logits or a negative or non-finite temperature.
int32_t draft_sample(std::span<const float> draft_logits, const cpu::SamplingParams& params, Rng& rng,
                     std::vector<float>& q_out);

}  // namespace specpipe
