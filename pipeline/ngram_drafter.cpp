#include "pipeline/ngram_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace specpipe {
namespace {

void check_config(const NgramConfig& config, int32_t gamma) {
  if (config.min_ngram < 1) {
    fail(ErrorCode::invalid_argument, "ngram_propose: min_ngram is {}, must be >= 1", config.min_ngram);
  }
  if (config.max_ngram < config.min_ngram) {
    fail(ErrorCode::invalid_argument, "ngram_propose: max_ngram {} is below min_ngram {}",
         config.max_ngram, config.min_ngram);
  }
  if (config.max_proposals < 1) {
    fail(ErrorCode::invalid_argument, "ngram_propose: max_proposals is {}, must be >= 1",
         config.max_proposals);
  }
  if (gamma < 0) fail(ErrorCode::invalid_argument, "ngram_propose: gamma is {}, must be >= 0", gamma);
}

}  // namespace

std::vector<int32_t> ngram_propose(std::span<const int32_t> context, int32_t gamma,
                                   const NgramConfig& config) {
  check_config(config, gamma);
  const size_t size = context.size();
  const auto budget = static_cast<size_t>(std::min(gamma, config.max_proposals));
  if (size < 2 || budget == 0) return {};

  // One pass from the most recent candidate backwards. For an occurrence ending at
  // `end` (its last token, at most size - 2), `length` is how many tokens match the
  // context's suffix backwards from there, capped at max_ngram. The first position to
  // reach a length is the most recent occurrence of that n-gram, so keeping the
  // strictly longer matches only yields "longest n first, then most recent".
  const auto max_ngram = static_cast<size_t>(config.max_ngram);
  const int32_t last = context[size - 1];
  size_t best_length = 0;
  size_t best_end = 0;
  for (size_t end = size - 1; end-- > 0;) {
    if (context[end] != last) continue;
    const size_t limit = std::min(max_ngram, end + 1);  // the occurrence starts at >= 0
    size_t length = 1;
    while (length < limit && context[end - length] == context[size - 1 - length]) ++length;
    if (length > best_length) {
      best_length = length;
      best_end = end;
      if (length == max_ngram) break;  // nothing older can beat the most recent full match
    }
  }
  if (best_length < static_cast<size_t>(config.min_ngram)) return {};
  const size_t first = best_end + 1;
  const size_t count = std::min(budget, size - first);
  return {context.begin() + static_cast<std::ptrdiff_t>(first),
          context.begin() + static_cast<std::ptrdiff_t>(first + count)};
}

}  // namespace specpipe
