#include "pipeline/acceptance.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace specpipe {
namespace {

/// Row i of the window, checked to have the vocabulary size of row 0.
std::span<const float> row_of(const TargetRows& target_row, int32_t i, size_t vocab) {
  const std::span<const float> row = target_row(i);
  if (row.size() != vocab)
    fail(ErrorCode::invalid_argument, "acceptance: target row {} has {} logits, row 0 has {}", i,
         row.size(), vocab);
  return row;
}

/// Row 0, which fixes the vocabulary size, after checking every draft id against it.
std::span<const float> first_row(std::span<const int32_t> drafts, const TargetRows& target_row) {
  const std::span<const float> row = target_row(0);
  if (row.empty()) fail(ErrorCode::invalid_argument, "acceptance: target row 0 is empty");
  for (size_t i = 0; i < drafts.size(); ++i)
    if (drafts[i] < 0 || static_cast<size_t>(drafts[i]) >= row.size())
      fail(ErrorCode::invalid_argument, "acceptance: draft {} is token {}, outside the vocabulary [0, {})",
           i, drafts[i], row.size());
  return row;
}

/// The checks that need no logits, done before any row is asked for.
void check_sampling_request(std::span<const int32_t> drafts, std::span<const std::vector<float>> q,
                            const cpu::SamplingParams& params) {
  if (!(params.temperature > 0.0f) || !std::isfinite(params.temperature))
    fail(ErrorCode::invalid_argument,
         "accept_sampling: temperature must be a positive number, got {} (greedy windows go to "
         "accept_greedy)",
         params.temperature);
  if (drafts.size() != q.size())
    fail(ErrorCode::invalid_argument, "accept_sampling: {} drafts but {} draft distributions",
         drafts.size(), q.size());
}

void check_draft_distributions(std::span<const int32_t> drafts, std::span<const std::vector<float>> q,
                               size_t vocab) {
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i].empty()) continue;  // a point mass on the draft
    if (q[i].size() != vocab)
      fail(ErrorCode::invalid_argument,
           "accept_sampling: draft distribution {} has {} entries, the vocabulary has {}", i,
           q[i].size(), vocab);
    const float qd = q[i][static_cast<size_t>(drafts[i])];
    // Also rejects NaN. A draft drawn from q always has q(d) > 0, and the test u < p/q
    // divides by it.
    if (!(qd > 0.0f))
      fail(ErrorCode::invalid_argument,
           "accept_sampling: draft {} (token {}) has probability {} under its own draft "
           "distribution, so it cannot have been drawn from it",
           i, drafts[i], qd);
  }
}

/// Per-thread buffers, so a verdict allocates nothing once they have grown to the vocabulary.
struct Scratch {
  std::vector<float> p;
  std::vector<float> residual;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

/// The correction after d was rejected at a row with target distribution p and draft
/// distribution q (empty: a point mass on d): a draw from norm(max(0, p - q)).
int32_t draw_residual(std::span<const float> p, std::span<const float> q, int32_t d, double u,
                      std::vector<float>& residual) {
  residual.assign(p.begin(), p.end());
  if (q.empty()) {
    residual[static_cast<size_t>(d)] = 0.0f;
  } else {
    for (size_t t = 0; t < residual.size(); ++t) residual[t] = std::max(0.0f, p[t] - q[t]);
  }
  bool any = false;
  for (float r : residual) any = any || r > 0.0f;
  // The residual is all zero only where p == q up to rounding, and then p is the
  // distribution it stands for.
  return cpu::sample_from(any ? std::span<const float>(residual) : p, u);
}

}  // namespace

Verdict accept_greedy(std::span<const int32_t> drafts, const TargetRows& target_row) {
  const size_t vocab = first_row(drafts, target_row).size();
  return accept_greedy_ids(
      drafts, [&](int32_t i) { return cpu::argmax(row_of(target_row, i, vocab)); }, static_cast<int32_t>(vocab));
}

Verdict accept_greedy_ids(std::span<const int32_t> drafts, const TargetArgmax& row_argmax, int32_t vocab) {
  for (size_t i = 0; i < drafts.size(); ++i)
    if (drafts[i] < 0 || drafts[i] >= vocab)
      fail(ErrorCode::invalid_argument, "acceptance: draft {} is token {}, outside the vocabulary [0, {})", i,
           drafts[i], vocab);
  Verdict verdict;
  for (;;) {
    const int32_t best = row_argmax(verdict.accepted);
    const auto k = static_cast<size_t>(verdict.accepted);
    if (k == drafts.size() || best != drafts[k]) {
      verdict.next_token = best;
      return verdict;
    }
    ++verdict.accepted;
  }
}

Verdict accept_sampling(std::span<const int32_t> drafts, const TargetRows& target_row,
                        std::span<const std::vector<float>> q, const cpu::SamplingParams& params,
                        Rng& rng) {
  return accept_sampling_from(drafts, target_row, q, params, [&rng] { return rng.uniform(); });
}

size_t sampling_uniforms_used(const Verdict& v, size_t drafts) {
  return static_cast<size_t>(v.accepted) == drafts ? drafts + 1 : static_cast<size_t>(v.accepted) + 2;
}

Verdict accept_sampling_from(std::span<const int32_t> drafts, const TargetRows& target_row,
                             std::span<const std::vector<float>> q, const cpu::SamplingParams& params,
                             const Uniforms& uniform) {
  check_sampling_request(drafts, q, params);
  std::span<const float> row = first_row(drafts, target_row);
  const size_t vocab = row.size();
  check_draft_distributions(drafts, q, vocab);
  Scratch& s = scratch();
  Verdict verdict;
  for (size_t i = 0; i < drafts.size(); ++i) {
    cpu::sampling_distribution(row, params, s.p);
    const auto d = static_cast<size_t>(drafts[i]);
    const double p_d = s.p[d];
    const double q_d = q[i].empty() ? 1.0 : double{q[i][d]};  // checked > 0
    // Accepted with probability min(1, p/q): u < 1 always passes when p_d >= q_d.
    if (!(uniform() < p_d / q_d)) {
      verdict.next_token = draw_residual(s.p, q[i], drafts[i], uniform(), s.residual);
      return verdict;
    }
    ++verdict.accepted;
    row = row_of(target_row, verdict.accepted, vocab);
  }
  cpu::sampling_distribution(row, params, s.p);
  verdict.next_token = cpu::sample_from(s.p, uniform());
  return verdict;
}

}  // namespace specpipe
