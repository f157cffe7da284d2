#include "tests/support/chi_square.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace specpipe::test {
namespace {

/// z with P(Z > z) = alpha for a standard normal Z, by bisection (alpha in (0, 0.5]).
double normal_upper_quantile(double alpha) {
  double lo = 0, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(mid / std::sqrt(2.0)) > alpha ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace

double chi_square_critical(int dof, double alpha) {
  if (dof < 1 || !(alpha > 0 && alpha <= 0.5)) throw std::invalid_argument("chi_square_critical: bad arguments");
  const double k = dof;
  const double s = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - s + normal_upper_quantile(alpha) * std::sqrt(s), 3);
}

std::string GoodnessOfFit::describe() const {
  return fmt::format("chi2 = {:.2f} (dof {}, critical {:.2f}, {} samples), {} outside support",
                     statistic, dof, critical, samples, outside_support);
}

GoodnessOfFit chi_square_gof(std::span<const int64_t> observed, std::span<const double> probs,
                             double alpha) {
  if (observed.size() != probs.size()) throw std::invalid_argument("chi_square_gof: size mismatch");
  GoodnessOfFit fit;
  fit.samples = std::accumulate(observed.begin(), observed.end(), int64_t{0});
  const double total_prob = std::accumulate(probs.begin(), probs.end(), 0.0);
  if (!(total_prob > 0) || fit.samples == 0) throw std::invalid_argument("chi_square_gof: nothing to test");

  // (expected, observed) per bin, the small ones pooled.
  std::vector<std::pair<double, double>> kept;
  std::pair<double, double> pool{0, 0};
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) {
      fit.outside_support += observed[i];
      continue;
    }
    const double expected = probs[i] / total_prob * static_cast<double>(fit.samples);
    auto& bin = expected < 5 ? pool : kept.emplace_back(0, 0);
    bin.first += expected;
    bin.second += static_cast<double>(observed[i]);
  }
  if (pool.first > 0) {
    if (pool.first >= 5 || kept.empty()) {
      kept.push_back(pool);
    } else {
      auto smallest = std::min_element(kept.begin(), kept.end());
      smallest->first += pool.first;
      smallest->second += pool.second;
    }
  }
  fit.bins = static_cast<int>(kept.size());
  fit.dof = fit.bins - 1;
  for (const auto& [expected, seen] : kept) fit.statistic += (seen - expected) * (seen - expected) / expected;
  // One bin (a point mass) leaves nothing to test but the support.
  fit.critical = fit.dof >= 1 ? chi_square_critical(fit.dof, alpha) : 0.0;
  return fit;
}

}  // namespace specpipe::test
