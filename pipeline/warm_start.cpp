#include "pipeline/warm_start.h"

#include <algorithm>
#include <vector>

namespace specpipe {

DraftRoundChains draft_round_chains(int32_t gamma, bool draft_ahead, bool drafts_on_device, int32_t max_chain_steps) {
  DraftRoundChains r;
  if (gamma < 1) return r;
  const int32_t longer = 2 * gamma + 1;  // with draft-ahead: the drafts, then its chain
  const bool launches =
      drafts_on_device && gamma <= max_chain_steps && !(draft_ahead && longer > std::min(kMaxAheadSteps, max_chain_steps));
  if (launches) r.launched = draft_ahead ? longer : gamma;
  else r.chain = gamma;
  if (draft_ahead && gamma + 1 <= kMaxAheadSteps) r.ahead = gamma + 1;
  return r;
}

int32_t warm_verify_windows(ForwardModel& target, KvStore& kv, int32_t max_window) {
  if (max_window < 1) return 0;
  DiscardKvRows sink;
  Logits logits;
  const std::vector<int32_t> tokens(static_cast<size_t>(max_window), 0);
  const SeqId seq = kv.add_sequence({});
  int32_t forwards = 0;
  try {
    kv.reserve(seq, max_window);
    for (int32_t n = 1; n <= max_window; ++n)
      for (int rep = 0; rep < 2; ++rep) {  // the first runs eagerly, the second is captured
        const ForwardWindow w{seq, std::span<const int32_t>(tokens).first(static_cast<size_t>(n)), LogitsMode::all,
                              -1, /*ids_only=*/true};
        target.forward({&w, 1}, kv, sink, logits);
        ++forwards;
      }
  } catch (...) {
    kv.release(seq);
    throw;
  }
  kv.release(seq);
  return forwards;
}

}  // namespace specpipe
