#pragma once
/// The SpecPV partial view of one sequence's committed K/V (ARCHITECTURE.md section 5):
/// the sink (the first tokens), the retrieved blocks, and the recent region - the last
/// window_tokens tokens and every token since the last full verification (the
/// speculative buffer of tokens verified only partially). The verify window's own K/V
/// are read from the forward's window buffer as always. The view is a list of the
/// sequence's blocks in position order, so attention gathers it from the paged pool with
/// no copy: every block but the last is full, and the last is the sequence's last block.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace specpipe {

/// Budgets in tokens, except retrieval_blocks.
struct ViewBudget {
  int32_t sink_tokens = 0;
  int32_t retrieval_blocks = 0;
  int32_t window_tokens = 0;
  int32_t buffer_tokens = 0;
};

/// Why a partial view cannot be used for a round (the round then verifies fully).
enum class ViewRefusal { none, covers_context, buffer_full };

/// The sequence's blocks (indices into its block table, ascending, unique) of one
/// layer's view of a prefix of `length` tokens whose first `verified` tokens were last
/// checked by a full verification. `retrieved`: that layer's retrieved blocks (any
/// order; those inside the sink or the recent region are not counted twice). Returns
/// nullopt and sets `why` when the view would be the whole prefix (covers_context) or
/// the tokens since the last full verification exceed buffer_tokens (buffer_full).
std::optional<std::vector<int32_t>> view_blocks(int32_t length, int32_t verified, int32_t block_size,
                                                const ViewBudget& budget, std::span<const int32_t> retrieved,
                                                ViewRefusal* why = nullptr);

/// Tokens of a view whose blocks are `blocks` (from view_blocks) over a prefix of
/// `length` tokens: full blocks, then what the last block holds.
int32_t view_length(std::span<const int32_t> blocks, int32_t length, int32_t block_size);

/// The first block of the recent region (used to keep retrieval out of it).
int32_t recent_first_block(int32_t length, int32_t verified, int32_t block_size, int32_t window_tokens);

}  // namespace specpipe
