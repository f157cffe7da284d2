#pragma once
/// Pearson's chi-square goodness-of-fit test, for checking that a sampler's histogram
/// follows the distribution it promises (the speculative sampling tests).
#include <cstdint>
#include <span>
#include <string>

namespace specpipe::test {

/// Upper-tail critical value of the chi-square distribution with `dof` degrees of
/// freedom: P(X > value) = alpha, by the Wilson-Hilferty cube-root normal
/// approximation (within about 3% of the exact value for dof >= 1, on the high side
/// for small dof).
double chi_square_critical(int dof, double alpha);

struct GoodnessOfFit {
  double statistic = 0;  ///< sum over bins of (observed - expected)^2 / expected
  int bins = 0;          ///< after pooling
  int dof = 0;           ///< bins - 1
  double critical = 0;   ///< chi_square_critical(dof, alpha)
  int64_t samples = 0;
  /// Observations in bins of probability 0: a sampler that produces any is wrong
  /// whatever the statistic says.
  int64_t outside_support = 0;
  bool passes() const { return outside_support == 0 && statistic <= critical; }
  std::string describe() const;  ///< "chi2 = .. (dof .., critical ..), .. outside support"
};

/// Tests `observed` counts against `probs` (same length, any positive scale; normalised
/// here). Bins whose expected count is under 5 are pooled into one, and that pool, if
/// still under 5, joins the smallest remaining bin, as the chi-square approximation
/// needs.
GoodnessOfFit chi_square_gof(std::span<const int64_t> observed, std::span<const double> probs,
                             double alpha = 1e-3);

}  // namespace specpipe::test
