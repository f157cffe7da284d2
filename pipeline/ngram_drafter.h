#pragma once
/// Prompt-lookup drafting: proposes draft tokens by finding an earlier place in the
/// context (prompt plus generated tokens) that ends like the context does now, and
/// copying what came after it. Costs no model and is deterministic, so it serves as a
/// draft source for inputs that repeat themselves (code edits, quoting, summaries),
/// and as a drafter for tests that need one without a draft model.
#include <cstdint>
#include <span>
#include <vector>

namespace specpipe {

/// Which suffixes are looked up and how much is proposed.
struct NgramConfig {
  int32_t max_ngram = 3;      ///< longest suffix tried first
  int32_t min_ngram = 1;      ///< shortest suffix that may still count as a match
  int32_t max_proposals = 4;  ///< cap on the tokens proposed, whatever gamma asks
};

/// Up to min(max_proposals, gamma) tokens that followed the most recent earlier
/// occurrence of the longest matching suffix of `context` (n from max_ngram down to
/// min_ngram); empty when nothing matches or gamma == 0. The occurrence must end
/// before the context's last token (the suffix is not an occurrence of itself), but
/// may overlap the suffix, and the proposal may run up to the end of the context, so
/// a repeating pattern such as "a b a b a" proposes "b a".
///
/// Cost: one backwards scan, O(context.size() x max_ngram) token comparisons in the
/// worst case and usually far fewer (most positions differ at the first token, and the
/// scan stops at the most recent full max_ngram match): about 6 us for 8K tokens on
/// the development machine (NgramDrafter.LongContextStaysCheap prints it), fine once
/// per round. Throws Error(invalid_argument) for a negative gamma or a bad
/// config (min_ngram < 1, max_ngram < min_ngram, max_proposals < 1).
std::vector<int32_t> ngram_propose(std::span<const int32_t> context, int32_t gamma,
                                   const NgramConfig& config);

}  // namespace specpipe
