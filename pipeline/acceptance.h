#pragma once
/// Step 4 of a speculative round (docs/ARCHITECTURE.md section 3): turning the target's
/// logits over a verify window [pending, d_1..d_g] into a verdict, so that the tokens
/// emitted are exactly the target's: the same tokens as plain greedy decoding, or, when
/// sampling, the same distribution as sampling from the target alone.
///
/// `target_row(i)` returns row i of the window's logits (size vocab), the target's
/// next-token logits after window token i: row i judges d_{i+1} and row g gives the
/// bonus token. Rows are asked for lazily, in order, and only as far as the verdict
/// needs them, so a caller may compute them on demand; a returned row need only stay
/// valid until the next call. Both functions may run on several threads at once (their
/// scratch buffers are per thread) and allocate nothing per token once warm, beyond what
/// cpu::sampling_distribution does.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "pipeline/rng.h"

namespace specpipe {

/// The outcome of one window: the first `accepted` drafts stand, then `next_token` (a
/// correction after a rejection, or the bonus token when every draft stood). A round
/// therefore always emits accepted + 1 tokens.
struct Verdict {
  int32_t accepted = 0;
  int32_t next_token = -1;
};

/// A window's logits row by row; see the file comment.
using TargetRows = std::function<std::span<const float>(int32_t)>;

/// Greedy verification: `accepted` = k, the longest prefix with argmax(row i) == d_{i+1}
/// (cpu::argmax: the lowest id wins a tie, as plain decoding does), and `next_token` =
/// argmax(row k). With no drafts this is one plain decoding step.
/// Throws Error(invalid_argument) for an empty row, rows of unequal size or a draft id
/// outside [0, vocab).
Verdict accept_greedy(std::span<const int32_t> drafts, const TargetRows& target_row);

/// The argmax of a window's logits row i (lowest id wins a tie).
using TargetArgmax = std::function<int32_t(int32_t)>;
/// accept_greedy from each row's argmax alone (an ids-only forward: the device computed
/// them): the same verdict. Throws Error(invalid_argument) for a draft outside [0, vocab).
Verdict accept_greedy_ids(std::span<const int32_t> drafts, const TargetArgmax& row_argmax, int32_t vocab);

/// Lossless speculative sampling (Leviathan et al. 2023; Chen et al. 2023).
///
/// p_i = cpu::sampling_distribution(row i, params), the one shaping rule the drafter also
/// applied to make q. `q[i]` is the distribution d_{i+1} was drawn from (size vocab), or
/// empty for a deterministic proposal such as an n-gram match, which is a point mass on
/// d_{i+1}. For i = 0..g-1 one uniform u is drawn and d_{i+1} accepted iff
/// u < p_i(d)/q_i(d), i.e. with probability min(1, p/q). At the first rejection a second
/// uniform draws `next_token` from norm(max(0, p_i - q_i)) (from p_i itself should that
/// residual vanish, which only rounding can cause); when all g stand it draws the bonus
/// from p_g. So a verdict costs exactly (tests + 1) uniforms, in that order, and the same
/// RNG state always gives the same verdict.
///
/// Throws Error(invalid_argument) when drafts.size() != q.size(), a draft id is out of
/// range, a q row is not of vocab size or gives its own draft probability 0 (the draft
/// cannot have come from it), rows differ in size, or params.temperature is not > 0.
Verdict accept_sampling(std::span<const int32_t> drafts, const TargetRows& target_row,
                        std::span<const std::vector<float>> q, const cpu::SamplingParams& params,
                        Rng& rng);

/// accept_sampling with its uniforms from `uniform`, called in the order the Rng would
/// be: for a verdict made elsewhere from uniforms drawn ahead from a copy of the Rng (the
/// target's device, ForwardModel::computes_sampled_verdicts), and the check of it.
using Uniforms = std::function<double()>;
Verdict accept_sampling_from(std::span<const int32_t> drafts, const TargetRows& target_row,
                             std::span<const std::vector<float>> q, const cpu::SamplingParams& params,
                             const Uniforms& uniform);

/// The uniforms a sampling verdict over `drafts` drafts drew (see accept_sampling):
/// accepted + 2 after a rejection, drafts + 1 when every draft stood.
size_t sampling_uniforms_used(const Verdict& v, size_t drafts);

}  // namespace specpipe
