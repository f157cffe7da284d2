#pragma once
/// SpecPV rounds of one request in the scheduler (ARCHITECTURE.md section 5, "Partial
/// view"): what a partial or full round sends and what its verdict means.
///
/// Since the last full verification a request has the tokens s_0..s_m: s_0 was the
/// pending token then (at position `verified`), s_m is the pending token now; the K/V
/// of s_0..s_{m-1} were computed over partial views. s_1..s_f are final (streamed:
/// approximate rounds), s_{f+1}..s_m provisional (held back: exact rounds). A full round
/// rewinds the K/V to `verified` and runs [s_0..s_{f-1} | s_f | s_{f+1}..s_m, drafts]:
/// the final tokens only get their K/V recomputed, the provisional ones are judged like
/// drafts, so the first one the target disagrees with is replaced by the target's token
/// - the output of plain greedy decoding.
#include <cstdint>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "pipeline/view_planner.h"

namespace specpipe::actors {

struct ViewState {
  int32_t verified = 0;            ///< KV length the last full verification checked
  std::vector<int32_t> since_full;  ///< s_0..s_m; empty: no partial round since
  int32_t final_count = 0;         ///< f
  int32_t rounds_since_full = 0;
  bool retrieval_ready = false;    ///< a full round has selected retrieved blocks
  int32_t draft_rewind = -1;       ///< for the next round's drafter (after a rollback)

  int32_t provisional() const {
    return since_full.empty() ? 0 : static_cast<int32_t>(since_full.size()) - 1 - final_count;
  }
  const int32_t* provisional_begin() const { return since_full.data() + 1 + final_count; }
};

/// What the scheduler knows beside the decision, to keep a partial view safe.
struct ViewContext {
  int32_t position;         ///< KV length (position of the pending token)
  int32_t block_size;
  bool sampled;             ///< sampled requests are verified fully (lossless sampling)
  bool held_would_stop;     ///< held-back tokens already reach a stop (max_tokens or EOS)
  bool near_context_end;    ///< too close to the model's positions for a later full round
  bool kv_redo;             ///< the last round's K/V did not reach the pool
};

/// Why a partial view the strategy asked for is not given (the round verifies fully), or
/// "" when it is. "covers_context": the view would hold (about) the whole prefix.
std::string view_refusal(const ViewState& s, const ViewDecision& d, const ViewContext& c);

/// Fills a full round's window fields (rewind, recompute, pending, provisional) from the
/// tokens since the last full verification; nothing to do when there were none.
void fill_full_round(const ViewState& s, RoundItem& item);

/// The meaning of a round's verdict for the request.
struct ViewOutcome {
  std::vector<int32_t> to_stream;  ///< tokens for the client now, in order
  std::vector<int32_t> appended;   ///< new context tokens for the drafter
  int32_t new_position = 0;        ///< KV length after the round
  int32_t proposed = 0;            ///< new drafts judged
  int32_t accepted = 0;            ///< of them accepted (0 after a rollback)
  int32_t rolled_back = 0;         ///< provisional tokens dropped
};

/// Settles a round the verifier judged (item.accepted over provisional + drafts,
/// item.next_token) and updates the state. `position`: the KV length before the round.
ViewOutcome settle_round(ViewState& s, const RoundItem& item, int32_t position);

}  // namespace specpipe::actors
