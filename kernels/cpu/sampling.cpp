#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace specpipe::cpu {

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) fail(ErrorCode::invalid_argument, "argmax of an empty row");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

void sampling_distribution(std::span<const float> logits, const SamplingParams& params,
                           std::vector<float>& probs) {
  if (!(params.temperature > 0.0f) || !std::isfinite(params.temperature))
    fail(ErrorCode::invalid_argument, "sampling temperature must be a positive number, got {}",
         params.temperature);
  const size_t n = logits.size();
  probs.resize(n);
  const float inv_t = 1.0f / params.temperature;
  float mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, l * inv_t);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += (probs[i] = std::exp(logits[i] * inv_t - mx));

  const bool use_k = params.top_k > 0 && static_cast<size_t>(params.top_k) < n;
  const bool use_p = params.top_p < 1.0f;
  if (!use_k && !use_p) {
    for (float& p : probs) p = static_cast<float>(p / sum);
    return;
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  const size_t keep_k = use_k ? static_cast<size_t>(params.top_k) : n;
  auto by_prob = [&](int32_t a, int32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep_k), order.end(), by_prob);
  size_t keep = keep_k;
  if (use_p) {
    double mass_k = 0;
    for (size_t i = 0; i < keep_k; ++i) mass_k += probs[order[i]];
    double cum = 0;
    for (keep = 0; keep < keep_k;) {
      cum += probs[order[keep++]];
      if (cum >= params.top_p * mass_k) break;
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += probs[order[i]];
  std::vector<float> filtered(n, 0.0f);
  for (size_t i = 0; i < keep; ++i) filtered[order[i]] = static_cast<float>(probs[order[i]] / kept);
  probs.swap(filtered);
}

int32_t sample_from(std::span<const float> probs, double u) {
  double total = 0;
  for (float p : probs) total += p;
  if (!(total > 0)) fail(ErrorCode::invalid_argument, "sampling from an all-zero distribution");
  const double target = u * total;
  double cum = 0;
  int32_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cum += probs[i];
    last = static_cast<int32_t>(i);
    if (cum > target) return last;
  }
  return last;  // u * total rounding at the very top
}

}  // namespace specpipe::cpu
